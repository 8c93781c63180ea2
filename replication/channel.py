"""One inter-broker connection: the thin trio layer around ``protocol.framing.ClientConnection``.

Used by the controller (LeaderAndIsr, UpdateMetadata, StopReplica to each broker), by replica
fetchers (Fetch and OffsetForLeaderEpoch to a leader) and by a broker asking the controller
for a controlled shutdown. One request at a time per channel; a failed or timed-out request
closes the socket, and the next request reconnects. :class:`ChannelSecurity` says how the
inter-broker listener is secured: TLS wraps the socket first, then SASL (Kafka 0.10.2's
SaslHandshake v0 followed by the mechanism's bare token frames) authenticates the broker
before its first request. The mechanisms themselves come from the broker layer.

Each frame (a response, a SASL token) is read whole into one buffer of the size its prefix
announces (``recv_into`` on a plain socket) and handed to the sans-I/O connection at once.
Replica fetchers receive up to ``replica.fetch.response.max.bytes`` per answer, and reading
them as ``receive_some(1 MiB)`` chunks cost a fresh 1 MiB allocation per read plus a growing
reassembly buffer: about 1.3 ms of CPU per MB on the follower, against 0.13 ms into place.
"""

from __future__ import annotations

import logging
import ssl
import struct
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Protocol

import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode, ProtocolError
from minikafka.protocol.framing import DEFAULT_MAX_FRAME_SIZE, ClientConnection, encode_frame
from minikafka.protocol.schema import Struct

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# A TLS (or a dialer's) stream has no recv_into: it is read in pieces of at most this many bytes.
_TLS_READ_BYTES = 1 << 16


def dial_address(broker_id: int, host: str, port: int,
                 dial: Mapping[int, tuple[str, int]]) -> tuple[str, int]:
    """Where to connect to reach ``broker_id``, registered at ``host:port``. ``dial`` is the
    test-only ``minikafka.test.broker.dial`` (empty in production): the cluster fixture routes
    each broker-to-broker link through a proxy of its own so that it can cut the link."""
    return dial.get(broker_id, (host, port))


class ChannelError(Exception):
    """The peer could not be reached or did not answer in time; the request may or may not
    have been processed."""


class AuthenticationError(ChannelError):
    """The peer refused this broker's SASL authentication (or proved to be the wrong peer);
    the message names the mechanism and user, never the password."""


class SaslClient(Protocol):
    """A client mechanism: ``respond(None)`` is the first token, ``respond(server_token)`` the
    next, None once done; raises on a bad server answer (the message is safe to log)."""

    mechanism: str
    user: str

    def respond(self, challenge: bytes | None) -> bytes | None: ...


@dataclass(frozen=True)
class ChannelSecurity:
    """How this broker connects to the inter-broker listener of the others."""

    ssl_context: ssl.SSLContext | None = None
    # A fresh mechanism per connection (SCRAM nonces must not repeat); None: no SASL.
    sasl: Callable[[], SaslClient] | None = None


PLAINTEXT = ChannelSecurity()


# Opens a connection to (host, port) in place of TCP: the simulator's in-memory network
# (replication.simulation). The stream it returns also has a synchronous ``close()``.
Dialer = Callable[[str, int], Awaitable[trio.abc.Stream]]


class BrokerChannel:
    """Requests to one broker at ``host:port``; ``request`` is safe to call from many tasks
    (they queue on a lock, as Kafka's per-connection ordering needs anyway). ``dialer``
    replaces TCP (None: a TCP connection)."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float,
                 security: ChannelSecurity = PLAINTEXT, dialer: Dialer | None = None) -> None:
        self.security = security
        self.dialer = dialer
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._stream: trio.abc.Stream | None = None
        self._socket = None
        self._conn: ClientConnection | None = None
        self._lock = trio.Lock()

    def retarget(self, host: str, port: int) -> None:
        if (host, port) != (self.host, self.port):
            self.host, self.port = host, port
            self._drop()

    async def request(self, api_key: int, version: int, body: Any, *,
                      timeout_s: float | None = None) -> Struct:
        timeout = timeout_s if timeout_s is not None else self.timeout_s
        async with self._lock:
            with trio.move_on_after(timeout):
                # A kept connection may have died unseen (the peer restarted on the same port):
                # one fresh connection is tried then, as Kafka's controller resends.
                for fresh in ((True,) if self._stream is None else (False, True)):
                    try:
                        return await self._exchange(api_key, version, body)
                    except AuthenticationError:
                        self._drop()
                        raise
                    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                            ProtocolError) as exc:
                        self._drop()
                        if fresh:
                            raise ChannelError(f"{self.host}:{self.port}: {str(exc) or type(exc).__name__}") from None
            self._drop()
            raise ChannelError(f"{self.host}:{self.port}: no answer within {timeout:.1f} s")

    async def _exchange(self, api_key: int, version: int, body: Any) -> Struct:
        if self._stream is None and self.dialer is not None:
            self._stream = await self.dialer(self.host, self.port)
            self._conn = ClientConnection(client_id=self.client_id)
        if self._stream is None:
            tcp = await trio.open_tcp_stream(self.host, self.port)
            self._socket = tcp.socket
            self._stream = tcp
            if self.security.ssl_context is not None:
                self._stream = trio.SSLStream(tcp, self.security.ssl_context, server_hostname=self.host)
                try:
                    await self._stream.do_handshake()
                except trio.BrokenResourceError as exc:
                    # A certificate the context refuses (another CA, the wrong host name).
                    cause = exc.__cause__
                    if isinstance(cause, ssl.SSLCertVerificationError):
                        raise AuthenticationError(f"{self.host}:{self.port}: TLS: {cause.verify_message}") from None
                    raise
            self._conn = ClientConnection(client_id=self.client_id)
            if self.security.sasl is not None:
                await self._authenticate(self.security.sasl())
        assert self._conn is not None
        _, frame = self._conn.send_request(api_key, version, body)
        await self._stream.send_all(frame)
        while True:
            response = self._conn.next_response()
            if response is not None:
                return response.body
            await self._receive()

    async def _receive(self) -> None:
        """Read one whole frame into the connection."""
        head = bytearray(_SIZE.size)
        await self._receive_into(memoryview(head))
        # A size no frame may have (negative, above the connection's maximum) is fed alone,
        # never allocated: the connection refuses it, and the caller's next_response or
        # next_raw_frame raises ProtocolError.
        self._conn.receive_data(head)
        size = _SIZE.unpack(head)[0]
        if 0 < size <= DEFAULT_MAX_FRAME_SIZE:
            payload = bytearray(size)
            await self._receive_into(memoryview(payload))
            self._conn.receive_data(payload)

    async def _receive_into(self, view: memoryview) -> None:
        """Fill ``view`` from the peer."""
        filled = 0
        while filled < len(view):
            if self._socket is not None and self.security.ssl_context is None:
                count = await self._socket.recv_into(view[filled:])
            else:
                data = await self._stream.receive_some(min(len(view) - filled, _TLS_READ_BYTES))
                count = len(data)
                view[filled:filled + count] = data
            if not count:
                raise ProtocolError("connection closed by the peer")
            filled += count

    async def _authenticate(self, client: SaslClient) -> None:
        """SaslHandshake v0, then the mechanism's tokens as bare frames. A 0.10.2 broker answers
        a failed authentication by closing the connection, so a close here is a refusal."""
        who = f"{self.host}:{self.port}: SASL {client.mechanism} as user {client.user!r}"
        _, frame = self._conn.send_request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": client.mechanism})
        await self._stream.send_all(frame)
        while (response := self._conn.next_response()) is None:
            await self._receive()
        if response.body.error_code:
            raise AuthenticationError(f"{who}: {ErrorCode(response.body.error_code).name} (the listener "
                                      f"enables {', '.join(response.body.mechanisms)})")
        answer = None
        while True:
            try:
                token = client.respond(answer)
            except Exception as exc:  # the mechanism's own refusal of the server's answer
                raise AuthenticationError(f"{who}: {exc}") from None
            if token is None:
                return
            try:
                await self._stream.send_all(encode_frame(token))
                while (answer := self._conn.next_raw_frame()) is None:
                    await self._receive()
            except (ProtocolError, trio.BrokenResourceError, ConnectionError):
                raise AuthenticationError(f"{who}: refused (the peer closed the connection: a wrong password, "
                                          "an unknown user or a mechanism it does not accept)") from None

    def _drop(self) -> None:
        sock, stream = self._socket, self._stream
        self._socket, self._stream, self._conn = None, None, None
        if sock is None and stream is not None:
            stream.close()  # a dialer's stream
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    async def aclose(self) -> None:
        self._drop()
