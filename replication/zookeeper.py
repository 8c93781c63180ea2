"""kazoo wrapped for trio: the one place cluster mode talks to ZooKeeper.

kazoo's calls block and its watch and session callbacks run on kazoo's own threads. Here:

- every ZooKeeper request runs in a worker thread (``trio.to_thread.run_sync``, on this
  client's own capacity limiter so a ZooKeeper outage cannot starve the disk work that shares
  trio's default one) and waits at most ``request_timeout_ms`` for its answer, because kazoo
  keeps a request queued for as long as it is reconnecting;
- callbacks never block kazoo's threads and never call into trio directly: they hand a
  ``ZkEvent`` to ``TrioToken.run_sync_soon``, which puts it in the ``events`` channel, so the
  caller reads session changes and fired watches from one ordered stream;
- kazoo's exceptions become this module's one-line ``ZooKeeperError`` family.

Session semantics are ZooKeeper's: ``suspended`` means the connection dropped and kazoo is
reconnecting (the session, its ephemeral nodes and watches may still be alive); ``expired``
means the session is gone (its ephemeral nodes are deleted) and kazoo is opening a new one,
announced by ``connected``. The caller re-creates its ephemeral nodes then; persistent watches
(``watch_children`` / ``watch_data``) re-arm themselves and report whatever changed meanwhile.

kazoo is imported when a client is created, never at import time: the single broker does not
pay for it.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import trio

if TYPE_CHECKING:
    from kazoo.client import KazooClient

__all__ = [
    "ZooKeeperError", "ConnectionLost", "BadVersion", "NodeExists", "NoNode",
    "ZkEvent", "ZkStat", "ZkClient", "split_connect_string",
]


class ZooKeeperError(Exception):
    """A ZooKeeper request failed; the message is one readable line."""


class ConnectionLost(ZooKeeperError):
    """No answer: the connection dropped, the session expired or the client was closed.

    The request may or may not have been applied.
    """


class BadVersion(ZooKeeperError):
    """A conditional set or delete lost the race: the node's version has changed."""


class NodeExists(ZooKeeperError):
    pass


class NoNode(ZooKeeperError):
    pass


@dataclass
class ZkEvent:
    """One item of ``ZkClient.events``.

    kind "session": ``state`` is "connected", "suspended" or "expired", ``path`` is "".
    kind "children": ``children`` is the node's sorted children ([] while it does not exist).
    kind "data": ``data`` and ``version`` are the node's, both None once it is deleted.
    """

    kind: str
    path: str = ""
    state: str | None = None
    children: list[str] | None = None
    data: bytes | None = None
    version: int | None = None


@dataclass(frozen=True)
class ZkStat:
    """The parts of a znode's Stat that callers decide on."""

    version: int
    #: session id of an ephemeral node's creator, 0 for a persistent node
    ephemeral_owner: int
    czxid: int
    mzxid: int
    ctime_ms: int
    mtime_ms: int


def split_connect_string(connect: str) -> tuple[str, str]:
    """``"h1:p1,h2:p2/kafka"`` → ``("h1:p1,h2:p2", "/kafka")``; no chroot → ``(hosts, "")``."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    if not hosts:
        raise ValueError(f"zookeeper.connect {connect!r} names no host")
    return hosts, chroot


# Each persistent watch re-reads its node on a kazoo thread (watch callbacks and session
# changes) or a trio worker (first registration); this marks "nothing reported yet".
_NOTHING = object()


def children_watch_key(children: list[str], pzxid: int | None) -> tuple:
    """What identifies a children watch's state, so a re-read reports only a real change.

    The parent's pzxid tells a child deleted and created again under the same name (a broker that
    re-registers as its old session ends); names alone would hide that bounce. With no children
    there is nothing to bounce: a parent created, or children come and gone, is no news (the
    pzxid of an empty or missing parent is not compared).
    """
    return (tuple(children), pzxid) if children else ()


class _PersistentWatch:
    """Re-arms a one-shot ZooKeeper watch after every firing and after every reconnect.

    kazoo forgets its registered watchers whenever the connection drops, so a re-read on each
    "connected" is what keeps the watch alive. A re-read reports only a real change (children
    identified by the parent's pzxid, data by mzxid), so a reconnect after nothing happened says
    nothing. Not by the children's names: a child deleted and created again before the re-read
    (a restarted broker registering as its old session ends) leaves the same names, and the
    controller must still hear of it (Kafka's re-reads on every firing, KIP-380).
    A children watch on a missing node watches for its creation and reports [] meanwhile.
    """

    def __init__(self, zk: "ZkClient", kind: str, path: str):
        self.zk = zk
        self.kind = kind
        self.path = path
        self.stopped = False
        self._lock = threading.Lock()
        self._last: Any = _NOTHING

    def refresh(self) -> None:
        """Blocking; never on trio's thread."""
        with self._lock:
            if self.stopped:
                return
            try:
                key, event = self._read()
            except Exception as exc:
                if self.zk._is_connection_error(exc):
                    return  # the next "connected" re-reads
                raise
            if key != self._last:
                self._last = key
                self.zk._post(event)

    def _read(self) -> tuple[Any, ZkEvent]:
        client = self.zk._require_client()
        wait = self.zk._wait
        from kazoo.exceptions import NoNodeError

        while True:
            try:
                if self.kind == "children":
                    names, stat = wait(client.get_children_async(self.path, watch=self._fired, include_data=True))
                    children = sorted(names)
                    return children_watch_key(children, stat.pzxid), ZkEvent("children", self.path, children=children)
                data, stat = wait(client.get_async(self.path, watch=self._fired))
                return stat.mzxid, ZkEvent("data", self.path, data=data, version=stat.version)
            except NoNodeError:
                # An exists watch fires on creation; if the node appeared in between, read again.
                if wait(client.exists_async(self.path, watch=self._fired)) is not None:
                    continue
                if self.kind == "children":
                    return children_watch_key([], None), ZkEvent("children", self.path, children=[])
                return None, ZkEvent("data", self.path, data=None, version=None)

    def _fired(self, watched_event) -> None:
        # On kazoo's callback thread. A "NONE" event is kazoo dropping its watchers because the
        # connection went; the state listener re-reads once reconnected.
        if self.stopped or watched_event.type == "NONE":
            return
        self.zk._spawn(self.refresh)


class ZkClient:
    """One ZooKeeper session, used from trio.

    ``connect`` is ZooKeeper's connect string and may end in a chroot (``host:2181/kafka``),
    which is created when missing. ``events`` delivers session changes and fired watches in
    order; its buffer is unbounded because kazoo's threads must never wait for the reader.
    """

    def __init__(self, connect: str, *, session_timeout_ms: int = 6000,
                 connection_timeout_ms: int = 6000, request_timeout_ms: int | None = None):
        self.connect = connect
        self.hosts, self.chroot = split_connect_string(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        # A request waits at most this long; by then a silent server has cost us the session.
        self.request_timeout_ms = request_timeout_ms or session_timeout_ms
        self._send, self.events = trio.open_memory_channel(math.inf)
        self._client: KazooClient | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._limiter = trio.CapacityLimiter(8)
        self._watches: dict[tuple[str, str], _PersistentWatch] = {}
        self._session_id = 0
        self._ever_connected = False
        self._closing = False

    @property
    def session_id(self) -> int:
        """The current session's id (0 before the first connection)."""
        return self._session_id

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and open a session; ZooKeeperError if that takes over connection_timeout_ms."""
        if self._client is not None:
            raise RuntimeError("ZkClient already started")
        self._token = trio.lowlevel.current_trio_token()
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        client = KazooClient(
            hosts=self.connect,
            timeout=self.session_timeout_ms / 1000,
            # kazoo's default backs off to an hour between reconnects; a broker wants its
            # session back within a second of ZooKeeper returning.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
        )
        client.add_listener(self._on_state)
        self._client = client
        try:
            await self._request("connect", self.chroot or "/", self._connect)
        except BaseException:
            self._client = None
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_stop_quietly, client)
            raise

    def _connect(self) -> None:
        client = self._require_client()
        seconds = self.connection_timeout_ms / 1000
        client.start_async().wait(seconds)
        if not client.connected:
            raise ZooKeeperError(f"cannot connect to ZooKeeper at {self.hosts} within {seconds:g} s")
        if self.chroot and self._wait(client.exists_async("/")) is None:
            self._create_chroot()

    def _create_chroot(self) -> None:
        """kazoo only works inside a chroot that exists: make it with a chroot-less session."""
        from kazoo.client import KazooClient

        outer = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000)
        outer.start_async().wait(self.connection_timeout_ms / 1000)
        try:
            if not outer.connected:
                raise ZooKeeperError(f"cannot connect to ZooKeeper at {self.hosts} to create {self.chroot}")
            self._wait(outer.ensure_path_async(self.chroot))
        finally:
            outer.stop()
            outer.close()

    async def close(self) -> None:
        """End the session (its ephemeral nodes go at once) and close ``events``."""
        client = self._client
        if client is None or self._closing:
            self._send.close()  # never started: a reader of events must not wait forever
            return
        self._closing = True
        for watch in self._watches.values():
            watch.stopped = True

        await trio.to_thread.run_sync(_stop_quietly, client)
        self._send.close()

    async def __aenter__(self) -> "ZkClient":
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    # -- plain requests ----------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, int] | None:
        """(data, version), or None if the node does not exist."""
        found = await self.get_stat(path)
        return None if found is None else (found[0], found[1].version)

    async def get_stat(self, path: str) -> tuple[bytes, ZkStat] | None:
        """(data, stat), or None if the node does not exist."""
        def call():
            from kazoo.exceptions import NoNodeError
            try:
                data, stat = self._wait(self._require_client().get_async(path))
            except NoNodeError:
                return None
            return data, _stat(stat)
        return await self._request("get", path, call)

    async def get_many(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        """``get`` of many nodes in one round trip's time (see get_stat_many)."""
        return [None if found is None else (found[0], found[1].version) for found in await self.get_stat_many(paths)]

    async def get_stat_many(self, paths: list[str]) -> list[tuple[bytes, ZkStat] | None]:
        """``get_stat`` of many nodes in one round trip's time: the requests are pipelined on
        the session instead of waiting for each answer in turn."""
        if not paths:
            return []

        def call():
            from kazoo.exceptions import NoNodeError
            client = self._require_client()
            pending = [client.get_async(path) for path in paths]
            found = []
            for result in pending:
                try:
                    data, stat = self._wait(result)
                except NoNodeError:
                    found.append(None)
                else:
                    found.append((data, _stat(stat)))
            return found
        return await self._request("get", paths[0] if len(paths) == 1 else f"({len(paths)} nodes)", call)

    async def get_json(self, path: str) -> tuple[dict, int] | None:
        """The node's data parsed as a JSON object, and its version; None if missing."""
        found = await self.get(path)
        if found is None:
            return None
        data, version = found
        return parse_json_object(data, path), version

    async def exists(self, path: str) -> ZkStat | None:
        def call():
            stat = self._wait(self._require_client().exists_async(path))
            return None if stat is None else _stat(stat)
        return await self._request("exists", path, call)

    async def children(self, path: str) -> list[str]:
        """Sorted children; [] if the node is missing."""
        def call():
            from kazoo.exceptions import NoNodeError
            try:
                return sorted(self._wait(self._require_client().get_children_async(path)))
            except NoNodeError:
                return []
        return await self._request("children", path, call)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = True) -> str:
        """Create a node (and, with ``makepath``, its missing parents); returns its path,
        which for a sequential node ends in the sequence number. NodeExists / NoNode."""
        def call():
            return self._wait(self._require_client().create_async(
                path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath))
        return await self._request("create", path, call)

    async def ensure_path(self, path: str) -> None:
        """Create a persistent node and its parents unless they exist."""
        await self._request("create", path, lambda: self._wait(self._require_client().ensure_path_async(path)))

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        """Write the data if the node is at ``version`` (-1: any); returns the new version.
        BadVersion / NoNode."""
        def call():
            return self._wait(self._require_client().set_async(path, data, version)).version
        return await self._request("set", path, call, version=version)

    async def delete(self, path: str, *, recursive: bool = False, version: int = -1) -> None:
        """Delete the node (NoNode if missing, BadVersion if not at ``version``); with
        ``recursive``, its descendants first."""
        def call():
            if recursive:
                self._delete_children(path)
            self._wait(self._require_client().delete_async(path, version))
        return await self._request("delete", path, call, version=version)

    def _delete_children(self, path: str) -> None:
        from kazoo.exceptions import NoNodeError

        client = self._require_client()
        try:
            children = self._wait(client.get_children_async(path))
        except NoNodeError:
            return
        for child in children:
            child_path = path.rstrip("/") + "/" + child
            self._delete_children(child_path)
            try:
                self._wait(client.delete_async(child_path))
            except NoNodeError:
                pass  # someone else deleted it meanwhile: the goal is reached

    # -- watches --------------------------------------------------------------------------------

    async def watch_children(self, path: str) -> None:
        """Report the node's children now and after every change, as ZkEvent("children").

        The watch outlives connection loss and session expiry; a missing node reports [] and
        is watched for its creation.
        """
        await self._watch("children", path)

    async def watch_data(self, path: str) -> None:
        """Report the node's data now and after every change, as ZkEvent("data"); a deleted
        or missing node reports data=None. Outlives connection loss and session expiry."""
        await self._watch("data", path)

    async def unwatch(self, path: str) -> None:
        """Stop both kinds of persistent watch on ``path`` (the next firing is ignored)."""
        for kind in ("children", "data"):
            watch = self._watches.pop((kind, path), None)
            if watch is not None:
                watch.stopped = True

    async def _watch(self, kind: str, path: str) -> None:
        self._require_client()
        if (kind, path) in self._watches:
            return
        watch = self._watches[(kind, path)] = _PersistentWatch(self, kind, path)
        try:
            await self._request(f"watch {kind}", path, watch.refresh)
        except BaseException:
            self._watches.pop((kind, path), None)
            watch.stopped = True
            raise

    async def wait_deleted(self, path: str, timeout_s: float) -> bool:
        """Wait until the node does not exist; False if it still does after ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            while True:
                gone = trio.Event()
                stat = await self._request("exists", path, lambda: self._wait(
                    self._require_client().exists_async(
                        path, watch=lambda _event: self._to_trio(gone.set))))
                if stat is None:
                    return True
                # The watch dies with a dropped connection; look again now and then.
                with trio.move_on_after(1.0):
                    await gone.wait()
        return False

    # -- plumbing --------------------------------------------------------------------------------

    def _require_client(self) -> "KazooClient":
        if self._client is None or self._closing:
            raise ConnectionLost(f"ZooKeeper client for {self.connect} is not started or is closed")
        return self._client

    def _wait(self, async_result):
        """Block (never on trio's thread) for a kazoo request's answer, at most request_timeout_ms."""
        return async_result.get(timeout=self.request_timeout_ms / 1000)

    async def _thread(self, fn: Callable[[], Any]) -> Any:
        # abandon_on_cancel: a caller's cancel scope (its timeout) wins over a request kazoo
        # still waits on; the thread itself ends within request_timeout_ms.
        return await trio.to_thread.run_sync(fn, abandon_on_cancel=True, limiter=self._limiter)

    async def _request(self, op: str, path: str, fn: Callable[[], Any], *, version: int = -1) -> Any:
        try:
            return await self._thread(fn)
        except ZooKeeperError:
            raise
        except Exception as exc:
            translated = self._translate(exc, op, path, version)
            if translated is None:
                raise
            raise translated from None

    def _translate(self, exc: Exception, op: str, path: str, version: int) -> ZooKeeperError | None:
        from kazoo import exceptions as kx

        where = f"{op} {path}"
        if isinstance(exc, kx.NoNodeError):
            return NoNode(f"{where}: no such node")
        if isinstance(exc, kx.NodeExistsError):
            return NodeExists(f"{where}: node already exists")
        if isinstance(exc, kx.BadVersionError):
            return BadVersion(f"{where}: the node is no longer at version {version}")
        if isinstance(exc, kx.NotEmptyError):
            return ZooKeeperError(f"{where}: the node has children")
        if isinstance(exc, kx.SessionExpiredError):
            return ConnectionLost(f"{where}: the ZooKeeper session expired")
        if self._is_connection_error(exc):
            return ConnectionLost(
                f"{where}: no answer from ZooKeeper at {self.hosts} within "
                f"{self.request_timeout_ms / 1000:g} s (connection lost)")
        if isinstance(exc, kx.KazooException):
            return ZooKeeperError(f"{where}: {type(exc).__name__} {exc}".rstrip())
        return None

    def _is_connection_error(self, exc: BaseException) -> bool:
        from kazoo import exceptions as kx
        from kazoo.handlers.threading import KazooTimeoutError

        return isinstance(exc, (kx.ConnectionLoss, kx.ConnectionClosedError, kx.SessionExpiredError,
                                kx.OperationTimeoutError, KazooTimeoutError, ConnectionLost))

    def _spawn(self, fn: Callable[[], None]) -> None:
        client = self._client
        if client is not None and not self._closing:
            client.handler.spawn(fn)

    def _on_state(self, state: str) -> None:
        # On kazoo's connection thread: record and hand over, never block.
        if self._closing:
            return
        if state == "CONNECTED":
            client_id = self._client.client_id if self._client is not None else None
            if client_id is not None:
                self._session_id = client_id[0]
            self._ever_connected = True
            self._post(ZkEvent("session", state="connected"))
            for watch in list(self._watches.values()):
                self._spawn(watch.refresh)
        elif state == "SUSPENDED":
            self._post(ZkEvent("session", state="suspended"))
        elif state == "LOST" and self._ever_connected:
            self._post(ZkEvent("session", state="expired"))

    def _post(self, event: ZkEvent) -> None:
        """From any thread but trio's: queue ``event`` on ``events``."""
        self._to_trio(self._deliver, event)

    def _to_trio(self, fn: Callable, *args) -> None:
        if self._token is None:
            return
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass  # the event loop is gone; nobody is left to tell

    def _deliver(self, event: ZkEvent) -> None:
        try:
            self._send.send_nowait(event)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # closed, or the reader stopped listening


def _stop_quietly(client: "KazooClient") -> None:
    client.stop()
    client.close()


def parse_json_object(data: bytes, path: str) -> dict:
    """A znode's data as a JSON object; ZooKeeperError naming the node if it is not one."""
    import json

    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ZooKeeperError(f"{path} holds {_preview(data)}, not JSON") from None
    if not isinstance(value, dict):
        raise ZooKeeperError(f"{path} holds {_preview(data)}, not a JSON object")
    return value


def _preview(data: bytes) -> str:
    return repr(data[:60]) + ("..." if len(data) > 60 else "")


def _stat(stat) -> ZkStat:
    return ZkStat(version=stat.version, ephemeral_owner=stat.ephemeralOwner, czxid=stat.czxid,
                  mzxid=stat.mzxid, ctime_ms=stat.ctime, mtime_ms=stat.mtime)
