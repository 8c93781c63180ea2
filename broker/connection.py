"""One client connection: decode requests, run their handlers in order, write the responses.

Three tasks share a connection, linked by two bounded queues::

    socket --reader--> [decoded requests] --executor--> [encoded responses] --writer--> socket

* The **reader** feeds received bytes to a sans-I/O ``ServerConnection`` and queues every
  complete request, so a client may pipeline many requests before it reads anything.
* The **executor** runs the handlers one at a time in request order. Kafka handles the
  requests of one connection in order, and producers with several requests in flight rely on
  it (two pipelined Produce requests to one partition must append in the order sent). A
  long-polling Fetch therefore delays the requests behind it on the same connection, exactly
  as in Kafka, but never the reading of them nor any other connection.
* The **writer** sends the responses in that same order: bytes chunks with ``send``, stored
  message sets (storage ``FileSlice`` chunks) with ``os.sendfile`` from the segment file, so
  fetched bytes never pass through Python.

The queues are bounded, so a client that sends without reading stops being read from. Request
memory is bounded across connections too (``queued.max.request.bytes``, broker.request_memory):
the reader reserves each frame's length once its size prefix is in, before it reads again, and
the executor gives the reservation back when the request has been handled.
Produce with ``acks=0`` gets no response. Bytes that do not decode (``ProtocolError``) stop
the reading; the requests decoded before them are answered, then the connection closes. When
the client closes its end the connection goes at once, requests in flight included (a
long-polling Fetch does not outlive its client), as in Kafka. An unexpected exception in a
handler is logged and closes this connection only. A connection with nothing in flight and
nothing received for ``connections.max.idle.ms`` is closed.

On an SSL or SASL_SSL listener the socket is wrapped in a ``trio.SSLStream`` first (a failed
handshake closes the connection), and the principal comes from the client certificate when
``ssl.client.auth`` asked for one. Fetched slices then cannot go out with sendfile: the writer
reads them from the segment file in a worker thread, 1 MiB at a time, and encrypts them like
any response. On a SASL listener the pipeline starts only after authentication
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
from minikafka.broker.handlers import HANDLERS, CloseConnection
from minikafka.broker.security import ANONYMOUS
from minikafka.broker.security.authenticator import Refused, SaslAuthenticator
from minikafka.broker.security.tls import certificate_dn
from minikafka.protocol.errors import ProtocolError
from minikafka.protocol.framing import Request, ServerConnection

logger = logging.getLogger(__name__)

RECEIVE_SIZE = 65536
# Decoded requests waiting for the executor; beyond this the reader stops reading.
MAX_QUEUED_REQUESTS = 32
# Encoded responses waiting for the writer.
MAX_QUEUED_RESPONSES = 8
# Largest frame before authentication (Kafka's SASL receive limit, 512 KiB).
MAX_UNAUTHENTICATED_FRAME = 524288
# Bytes of a fetched file slice read at a time when TLS rules out sendfile.
TLS_FILE_CHUNK = 1 << 20


class _PeerClosed(Exception):
    """The client closed its end: like Kafka, drop the connection and whatever is in flight."""


class _Refused(Exception):
    """TLS or SASL refused the client: logged as a warning with its address, then closed."""


class Connection:
    """The broker side of one TCP connection (see the module docstring for the pipeline).

    ``principal`` is Kafka's ``User:...`` for the client once TLS and SASL are through."""

    def __init__(self, broker, stream: trio.SocketStream, listener: Listener | None = None,
                 tls_context=None) -> None:
        self.broker = broker
        self.stream = stream
        self.socket = stream.socket
        self.listener = listener or broker.config.listener
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
        self._in_flight = 0
        self._memory = broker.request_memory
        self._reserved = 0  # bytes this connection holds in the pool
        self._request_sizes: deque[int] = deque()  # reservation of each request read, in order

    async def run(self) -> None:
        """Serve the connection until the peer leaves, misbehaves or idles out; never raises
        (except cancellation, when the broker shuts down)."""
        logger.debug("connection from %s", self.peer)
        try:
            with self._idle_scope:
                self._touch()
                if self._tls_context is not None:
                    await self._start_tls()
                if self.listener.uses_sasl:
                    await self._authenticate()
                requests_in, requests_out = trio.open_memory_channel(MAX_QUEUED_REQUESTS)
                responses_in, responses_out = trio.open_memory_channel(MAX_QUEUED_RESPONSES)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read, requests_in)
                    nursery.start_soon(self._execute, requests_out, responses_in)
                    nursery.start_soon(self._write, responses_out)
            if self._idle_scope.cancelled_caught:
                logger.info("closing idle connection from %s", self.peer)
        # The three tasks' errors arrive in an exception group (trio's strict groups).
        except* CloseConnection as group:
            logger.info("closing connection from %s: %s", self.peer, group.exceptions[0])
        except* _Refused as group:
            logger.warning("refused %s on listener %s: %s", self.peer, self.listener.name, group.exceptions[0])
        except* (_PeerClosed, trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            logger.debug("connection from %s lost", self.peer)
        except* Exception:
            logger.exception("closing connection from %s after an unexpected error", self.peer)
        finally:
            self._memory.release(self._reserved)
            await trio.aclose_forcefully(self.stream)
            logger.debug("connection from %s closed", self.peer)

    async def _start_tls(self) -> None:
        self.stream = trio.SSLStream(self.stream, self._tls_context, server_side=True)
        try:
            await self.stream.do_handshake()
        except trio.BrokenResourceError as exc:
            await self._send_tls_alert()
            raise _Refused(f"TLS handshake failed: {exc.__cause__ or exc}") from None
        certificate = self.stream.getpeercert()
        if certificate:
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
        first request after authentication is left for ``_read``."""
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
                data = await self.stream.receive_some(min(want, RECEIVE_SIZE))
                if not data:
                    raise _PeerClosed
                self._touch()
                self.protocol.receive_data(data)
                continue
            try:
                reply = await authenticator.receive(frame)
            except Refused as exc:
                if exc.reply is not None:
                    await self._send_bytes(exc.reply)
                    await self._wait_for_close(self.broker.config.get("connection.failed.authentication.delay.ms"))
                raise _Refused(str(exc)) from None
            await self._send_bytes(reply)
        self.principal = f"User:{authenticator.user}"
        self.protocol.max_frame_size = configured
        logger.debug("%s authenticated as %s", self.peer, self.principal)

    async def _wait_for_close(self, delay_ms: int) -> None:
        """Give a refused client ``delay_ms`` to read its answer and close first: closing at
        once lets the answer and the close arrive together, and kafka-python then reports only
        the close."""
        with trio.move_on_after(delay_ms / 1000), \
                contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            while await self.stream.receive_some(RECEIVE_SIZE):
                pass

    def _touch(self) -> None:
        """Restart the idle clock, or stop it while a request is in flight."""
        if self._in_flight:
            self._idle_scope.deadline = math.inf
        else:
            self._idle_scope.deadline = trio.current_time() + self._idle_seconds

    def _finished_one(self) -> None:
        self._in_flight -= 1
        self._touch()

    async def _read(self, requests: trio.MemorySendChannel) -> None:
        async with requests:
            frame_reserved = 0
            while True:
                data = await self.stream.receive_some(RECEIVE_SIZE)
                if not data:
                    raise _PeerClosed
                self._touch()
                self.protocol.receive_data(data)
                while True:
                    frame_length = self.protocol.pending_frame_length
                    if frame_length is not None and not frame_reserved:
                        # Reserved before any more is read; this may stop reading for a while.
                        await self._memory.reserve(frame_length)
                        frame_reserved = frame_length
                        self._reserved += frame_length
                    try:
                        request = self.protocol.next_request()
                    except ProtocolError as exc:
                        logger.warning("bad request from %s, closing the connection after the "
                                       "requests before it: %s", self.peer, exc)
                        self._discard_unread()
                        return
                    if request is None:
                        break
                    request.client_host = self.peer_host
                    request.listener = self.listener.name
                    request.principal = self.principal
                    self._request_sizes.append(frame_reserved)
                    frame_reserved = 0
                    self._in_flight += 1
                    self._touch()
                    await requests.send(request)

    def _discard_unread(self) -> None:
        """Drop what the client sent after a bad size prefix that is still in the socket:
        closing a socket with unread input sends a reset, and the client should see an
        orderly close. Only what has arrived, up to 1 MiB."""
        fd = self.socket.fileno()
        for _ in range(16):
            try:
                if not os.read(fd, RECEIVE_SIZE):
                    return
            except OSError:  # nothing more now (the socket is non-blocking), or gone
                return

    async def _execute(self, requests: trio.MemoryReceiveChannel,
                       responses: trio.MemorySendChannel) -> None:
        async with requests, responses:
            async for request in requests:
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("%s: api key %d v%d correlation id %d", self.peer, request.api_key,
                                 request.api_version, request.correlation_id)
                body = await self._dispatch(request)
                handled = self._request_sizes.popleft()
                self._reserved -= handled
                self._memory.release(handled)
                if body is None:
                    self._finished_one()
                    continue
                await responses.send(self.protocol.encode_response(request, body))

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

    async def _write(self, responses: trio.MemoryReceiveChannel) -> None:
        async with responses:
            async for chunks in responses:
                await self._send_chunks(chunks)
                self._finished_one()

    async def _send_chunks(self, chunks: list) -> None:
        """Send one response frame: runs of bytes chunks joined into one send, file slices
        with sendfile.

        No ``MSG_MORE``/``TCP_CORK`` on the bytes before a slice: with it, the tail of a large
        response sent by several non-blocking sendfile calls waited out the kernel's 200 ms
        cork timer (measured: 1 MB fetches 200 ms apart instead of back to back)."""
        pending: list[bytes] = []
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                pending.append(chunk)
                continue
            if chunk.length == 0:
                continue
            if pending:
                await self._send_bytes(b"".join(pending))
                pending.clear()
            await self._sendfile(chunk)
        if pending:
            await self._send_bytes(b"".join(pending))

    async def _send_bytes(self, data: bytes) -> None:
        if self._tls_context is not None:
            await self.stream.send_all(data)
            return
        view = memoryview(data)
        while view:
            sent = await self.socket.send(view)
            view = view[sent:]

    async def _sendfile(self, file_slice) -> None:
        if self._tls_context is not None:
            return await self._send_file_over_tls(file_slice)
        out_fd = self.socket.fileno()
        in_fd = file_slice.fileno()
        position = file_slice.position
        remaining = file_slice.length
        while remaining:
            try:
                sent = os.sendfile(out_fd, in_fd, position, remaining)
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
