"""One inter-broker connection: the thin trio layer around ``protocol.framing.ClientConnection``.

Used by the controller (LeaderAndIsr, UpdateMetadata, StopReplica to each broker), by replica
fetchers (Fetch and OffsetForLeaderEpoch to a leader) and by a broker asking the controller
for a controlled shutdown. One request at a time per channel; a failed or timed-out request
closes the socket, and the next request reconnects. With an ``ssl_context`` (an SSL
inter-broker listener) the socket is wrapped in TLS before the first request.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import trio

from minikafka.protocol.errors import ProtocolError
from minikafka.protocol.framing import ClientConnection
from minikafka.protocol.schema import Struct

logger = logging.getLogger(__name__)


def dial_address(broker_id: int, host: str, port: int,
                 dial: Mapping[int, tuple[str, int]]) -> tuple[str, int]:
    """Where to connect to reach ``broker_id``, registered at ``host:port``. ``dial`` is the
    test-only ``minikafka.test.broker.dial`` (empty in production): the cluster fixture routes
    each broker-to-broker link through a proxy of its own so that it can cut the link."""
    return dial.get(broker_id, (host, port))


class ChannelError(Exception):
    """The peer could not be reached or did not answer in time; the request may or may not
    have been processed."""


class BrokerChannel:
    """Requests to one broker at ``host:port``; ``request`` is safe to call from many tasks
    (they queue on a lock, as Kafka's per-connection ordering needs anyway)."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float, ssl_context=None) -> None:
        self.ssl_context = ssl_context
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
                try:
                    return await self._exchange(api_key, version, body)
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                        ProtocolError) as exc:
                    self._drop()
                    raise ChannelError(f"{self.host}:{self.port}: {exc or type(exc).__name__}") from None
            self._drop()
            raise ChannelError(f"{self.host}:{self.port}: no answer within {timeout:.1f} s")

    async def _exchange(self, api_key: int, version: int, body: Any) -> Struct:
        if self._stream is None:
            tcp = await trio.open_tcp_stream(self.host, self.port)
            self._socket = tcp.socket
            self._stream = tcp
            if self.ssl_context is not None:
                self._stream = trio.SSLStream(tcp, self.ssl_context, server_hostname=self.host)
                await self._stream.do_handshake()
            self._conn = ClientConnection(client_id=self.client_id)
        assert self._conn is not None
        _, frame = self._conn.send_request(api_key, version, body)
        await self._stream.send_all(frame)
        while True:
            response = self._conn.next_response()
            if response is not None:
                return response.body
            data = await self._stream.receive_some(1 << 20)
            if not data:
                raise ProtocolError("connection closed by the peer")
            self._conn.receive_data(data)

    def _drop(self) -> None:
        sock, self._socket, self._stream, self._conn = self._socket, None, None, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    async def aclose(self) -> None:
        self._drop()
