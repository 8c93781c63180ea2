"""One client connection: decode requests, answer them in order, write the responses.

Two tasks serve a connection and take turns at reading::

    socket --read turn--> request --(nothing being answered)--> answered by the reader itself
                                  --(one being answered)------> [queued] --> answered next

* Whichever task holds the **read turn** feeds received bytes to a sans-I/O
  ``ServerConnection`` until a request is complete. If no request of this connection is being
  answered, it answers this one itself, having first passed the read turn to the other task;
  so a client that waits for each answer (a producer with one request in flight) gets it with
  no hand-off between tasks, and the response goes out in the same pass of the event loop that
  read the request. A handler that returns at once leaves the other task nothing to do: it
  wakes, finds the turn taken back, and sleeps again.
* While a request is being answered, the reader queues what it reads (a client may pipeline
  many requests before it reads anything), and the answering task works through the queue
  before giving up. Requests are answered one at a time, in request order: Kafka handles the
  requests of one connection in order, and producers with several requests in flight rely on
  it (two pipelined Produce requests to one partition must append in the order sent). A
  long-polling Fetch therefore delays the requests behind it on the same connection, exactly
  as in Kafka, but never the reading of them nor any other connection.
* Responses are written by the task that answered the request: bytes with one ``send``
  (``writev`` for several chunks), stored message sets (storage ``FileSlice`` chunks) with
  ``os.sendfile`` from the segment file, so fetched bytes never pass through Python (but
  for old consumers' ``DownConvertedRecords``, converted as they are written). Plain
  sockets are read and written with non-blocking calls that wait only when the kernel says so.

The queue is bounded, so a client that sends without reading stops being read from. Request
memory is bounded across connections too (``queued.max.request.bytes``, broker.request_memory):
the reader reserves each frame's length once its size prefix is in, before it reads again, and
the reservation is given back when the request has been handled.
Produce with ``acks=0`` gets no response. Bytes that do not decode (``ProtocolError``) stop
the reading; the requests decoded before them are answered, then the connection closes. When
the client closes its end the connection goes at once, requests in flight included (a
long-polling Fetch does not outlive its client: the other task, reading, sees the close), as
in Kafka. An unexpected exception in a handler is logged and closes this connection only. A
connection with nothing in flight and nothing received for ``connections.max.idle.ms`` is
closed.

On an SSL or SASL_SSL listener the socket is wrapped in a ``trio.SSLStream`` first (a failed
handshake closes the connection), and the principal comes from the client certificate when
``ssl.client.auth`` asked for one. Fetched slices then cannot go out with sendfile: they are
read from the segment file in a worker thread, 1 MiB at a time, and encrypted like any
response. On a SASL listener requests are served only after authentication
(:meth:`Connection._authenticate`, with broker.security.authenticator deciding what each
frame before it means); a refused client gets its answer, if the protocol has room for one,
then the connection closes with a log line naming the client's address.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections import deque

import trio

from minikafka.broker.config import Listener
from minikafka.broker.down_conversion import DownConvertedRecords
from minikafka.broker.handlers import HANDLERS, CloseConnection
from minikafka.broker.security import ANONYMOUS
from minikafka.protocol.errors import ProtocolError
from minikafka.protocol.framing import Request, ServerConnection

logger = logging.getLogger(__name__)

RECEIVE_SIZE = 65536
# Decoded requests waiting while another is answered; beyond this the reader stops reading.
MAX_QUEUED_REQUESTS = 32
# Largest frame before authentication (Kafka's SASL receive limit, 512 KiB).
MAX_UNAUTHENTICATED_FRAME = 524288
# Bytes of a fetched file slice read at a time when TLS rules out sendfile.
TLS_FILE_CHUNK = 1 << 20
# Most bytes chunks of a response given to one writev (IOV_MAX is 1024 on Linux); a longer run
# of chunks is joined instead.
MAX_WRITEV_CHUNKS = 64


class _PeerClosed(Exception):
    """The client closed its end (or the connection broke): like Kafka, drop the connection
    and whatever is in flight."""


class _Refused(Exception):
    """TLS or SASL refused the client: logged as a warning with its address, then closed."""


def _first(group: BaseException) -> BaseException:
    """The first exception inside nested exception groups."""
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


class Connection:
    """The broker side of one TCP connection (see the module docstring for how it is served).

    ``principal`` is Kafka's ``User:...`` for the client once TLS and SASL are through."""

    def __init__(self, broker, stream: trio.SocketStream, listener: Listener | None = None,
                 tls_context=None) -> None:
        self.broker = broker
        self.stream = stream
        self.socket = stream.socket
        self._fd = self.socket.fileno()
        self.listener = listener or broker.config.listener
        self._listener_name = self.listener.name
        self._tls_context = tls_context
        self.principal = ANONYMOUS
        try:
            peer = self.socket.getpeername()
            self.peer = f"{peer[0]}:{peer[1]}"
            self.peer_host = peer[0]
        except OSError:
            self.peer = "?"
            self.peer_host = ""
        self.protocol = ServerConnection(max_frame_size=broker.config.socket_request_max_bytes)
        idle_ms = broker.config.connections_max_idle_ms
        self._idle_seconds = math.inf if idle_ms < 0 else idle_ms / 1000
        self._idle_scope = trio.CancelScope()
        # The idle clock restarts whenever bytes arrive or the last request in flight is
        # answered; one watcher task reads it, so a request costs no deadline updates.
        self._last_activity = 0.0
        self._in_flight = 0
        self._memory = broker.request_memory
        self._reserved = 0  # bytes this connection holds in the pool
        self._frame_reserved = 0  # of which for the frame being read
        self._request_sizes: deque[int] = deque()  # reservation of each request read, in order
        # The two serving tasks' shared state (module docstring).
        self._reading = False  # a task holds the read turn
        self._read_turn = trio.lowlevel.ParkingLot()
        self._read_over = False  # bad bytes came: nothing more is read
        self._answering = False  # a task is answering requests (and works through _queue)
        self._queue: deque[Request] = deque()
        self._queue_space = trio.lowlevel.ParkingLot()

    async def run(self) -> None:
        """Serve the connection until the peer leaves, misbehaves or idles out; never raises
        (except cancellation, when the broker shuts down)."""
        logger.debug("connection from %s", self.peer)
        try:
            with self._idle_scope:
                async with trio.open_nursery() as nursery:
                    self._last_activity = trio.current_time()
                    if self._idle_seconds != math.inf:
                        nursery.start_soon(self._close_when_idle)
                    if self._tls_context is not None:
                        await self._start_tls()
                    if self.listener.uses_sasl:
                        await self._authenticate()
                    async with trio.open_nursery() as serving:
                        serving.start_soon(self._serve)
                        await self._serve()
                    nursery.cancel_scope.cancel()  # the idle watcher
            if self._idle_scope.cancelled_caught:
                logger.info("closing idle connection from %s", self.peer)
        # The tasks' errors arrive in (nested) exception groups (trio's strict groups).
        except* CloseConnection as group:
            logger.info("closing connection from %s: %s", self.peer, _first(group))
        except* _Refused as group:
            logger.warning("refused %s on listener %s: %s", self.peer, self.listener.name, _first(group))
        except* (_PeerClosed, trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            logger.debug("connection from %s lost", self.peer)
        except* Exception:
            logger.exception("closing connection from %s after an unexpected error", self.peer)
        finally:
            self._memory.release(self._reserved)
            await trio.aclose_forcefully(self.stream)
            logger.debug("connection from %s closed", self.peer)

    async def _close_when_idle(self) -> None:
        while True:
            now = trio.current_time()
            if self._in_flight:  # not idle: look again one idle period from now
                await trio.sleep_until(now + self._idle_seconds)
            elif now >= self._last_activity + self._idle_seconds:
                self._idle_scope.cancel()
                return
            else:
                await trio.sleep_until(self._last_activity + self._idle_seconds)

    async def _start_tls(self) -> None:
        self.stream = trio.SSLStream(self.stream, self._tls_context, server_side=True)
        try:
            await self.stream.do_handshake()
        except trio.BrokenResourceError as exc:
            await self._send_tls_alert()
            raise _Refused(f"TLS handshake failed: {exc.__cause__ or exc}") from None
        certificate = self.stream.getpeercert()
        if certificate:
            from minikafka.broker.security.tls import certificate_dn

            self.principal = f"User:{certificate_dn(certificate)}"

    async def _send_tls_alert(self) -> None:
        """Send the alert OpenSSL wrote when it refused the handshake (a certificate from an
        unknown CA, no certificate, a protocol or cipher the client lacks): trio drops it, and
        without it the client sees a bare close rather than the reason."""
        outgoing = getattr(self.stream, "_outgoing", None)  # trio.SSLStream's memory BIO
        alert = outgoing.read() if outgoing is not None else b""
        if alert:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await self.stream.transport_stream.send_all(alert)

    async def _authenticate(self) -> None:
        """SASL before anything else; broker.security.authenticator says what each frame
        means and what to answer. Frames are read no further than the one at hand, so the
        first request after authentication is left for ``_serve``."""
        from minikafka.broker.security.authenticator import Refused, SaslAuthenticator

        configured = self.protocol.max_frame_size
        self.protocol.max_frame_size = min(configured, MAX_UNAUTHENTICATED_FRAME)
        authenticator = SaslAuthenticator(self.broker, self.listener, self.peer_host, self._dispatch)
        while authenticator.user is None:
            try:
                frame = self.protocol.next_frame()
            except ProtocolError as exc:
                raise _Refused(f"bad bytes before authentication: {exc}") from None
            if frame is None:
                # No further than the frame at hand (its size prefix first).
                frame_length = self.protocol.pending_frame_length
                want = max((frame_length if frame_length is not None else 4) - self.protocol.buffered, 1)
                data = await self._receive(min(want, RECEIVE_SIZE))
                if not data:
                    raise _PeerClosed
                self._last_activity = trio.current_time()
                self.protocol.receive_data(data)
                continue
            try:
                reply = await authenticator.receive(frame)
            except Refused as exc:
                if exc.reply is not None:
                    await self._send_all(exc.reply)
                    await self._wait_for_close(self.broker.config.get("connection.failed.authentication.delay.ms"))
                raise _Refused(str(exc)) from None
            await self._send_all(reply)
        self.principal = f"User:{authenticator.user}"
        self.protocol.max_frame_size = configured
        logger.debug("%s authenticated as %s", self.peer, self.principal)

    async def _wait_for_close(self, delay_ms: int) -> None:
        """Give a refused client ``delay_ms`` to read its answer and close first: closing at
        once lets the answer and the close arrive together, and kafka-python then reports only
        the close."""
        with trio.move_on_after(delay_ms / 1000), \
                contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError, _PeerClosed):
            while await self._receive(RECEIVE_SIZE):
                pass

    # ------------------------------------------------------------------ serving requests

    async def _serve(self) -> None:
        """One of the connection's two tasks: read while holding the read turn, answer what
        it read when nothing else is being answered (module docstring)."""
        while True:
            while self._reading:
                await self._read_turn.park()
            self._reading = True
            request = await self._read_request()
            self._reading = False
            self._read_turn.unpark()
            if request is None:
                return
            # The other task reads on meanwhile (if this one blocks; else it finds the turn
            # taken back when it wakes).
            self._answering = True
            await self._answer(request)
            queue = self._queue
            while queue:
                request = queue.popleft()
                self._queue_space.unpark()
                # Work from a pipelining client never holds the event loop for a whole queue.
                await trio.lowlevel.checkpoint()
                await self._answer(request)
            self._answering = False

    async def _read_request(self) -> Request | None:
        """Read, queueing the requests that come while another is being answered, until one
        this task should answer itself; None once nothing more is to be read."""
        while not self._read_over:
            request = await self._next_request()
            if request is None:
                self._read_over = True
                break
            while self._answering and len(self._queue) >= MAX_QUEUED_REQUESTS:
                await self._queue_space.park()
            if not self._answering:  # the queue is empty too
                return request
            self._queue.append(request)
        return None

    async def _next_request(self) -> Request | None:
        """The next request, reading as needed; None after bytes that do not decode (logged,
        and what is left of them in the socket dropped)."""
        protocol = self.protocol
        while True:
            if not self._frame_reserved:
                frame_length = protocol.pending_frame_length
                if frame_length is not None:
                    # Reserved before any more is read; this may stop reading for a while.
                    await self._memory.reserve(frame_length)
                    self._frame_reserved = frame_length
                    self._reserved += frame_length
            try:
                request = protocol.next_request()
            except ProtocolError as exc:
                logger.warning("bad request from %s, closing the connection after the "
                               "requests before it: %s", self.peer, exc)
                self._discard_unread()
                return None
            if request is not None:
                request.client_host = self.peer_host
                request.listener = self._listener_name
                request.principal = self.principal
                self._request_sizes.append(self._frame_reserved)
                self._frame_reserved = 0
                self._in_flight += 1
                return request
            space = protocol.receive_buffer() if self._tls_context is None else None
            if space is None:
                data = await self._receive(RECEIVE_SIZE)
                if not data:
                    raise _PeerClosed
                protocol.receive_data(data)
            else:
                received = await self._read_plain(os.readv, [space])
                if not received:
                    raise _PeerClosed
                protocol.buffer_updated(received)
            self._last_activity = trio.current_time()

    def _discard_unread(self) -> None:
        """Drop what the client sent after a bad size prefix that is still in the socket:
        closing a socket with unread input sends a reset, and the client should see an
        orderly close. Only what has arrived, up to 1 MiB."""
        for _ in range(16):
            try:
                if not os.read(self._fd, RECEIVE_SIZE):
                    return
            except OSError:  # nothing more now (the socket is non-blocking), or gone
                return

    async def _answer(self, request: Request) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: api key %d v%d correlation id %d", self.peer, request.api_key,
                         request.api_version, request.correlation_id)
        body = await self._dispatch(request)
        handled = self._request_sizes.popleft()
        if handled:
            self._reserved -= handled
            self._memory.release(handled)
        if body is not None:
            await self._send_response(self.protocol.encode_response(request, body))
        self._in_flight -= 1
        if not self._in_flight:
            self._last_activity = trio.current_time()

    async def _dispatch(self, request: Request):
        handler = HANDLERS.get(request.api_key)
        if handler is None:
            raise CloseConnection(f"no handler for api key {request.api_key}")
        try:
            if self.broker.faults is not None:
                return await self.broker.faults.handle(handler, self.broker, request)
            return await handler(self.broker, request)
        except CloseConnection:
            raise
        except Exception as exc:
            raise RuntimeError(
                f"handler for api key {request.api_key} v{request.api_version} "
                f"(correlation id {request.correlation_id}, client {request.client_id!r}) failed"
            ) from exc

    # ------------------------------------------------------------------ socket I/O

    async def _receive(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` from the client (b"" once it closed its end). A plain socket
        is read at once when bytes are waiting, with no trip through the event loop."""
        if self._tls_context is not None:
            return await self.stream.receive_some(max_bytes)
        return await self._read_plain(os.read, max_bytes)

    async def _read_plain(self, read, argument):
        """``read(fd, argument)`` on the plain socket (``os.read`` or ``os.readv``), at once
        when bytes are waiting."""
        while True:
            try:
                return read(self._fd, argument)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.socket)
            except OSError as exc:  # a reset or a timed-out connection: the client is gone
                raise _PeerClosed(str(exc)) from None

    async def _send_response(self, chunks: list) -> None:
        """Send one response frame: its bytes chunks with one call per run of them (one for
        the whole frame unless it holds file slices), file slices with sendfile.

        No ``MSG_MORE``/``TCP_CORK`` on the bytes before a slice: with it, the tail of a large
        response sent by several non-blocking sendfile calls waited out the kernel's 200 ms
        cork timer (measured: 1 MB fetches 200 ms apart instead of back to back)."""
        if len(chunks) == 1:
            await self._send_all(chunks[0])
            return
        run: list = []
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                run.append(chunk)
                continue
            if chunk.length == 0:
                continue
            if run:
                await self._send_run(run)
                run = []
            if isinstance(chunk, DownConvertedRecords):
                await self._send_converted(chunk)
            else:
                await self._sendfile(chunk)
        if run:
            await self._send_run(run)

    async def _send_run(self, chunks: list) -> None:
        if len(chunks) == 1:
            await self._send_all(chunks[0])
        elif self._tls_context is not None or len(chunks) > MAX_WRITEV_CHUNKS:
            await self._send_all(b"".join(chunks))
        else:
            try:
                sent = os.writev(self._fd, chunks)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise _PeerClosed(str(exc)) from None
            total = sum(map(len, chunks))
            if sent < total:
                await self._send_all(memoryview(b"".join(chunks))[sent:])

    async def _send_all(self, data) -> None:
        """Send ``data`` whole; on a plain socket at once when the kernel takes it all (the
        usual case), waiting for room only when it does not."""
        if self._tls_context is not None:
            await self.stream.send_all(data)
            return
        try:
            sent = os.write(self._fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:  # the client is gone (EPIPE, reset)
            raise _PeerClosed(str(exc)) from None
        if sent == len(data):
            return
        view = memoryview(data)[sent:]
        while view:
            await trio.lowlevel.wait_writable(self.socket)
            try:
                view = view[os.write(self._fd, view):]
            except BlockingIOError:
                pass
            except OSError as exc:
                raise _PeerClosed(str(exc)) from None

    async def _send_converted(self, records: DownConvertedRecords) -> None:
        """Records converted for an old consumer, a chunk at a time as they are sent (the
        conversion runs here, between the writes, as in Kafka's network thread)."""
        for piece in records.pieces():
            await self._send_all(piece)
            await trio.lowlevel.checkpoint()

    async def _sendfile(self, file_slice) -> None:
        if self._tls_context is not None:
            return await self._send_file_over_tls(file_slice)
        in_fd = file_slice.fileno()
        position = file_slice.position
        remaining = file_slice.length
        while remaining:
            try:
                sent = os.sendfile(self._fd, in_fd, position, remaining)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.socket)
                continue
            if sent == 0:
                # The frame's size prefix already promised these bytes; a short file cannot be
                # patched up, so the connection has to go.
                raise CloseConnection(f"segment file ended {remaining} bytes short of a fetched slice")
            position += sent
            remaining -= sent
        await trio.lowlevel.checkpoint()

    async def _send_file_over_tls(self, file_slice) -> None:
        """TLS encrypts in user space, so the slice is read (off the event loop) and sent."""
        in_fd = file_slice.fileno()
        position = file_slice.position
        remaining = file_slice.length
        while remaining:
            chunk = await trio.to_thread.run_sync(os.pread, in_fd, min(remaining, TLS_FILE_CHUNK), position)
            if not chunk:
                raise CloseConnection(f"segment file ended {remaining} bytes short of a fetched slice")
            await self.stream.send_all(chunk)
            position += len(chunk)
            remaining -= len(chunk)
