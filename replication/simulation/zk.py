"""An in-memory ZooKeeper for the simulator: one :class:`SimZooKeeper` "server" shared by the
brokers, and :class:`SimZkClient`, a session with ``replication.zookeeper.ZkClient``'s interface.

Semantics kept from ZooKeeper (and from how ``ZkClient`` presents them over kazoo): every
change gets a zxid (a parent's pzxid, its children's last); versions count sets and a conditional set or delete at another version is
BadVersion; NodeExists / NoNode; ephemeral nodes belong to a session and go when it ends or
expires; sequential nodes take the parent's counter. A session is kept alive while its client
can reach the server; cut off (a broker↔ZooKeeper partition, a paused or killed broker) it
expires ``session_timeout_ms`` after it was last heard. The client then sees what kazoo
reports: "suspended" once the connection is lost, and on reconnecting either "connected" (the
session survived) or "expired" followed by "connected" (a new session). Requests wait for the
connection up to the request timeout, then fail with ConnectionLost. Persistent watches
re-read their node a moment after it changes and after every reconnect, and report only a real
change, exactly as ``ZkClient``'s ``_PersistentWatch``: a notification lost while disconnected
is made up for by the re-read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import trio

from minikafka.replication.zookeeper import (
    BadVersion, ConnectionLost, NoNode, NodeExists, ZkEvent, ZkStat, ZooKeeperError, children_watch_key,
)

# One request's round trip, and how long a fired watch takes to reach the client.
REQUEST_LATENCY_S = 0.001
WATCH_LATENCY_S = 0.002
# kazoo notices a dead connection after about two thirds of the session timeout (its read
# timeout); a client whose connection the server dropped (a forced expiry) finds out at once.
SUSPEND_AFTER_FRACTION = 2 / 3


@dataclass
class _Node:
    data: bytes
    czxid: int
    mzxid: int
    ctime_ms: int
    mtime_ms: int
    ephemeral_owner: int = 0
    version: int = 0
    children: set[str] = field(default_factory=set)
    sequence: int = 0  # the next sequential child's number
    pzxid: int = 0  # the zxid of the last child created or deleted


def _parent(path: str) -> str:
    parent = path.rsplit("/", 1)[0]
    return parent or "/"


class SimZooKeeper:
    """The server: the node tree, the sessions, and who can reach it (``reachable``)."""

    def __init__(self, nursery: trio.Nursery, trace) -> None:
        self.nursery = nursery
        self.trace = trace
        self.nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0, 0, 0)}
        self.zxid = 0
        self._next_session = 0x1000
        self.sessions: dict[int, SimZkClient] = {}  # live session id -> its client
        self.clients: list[SimZkClient] = []
        # Called after every change with (path, node or None, session id of the writer).
        self.on_change = []

    def _now_ms(self) -> int:
        return int(trio.current_time() * 1000)

    # -- sessions ---------------------------------------------------------------------------

    def open_session(self, client: "SimZkClient") -> int:
        self._next_session += 1
        self.sessions[self._next_session] = client
        return self._next_session

    def expire(self, session_id: int) -> None:
        """End the session: its ephemeral nodes go (and their watchers hear of it)."""
        client = self.sessions.pop(session_id, None)
        if client is None:
            return
        self.trace("zk", f"session {session_id:#x} of {client.name} ends")
        client._wake()
        for path in sorted(p for p, n in self.nodes.items() if n.ephemeral_owner == session_id):
            self._remove(path, session_id)

    # -- operations (on behalf of a session) --------------------------------------------------

    def _changed(self, path: str, node: _Node | None, session_id: int) -> None:
        for hook in self.on_change:
            hook(path, node, session_id)
        for client in self.clients:
            client._node_changed(path)

    def stat(self, node: _Node) -> ZkStat:
        return ZkStat(version=node.version, ephemeral_owner=node.ephemeral_owner, czxid=node.czxid,
                      mzxid=node.mzxid, ctime_ms=node.ctime_ms, mtime_ms=node.mtime_ms)

    def create(self, session_id: int, path: str, data: bytes, ephemeral: bool, sequence: bool, makepath: bool) -> str:
        parent = _parent(path)
        if parent not in self.nodes:
            if not makepath:
                raise NoNode(f"create {path}: no parent {parent}")
            self.create(session_id, parent, b"", False, False, True)
        parent_node = self.nodes[parent]
        if sequence:
            path = f"{path}{parent_node.sequence:010d}"
            parent_node.sequence += 1
        if path in self.nodes:
            raise NodeExists(f"create {path}: node already exists")
        self.zxid += 1
        now = self._now_ms()
        node = self.nodes[path] = _Node(data, self.zxid, self.zxid, now, now,
                                        ephemeral_owner=session_id if ephemeral else 0)
        if not sequence:
            parent_node.sequence += 1  # ZooKeeper's cversion counts every child change
        parent_node.children.add(path.rsplit("/", 1)[1])
        parent_node.pzxid = self.zxid
        self._changed(path, node, session_id)
        return path

    def set(self, session_id: int, path: str, data: bytes, version: int) -> int:
        node = self.nodes.get(path)
        if node is None:
            raise NoNode(f"set {path}: no such node")
        if version != -1 and version != node.version:
            raise BadVersion(f"set {path}: the node is no longer at version {version}")
        self.zxid += 1
        node.data, node.version, node.mzxid, node.mtime_ms = data, node.version + 1, self.zxid, self._now_ms()
        self._changed(path, node, session_id)
        return node.version

    def delete(self, session_id: int, path: str, version: int, recursive: bool) -> None:
        node = self.nodes.get(path)
        if node is None:
            raise NoNode(f"delete {path}: no such node")
        if recursive:
            for child in sorted(node.children):
                try:
                    self.delete(session_id, f"{path.rstrip('/')}/{child}", -1, True)
                except NoNode:
                    pass
        elif node.children:
            raise ZooKeeperError(f"delete {path}: the node has children")
        if version != -1 and version != node.version:
            raise BadVersion(f"delete {path}: the node is no longer at version {version}")
        self._remove(path, session_id)

    def _remove(self, path: str, session_id: int) -> None:
        del self.nodes[path]
        self.zxid += 1
        parent = self.nodes.get(_parent(path))
        if parent is not None:
            parent.children.discard(path.rsplit("/", 1)[1])
            parent.pzxid = self.zxid
        self._changed(path, None, session_id)


class SimZkClient:
    """One broker's (or the harness's) ZooKeeper session; ``ZkClient``'s interface."""

    def __init__(self, server: SimZooKeeper, name: str, *, session_timeout_ms: int) -> None:
        self.server = server
        self.name = name
        self.session_timeout_ms = session_timeout_ms
        self.request_timeout_ms = session_timeout_ms
        self._send, self.events = trio.open_memory_channel(math.inf)
        self._session_id = 0
        self._started = False
        self._closing = False
        # The harness's switches: reachable (False: a partition, a pause), crashed (the
        # process died: its session is left to expire).
        self.reachable = True
        self.crashed = False
        self._connected = False
        self._changed = trio.Event()
        self._watches: dict[tuple[str, str], object] = {}  # (kind, path) -> last reported key
        server.clients.append(self)

    @property
    def session_id(self) -> int:
        return self._session_id

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started or self._connected:
            raise RuntimeError("ZkClient already started")
        await self._wait_reachable("connect", "/")
        self._started = True
        self._session_id = self.server.open_session(self)
        self._connected = True
        self._post(ZkEvent("session", state="connected"))
        self.server.nursery.start_soon(self._keep_session)

    def _done(self) -> bool:
        return self._closing or self.crashed

    async def _keep_session(self) -> None:
        """The connection: notices losing the server, and reconnects when it can."""
        timeout_s = self.session_timeout_ms / 1000
        while True:
            while self.reachable and self._session_id in self.server.sessions and not self._done():
                await self._wait_change()
            if self._done():
                return
            lost_at = trio.current_time()
            if not self.reachable:
                with trio.move_on_after(timeout_s * SUSPEND_AFTER_FRACTION):
                    while not self.reachable and not self._done():
                        await self._wait_change()
                if self._done():
                    return
                if self.reachable and self._session_id in self.server.sessions:
                    # A blip kazoo never noticed: what was sent meanwhile arrives now.
                    self._refresh_watches()
                    continue
            self._connected = False
            self._post(ZkEvent("session", state="suspended"))
            while not self.reachable and not self._done():
                remaining = lost_at + timeout_s - trio.current_time()
                if remaining > 0 and self._session_id in self.server.sessions:
                    with trio.move_on_after(remaining):
                        await self._wait_change()
                else:
                    self.server.expire(self._session_id)  # the server stopped hearing from it
                    await self._wait_change()
            if self._done():
                return
            if self._session_id not in self.server.sessions:
                self._post(ZkEvent("session", state="expired"))
                self._session_id = self.server.open_session(self)
            self._connected = True
            self._post(ZkEvent("session", state="connected"))
            self._refresh_watches()

    def _refresh_watches(self) -> None:
        for kind, path in list(self._watches):
            self._refresh_later(kind, path, 0.0)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_change(self) -> None:
        await self._changed.wait()

    def set_reachable(self, reachable: bool) -> None:
        self.reachable = reachable
        self._wake()

    def crash(self) -> None:
        """The process died: nothing more is sent; the server expires the session later."""
        self.crashed = True
        self._wake()
        session = self._session_id

        async def expire_later() -> None:
            await trio.sleep(self.session_timeout_ms / 1000)
            self.server.expire(session)

        if session in self.server.sessions:
            self.server.nursery.start_soon(expire_later)

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._wake()
        if not self.crashed and self._started:
            self.server.expire(self._session_id)
        self._send.close()
        if self in self.server.clients:
            self.server.clients.remove(self)

    # -- requests ------------------------------------------------------------------------------

    async def _wait_reachable(self, op: str, path: str) -> None:
        await trio.sleep(REQUEST_LATENCY_S)
        if self._closing or self.crashed:
            raise ConnectionLost(f"{op} {path}: ZooKeeper client {self.name} is closed")
        if self.reachable and (not self._started or self._connected):
            return
        with trio.move_on_after(self.request_timeout_ms / 1000):
            while not (self.reachable and self._connected):
                await self._wait_change()
                if self._closing or self.crashed:
                    break
            else:
                return
        raise ConnectionLost(f"{op} {path}: no answer from ZooKeeper (connection lost)")

    async def _op(self, op: str, path: str, fn):
        await self._wait_reachable(op, path)
        if self._session_id not in self.server.sessions:
            raise ConnectionLost(f"{op} {path}: the ZooKeeper session expired")
        return fn()

    async def get(self, path: str):
        found = await self.get_stat(path)
        return None if found is None else (found[0], found[1].version)

    async def get_stat(self, path: str):
        def read():
            node = self.server.nodes.get(path)
            return None if node is None else (node.data, self.server.stat(node))
        return await self._op("get", path, read)

    async def get_many(self, paths: list[str]):
        return [None if found is None else (found[0], found[1].version) for found in await self.get_stat_many(paths)]

    async def get_stat_many(self, paths: list[str]):
        await self._wait_reachable("get", "(many)")
        return [None if (n := self.server.nodes.get(p)) is None else (n.data, self.server.stat(n)) for p in paths]

    async def get_json(self, path: str):
        from minikafka.replication.zookeeper import parse_json_object

        found = await self.get(path)
        if found is None:
            return None
        return parse_json_object(found[0], path), found[1]

    async def exists(self, path: str):
        def read():
            node = self.server.nodes.get(path)
            return None if node is None else self.server.stat(node)
        return await self._op("exists", path, read)

    async def children(self, path: str) -> list[str]:
        def read():
            node = self.server.nodes.get(path)
            return [] if node is None else sorted(node.children)
        return await self._op("children", path, read)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = True) -> str:
        return await self._op("create", path, lambda: self.server.create(
            self._session_id, path, data, ephemeral, sequence, makepath))

    async def ensure_path(self, path: str) -> None:
        def make():
            if path not in self.server.nodes:
                self.server.create(self._session_id, path, b"", False, False, True)
        await self._op("create", path, make)

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        return await self._op("set", path, lambda: self.server.set(self._session_id, path, data, version))

    async def delete(self, path: str, *, recursive: bool = False, version: int = -1) -> None:
        await self._op("delete", path, lambda: self.server.delete(self._session_id, path, version, recursive))

    async def wait_deleted(self, path: str, timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            while await self.exists(path) is not None:
                await trio.sleep(0.05)
            return True
        return False

    # -- watches ------------------------------------------------------------------------------

    async def watch_children(self, path: str) -> None:
        await self._watch("children", path)

    async def watch_data(self, path: str) -> None:
        await self._watch("data", path)

    async def unwatch(self, path: str) -> None:
        for kind in ("children", "data"):
            self._watches.pop((kind, path), None)

    async def _watch(self, kind: str, path: str) -> None:
        if (kind, path) in self._watches:
            return
        await self._wait_reachable(f"watch {kind}", path)
        self._watches[(kind, path)] = object()  # nothing reported yet
        self._report(kind, path)

    def _report(self, kind: str, path: str) -> None:
        if (kind, path) not in self._watches or not self._connected or self._closing or self.crashed:
            return
        node = self.server.nodes.get(path)
        if kind == "children":
            children = sorted(node.children) if node is not None else []
            pzxid = node.pzxid if node is not None else None
            key, event = children_watch_key(children, pzxid), ZkEvent("children", path, children=children)
        elif node is None:
            key, event = None, ZkEvent("data", path, data=None, version=None)
        else:
            key, event = node.mzxid, ZkEvent("data", path, data=node.data, version=node.version)
        if key != self._watches[(kind, path)]:
            self._watches[(kind, path)] = key
            self._post(event)

    def _refresh_later(self, kind: str, path: str, delay: float) -> None:
        async def refresh() -> None:
            await trio.sleep(delay)
            if self.reachable:
                self._report(kind, path)

        self.server.nursery.start_soon(refresh)

    def _node_changed(self, path: str) -> None:
        """A one-shot ZooKeeper watch fires (only over a live connection)."""
        if not self._connected or not self.reachable or self.crashed or self._closing:
            return
        for kind, watched in ((("data", path)), ("children", _parent(path)), ("children", path)):
            if (kind, watched) in self._watches:
                self._refresh_later(kind, watched, WATCH_LATENCY_S)

    def _post(self, event: ZkEvent) -> None:
        if self.crashed:
            return
        try:
            self._send.send_nowait(event)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
