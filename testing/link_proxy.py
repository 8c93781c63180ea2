"""Per-link TCP proxies: how the cluster fixture cuts the network between brokers without root.

Each broker reaches each other broker (``minikafka.test.broker.dial``) and ZooKeeper (its own
``zookeeper.connect``) through a :class:`LinkProxy` of that one directed link, so one link can
be cut while the others carry on. A cut closes the link's live connections at once (both
sides see a reset) and turns new ones away as soon as they are accepted, which is what a
broker meets when a firewall rejects its packets; ``heal`` lets connections through again.

Plain blocking sockets and threads, no trio: the fixture runs in the test's thread, outside
any event loop, and a proxy must keep forwarding while the test blocks in a client call.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Callable

__all__ = ["LinkProxy"]

_CHUNK = 1 << 16


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0) so the peer learns at once, and wake the thread blocked
    in this socket's recv (shutdown does; close alone does not on Linux)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class LinkProxy:
    """Listens on ``127.0.0.1:<free port>`` (``address``) and forwards every connection to
    ``target()`` -- looked up per connection, since a restarted broker may have a new port;
    None (target not running) for ``connect_timeout`` refuses the connection."""

    def __init__(self, name: str, target: Callable[[], tuple[str, int] | None],
                 connect_timeout: float = 2.0) -> None:
        self.name = name
        self.target = target
        self.connect_timeout = connect_timeout
        self.cut_off = False
        self.connections_cut = 0
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept_loop, name=f"link-proxy {name}", daemon=True)
        self._thread.start()

    @property
    def live_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def cut(self) -> None:
        """Close every live connection and refuse new ones until ``heal``; returns once the
        live connections are closed."""
        with self._lock:
            self.cut_off = True
            pairs, self._pairs = self._pairs, set()
        for pair in pairs:
            for sock in pair:
                _reset(sock)
        self.connections_cut += len(pairs)

    def heal(self) -> None:
        with self._lock:
            self.cut_off = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._thread.join(timeout=2)
        try:
            self._listener.close()
        except OSError:
            pass

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self.cut_off or self._closed:
                _reset(client)
                continue
            threading.Thread(target=self._open, args=(client,), daemon=True,
                             name=f"link-proxy {self.name} connect").start()

    def _open(self, client: socket.socket) -> None:
        # A broker registers (and is dialled) a moment before the fixture has read its port
        # from the ready line: give the target that moment rather than refuse.
        deadline = time.monotonic() + self.connect_timeout
        while (target := self.target()) is None and time.monotonic() < deadline and not self.cut_off:
            time.sleep(0.01)
        if target is None:
            _reset(client)
            return
        try:
            upstream = socket.create_connection(target, timeout=self.connect_timeout)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        client.settimeout(None)
        pair = (client, upstream)
        with self._lock:
            if self.cut_off:  # cut while connecting
                admitted = False
            else:
                self._pairs.add(pair)
                admitted = True
        if not admitted:
            _reset(client)
            _reset(upstream)
            return
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(pair, source, sink), daemon=True,
                             name=f"link-proxy {self.name} pump").start()

    def _pump(self, pair, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        with self._lock:
            ours = pair in self._pairs
            self._pairs.discard(pair)
        if ours:
            # One side ended: end the other, as a direct connection would.
            for sock in pair:
                _reset(sock)

    def __repr__(self) -> str:
        return f"<LinkProxy {self.name} {self.address[0]}:{self.address[1]} {'cut' if self.cut_off else 'open'}>"
