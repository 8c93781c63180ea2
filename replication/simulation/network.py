"""The simulator's in-memory network: connections between nodes (brokers and the workload's
clients) as pairs of byte streams, with per-link faults.

A connection behaves as TCP does: bytes in one direction arrive in order, each send after the
link's delay (never before an earlier send of the same direction). Faults, set per ordered
pair of nodes by the harness:

* ``delay``: a range of one-way delays; messages on *different* connections may overtake each
  other this way (the only reordering TCP allows).
* ``drop``: the chance that a send is lost; like a TCP connection that stops getting through,
  nothing after it in that direction arrives either, until the peer gives up on the connection.
* ``cut``: both directions refuse new connections and break the open ones.
* a paused node: what it sends and what is sent to it waits until it resumes.

The broker side of a connection is served by :func:`serve_connection` with the broker's real
request handlers (``broker.handlers.HANDLERS``), one request at a time in order, as
``broker.connection.Connection`` does; that class itself is tied to a kernel socket
(``sendfile``, non-blocking reads), so the simulator calls the same handlers directly.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass

import trio

from minikafka.broker.handlers import HANDLERS, CloseConnection
from minikafka.protocol.errors import ProtocolError
from minikafka.protocol.framing import ServerConnection


@dataclass
class LinkFaults:
    delay: tuple[float, float] = (0.0005, 0.002)
    drop: float = 0.0
    cut: bool = False


class SimStream:
    """One end of a connection (trio's Stream interface, plus a synchronous ``close``)."""

    def __init__(self, net: "SimNetwork", src: str, dst: str) -> None:
        self.net = net
        self.src = src  # this end's node
        self.dst = dst
        self.peer: SimStream | None = None
        self._inbox: deque[tuple[float, bytes]] = deque()
        self._eof_at: float | None = None
        self._last_arrival = 0.0
        self._blackholed = False
        self.broken = False
        self.closed = False
        self._wake = trio.Event()

    def _notify(self) -> None:
        self._wake.set()
        self._wake = trio.Event()

    def _arrival(self) -> float:
        arrival = max(trio.current_time() + self.net.one_way_delay(self.src, self.dst), self._last_arrival)
        arrival = max(arrival, self.net.paused_until(self.src), self.net.paused_until(self.dst))
        self._last_arrival = arrival
        return arrival

    async def send_all(self, data) -> None:
        if self.closed or self.broken:
            raise trio.BrokenResourceError("connection closed")
        await trio.lowlevel.checkpoint()
        peer = self.peer
        if self._blackholed or self.net.drops(self.src, self.dst):
            self._blackholed = True
            return
        peer._inbox.append((self._arrival(), bytes(data)))
        peer._notify()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while True:
            if self.broken:
                raise trio.BrokenResourceError("connection broken")
            if self.closed:
                raise trio.ClosedResourceError("closed")
            now = trio.current_time()
            if self._inbox:
                arrival, data = self._inbox[0]
                if arrival <= now:
                    if max_bytes is not None and len(data) > max_bytes:
                        self._inbox[0] = (arrival, data[max_bytes:])
                        data = data[:max_bytes]
                    else:
                        self._inbox.popleft()
                    await trio.lowlevel.checkpoint()
                    return data
                wake_at = arrival
            elif self._eof_at is not None:
                if self._eof_at <= now:
                    await trio.lowlevel.checkpoint()
                    return b""
                wake_at = self._eof_at
            else:
                wake_at = None
            wake = self._wake
            if wake_at is None:
                await wake.wait()
            else:
                with trio.move_on_after(wake_at - now):
                    await wake.wait()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._notify()
        peer = self.peer
        if peer is not None and not peer.closed:
            peer._eof_at = max(trio.current_time() + self.net.one_way_delay(self.src, self.dst), self._last_arrival)
            peer._notify()
        self.net.forget(self)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    def break_(self) -> None:
        self.broken = True
        self._notify()

    async def send_eof(self) -> None:
        self.close()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()


class SimNetwork:
    def __init__(self, rng: random.Random, trace) -> None:
        self.rng = rng
        self.trace = trace
        self.faults: dict[tuple[str, str], LinkFaults] = {}
        self.listeners: dict[str, object] = {}  # node -> accept(stream), while it listens
        self.hosts: dict[str, str] = {}  # advertised host -> node
        self._paused: dict[str, float] = {}
        self._open: list[SimStream] = []  # client ends of open connections

    def link(self, src: str, dst: str) -> LinkFaults:
        return self.faults.setdefault((src, dst), LinkFaults())

    def one_way_delay(self, src: str, dst: str) -> float:
        lo, hi = self.link(src, dst).delay
        return self.rng.uniform(lo, hi)

    def drops(self, src: str, dst: str) -> bool:
        drop = self.link(src, dst).drop
        return drop > 0 and self.rng.random() < drop

    def paused_until(self, node: str) -> float:
        return self._paused.get(node, 0.0)

    def pause(self, node: str, seconds: float) -> None:
        self._paused[node] = trio.current_time() + seconds

    def cut(self, a: str, b: str, cut: bool = True) -> None:
        self.link(a, b).cut = cut
        self.link(b, a).cut = cut
        if cut:
            for stream in list(self._open):
                if {stream.src, stream.dst} == {a, b}:
                    stream.break_()
                    stream.peer.break_()
                    self.forget(stream)

    def heal(self) -> None:
        for faults in self.faults.values():
            faults.delay, faults.drop, faults.cut = LinkFaults().delay, 0.0, False
        self._paused.clear()

    def forget(self, stream: SimStream) -> None:
        if stream in self._open:
            self._open.remove(stream)

    def break_node(self, node: str) -> None:
        """A node died: its connections break at once (the peer sees a reset)."""
        for stream in list(self._open):
            if node in (stream.src, stream.dst):
                stream.break_()
                stream.peer.break_()
                self.forget(stream)

    def dialer(self, src: str):
        async def dial(host: str, port: int) -> SimStream:
            dst = self.hosts.get(host, host)
            await trio.sleep(self.one_way_delay(src, dst) * 2)
            accept = self.listeners.get(dst)
            if self.link(src, dst).cut or accept is None:
                raise OSError(f"{src} cannot connect to {dst}")
            client, server = SimStream(self, src, dst), SimStream(self, dst, src)
            client.peer, server.peer = server, client
            self._open.append(client)
            accept(server)
            return client
        return dial


async def serve_connection(broker, stream: SimStream, observe=None) -> None:
    """Answer the requests of one connection with the broker's handlers, in order.
    ``observe(request, body)`` sees each answer before it is sent. As the broker's
    ``Connection``, the peer closing its end cancels the request being answered (a client
    killed mid-request): what a handler leaves half done then is the simulation's to find."""
    protocol = ServerConnection(max_frame_size=broker.config.socket_request_max_bytes)
    listener = broker.config.listener.name
    requests_in, requests_out = trio.open_memory_channel(math.inf)

    async def read(cancel_scope: trio.CancelScope) -> None:
        while True:
            data = await stream.receive_some()
            if not data:
                cancel_scope.cancel()
                return
            protocol.receive_data(data)
            while (request := protocol.next_request()) is not None:
                request.listener = listener  # as Connection: answers name this listener's addresses
                requests_in.send_nowait(request)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, nursery.cancel_scope)
            async for request in requests_out:
                body = await HANDLERS[request.api_key](broker, request)
                if body is None:
                    continue
                if observe is not None:
                    observe(request, body)
                chunks = protocol.encode_response(request, body)
                await stream.send_all(b"".join(
                    chunk.read_bytes() if hasattr(chunk, "read_bytes") else bytes(chunk) for chunk in chunks))
    except* (trio.BrokenResourceError, trio.ClosedResourceError, CloseConnection, ProtocolError):
        pass
    finally:
        stream.close()
