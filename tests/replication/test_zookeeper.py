"""ZkClient against a real ZooKeeper: requests, errors, persistent watches, session expiry,
an unreachable or frozen server, and a trio loop that keeps running meanwhile."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
import weakref

import pytest
import trio

from minikafka.replication.zk_server import ZooKeeperServer
from minikafka.replication.zookeeper import (
    BadVersion, ConnectionLost, NodeExists, NoNode, ZkClient, ZkEvent, ZooKeeperError,
    split_connect_string,
)

pytestmark = pytest.mark.timeout(90)


# Events a test skipped while waiting for another kind: still due, in order, to a later wait.
_backlog: "weakref.WeakKeyDictionary[ZkClient, list[ZkEvent]]" = weakref.WeakKeyDictionary()


def _matches(event: ZkEvent, kind: str, path: str) -> bool:
    return event.kind == kind and (kind == "session" or event.path == path)


async def next_event(zk: ZkClient, kind: str, path: str = "", timeout: float = 20) -> ZkEvent:
    """The next event of ``kind`` on ``path`` (session events: any path); events of other
    kinds or paths are kept for later calls, so per-path order is what the test sees."""
    backlog = _backlog.setdefault(zk, [])
    for index, event in enumerate(backlog):
        if _matches(event, kind, path):
            return backlog.pop(index)
    with trio.fail_after(timeout):
        async for event in zk.events:
            if _matches(event, kind, path):
                return event
            backlog.append(event)
    raise AssertionError("events closed")


async def drain(zk: ZkClient, seconds: float = 0.3) -> list[ZkEvent]:
    events = _backlog.pop(zk, [])
    with trio.move_on_after(seconds):
        async for event in zk.events:
            events.append(event)
    return events


def test_split_connect_string():
    assert split_connect_string("h:1,g:2/kafka/x/") == ("h:1,g:2", "/kafka/x")
    assert split_connect_string("h:1") == ("h:1", "")
    assert split_connect_string("h:1/") == ("h:1", "")
    with pytest.raises(ValueError):
        split_connect_string("/kafka")


async def test_requests_and_their_errors(zk_chroot):
    async with ZkClient(zk_chroot) as zk:
        assert zk.session_id != 0
        assert await zk.get("/a") is None
        assert await zk.get_json("/a") is None
        assert await zk.exists("/a") is None
        assert await zk.children("/a") == []

        assert await zk.create("/a/b/c", b"one") == "/a/b/c"  # makepath by default
        assert await zk.get("/a/b/c") == (b"one", 0)
        assert await zk.children("/a") == ["b"]
        with pytest.raises(NodeExists, match="create /a/b/c: node already exists"):
            await zk.create("/a/b/c")
        with pytest.raises(NoNode, match="create /x/y: no such node"):
            await zk.create("/x/y", makepath=False)

        assert await zk.set("/a/b/c", b"two", version=0) == 1
        assert await zk.set("/a/b/c", b"three") == 2
        with pytest.raises(BadVersion, match="no longer at version 1"):
            await zk.set("/a/b/c", b"late", version=1)
        assert await zk.get("/a/b/c") == (b"three", 2)
        with pytest.raises(NoNode):
            await zk.set("/missing", b"")

        assert await zk.get_many(["/a/b/c", "/nope", "/a"]) == [(b"three", 2), None, (b"", 0)]
        assert await zk.get_many([]) == []
        [(data, stat), missing] = await zk.get_stat_many(["/a/b/c", "/nope"])
        assert (data, stat, missing) == (b"three", (await zk.get_stat("/a/b/c"))[1], None)

        first = await zk.create("/seq/n-", sequence=True)
        second = await zk.create("/seq/n-", sequence=True)
        assert (first, second) == ("/seq/n-0000000000", "/seq/n-0000000001")

        await zk.create("/j", b'{"version":1}')
        assert await zk.get_json("/j") == ({"version": 1}, 0)
        await zk.create("/notjson", b"\x00garbage")
        with pytest.raises(ZooKeeperError, match="/notjson holds .* not JSON"):
            await zk.get_json("/notjson")
        await zk.create("/list", b"[1]")
        with pytest.raises(ZooKeeperError, match="not a JSON object"):
            await zk.get_json("/list")

        with pytest.raises(ZooKeeperError, match="has children"):
            await zk.delete("/a")
        with pytest.raises(BadVersion):
            await zk.delete("/a/b/c", version=0)
        await zk.delete("/a", recursive=True)
        assert await zk.exists("/a") is None
        with pytest.raises(NoNode):
            await zk.delete("/a")

        stat = await zk.exists("/j")
        assert stat.version == 0 and stat.ephemeral_owner == 0
        await zk.create("/eph", ephemeral=True)
        _, eph_stat = await zk.get_stat("/eph")
        assert eph_stat.ephemeral_owner == zk.session_id


async def test_chroot_is_created_and_confines_the_client(zookeeper):
    root = f"/t{uuid.uuid4().hex}"
    async with ZkClient(f"{zookeeper.connect_string}{root}/deep/er") as zk:
        await zk.create("/node", b"x")
        assert await zk.children("/") == ["node"]
    async with ZkClient(zookeeper.connect_string) as outside:
        assert await outside.get(f"{root}/deep/er/node") == (b"x", 0)
        await outside.delete(root, recursive=True)


async def test_conditional_set_loses_the_race(zk_chroot):
    async with ZkClient(zk_chroot) as one, ZkClient(zk_chroot) as two:
        await one.create("/state", b"v0")
        _, version_seen_by_one = await one.get("/state")
        _, version_seen_by_two = await two.get("/state")
        assert await two.set("/state", b"two", version_seen_by_two) == 1
        with pytest.raises(BadVersion):
            await one.set("/state", b"one", version_seen_by_one)
        assert await one.get("/state") == (b"two", 1)


async def test_persistent_watches_report_every_change(zk_chroot):
    async with ZkClient(zk_chroot) as zk, ZkClient(zk_chroot) as other:
        assert (await next_event(zk, "session")).state == "connected"
        await zk.watch_children("/ids")
        await zk.watch_data("/ids/1")
        # The current state comes first, even for nodes that do not exist yet.
        assert (await next_event(zk, "children", "/ids")).children == []
        initial = await next_event(zk, "data", "/ids/1")
        assert (initial.data, initial.version) == (None, None)

        await other.create("/ids/1", b"a", ephemeral=True)
        event = await next_event(zk, "data", "/ids/1")
        assert (event.data, event.version) == (b"a", 0)
        assert (await next_event(zk, "children", "/ids")).children == ["1"]

        await other.set("/ids/1", b"b")
        event = await next_event(zk, "data", "/ids/1")
        assert (event.data, event.version) == (b"b", 1)

        await other.create("/ids/2")
        assert (await next_event(zk, "children", "/ids")).children == ["1", "2"]

        # Deletion of the parent: the children watch keeps watching for its return.
        await other.delete("/ids", recursive=True)
        deleted = await next_event(zk, "data", "/ids/1")
        assert (deleted.data, deleted.version) == (None, None)
        children = await next_event(zk, "children", "/ids")
        while children.children:  # the two deletions may be seen one by one
            children = await next_event(zk, "children", "/ids")
        await other.create("/ids/3")
        assert (await next_event(zk, "children", "/ids")).children == ["3"]

        await drain(zk, 0.1)
        await zk.unwatch("/ids")
        await other.create("/ids/4")
        await other.set("/ids/3", b"unwatched")
        assert [e for e in await drain(zk) if e.path == "/ids"] == []


async def test_a_children_watch_reports_a_child_deleted_and_created_again_between_reads(zk_chroot):
    """A broker's old session expires and its restarted self registers at once: the watch fires
    on the deletion, but its re-read may already see the new node, the same children as before.
    That is still a change (Kafka's controller compares broker epochs on every firing, KIP-380);
    reported as none, the controller never heard the broker had bounced. One transaction makes
    the re-read see the same children for certain."""
    from kazoo.client import KazooClient

    async with ZkClient(zk_chroot) as zk, ZkClient(zk_chroot) as other:
        await other.create("/ids/1", b"old")
        await zk.watch_children("/ids")
        assert (await next_event(zk, "children", "/ids")).children == ["1"]

        def bounce() -> None:
            kazoo = KazooClient(hosts=zk_chroot)
            kazoo.start()
            try:
                transaction = kazoo.transaction()
                transaction.delete("/ids/1")
                transaction.create("/ids/1", b"new")
                assert all(result is True or isinstance(result, str) for result in transaction.commit())
            finally:
                kazoo.stop()

        await trio.to_thread.run_sync(bounce)
        assert (await next_event(zk, "children", "/ids", timeout=10)).children == ["1"]


async def test_close_ends_the_session_and_the_event_stream(zk_chroot):
    async with ZkClient(zk_chroot) as watcher:
        zk = ZkClient(zk_chroot)
        await zk.start()
        await zk.create("/eph", b"x", ephemeral=True)
        await watcher.watch_data("/eph")
        assert (await next_event(watcher, "data", "/eph")).data == b"x"
        await zk.close()
        # ZooKeeper deletes a closed session's ephemeral nodes at once, not after a timeout.
        assert (await next_event(watcher, "data", "/eph", timeout=5)).data is None
        with trio.fail_after(5):
            remaining = [event async for event in zk.events]
        assert all(event.kind == "session" for event in remaining)
        with pytest.raises(ConnectionLost, match="closed"):
            await zk.get("/eph")
        await zk.close()  # twice is harmless


async def test_session_expiry_reports_expired_then_connected(zk_chroot, expire_session):
    async with ZkClient(zk_chroot, session_timeout_ms=4000) as zk, ZkClient(zk_chroot) as other:
        assert (await next_event(zk, "session")).state == "connected"
        await zk.create("/brokers/ids/1", b"me", ephemeral=True)
        await other.create("/config", b"v0")
        await zk.watch_children("/brokers/ids")
        await zk.watch_data("/config")
        assert (await next_event(zk, "children", "/brokers/ids")).children == ["1"]
        assert (await next_event(zk, "data", "/config")).data == b"v0"

        old_session = await expire_session(zk)

        states = []
        while not states or states[-1] != "connected":
            states.append((await next_event(zk, "session")).state)
        # kazoo first sees the connection dropped ("suspended"), then the server refuses the
        # old session ("expired"), then it has a new one.
        assert states[-2:] == ["expired", "connected"], states
        assert zk.session_id not in (0, old_session)

        # The old session's ephemeral node is gone, and the watch saw it go.
        assert (await next_event(zk, "children", "/brokers/ids")).children == []
        # The caller re-registers; the persistent watches work in the new session.
        await zk.create("/brokers/ids/1", b"me again", ephemeral=True)
        assert (await next_event(zk, "children", "/brokers/ids")).children == ["1"]
        _, stat = await zk.get_stat("/brokers/ids/1")
        assert stat.ephemeral_owner == zk.session_id
        await other.set("/config", b"v1")
        assert (await next_event(zk, "data", "/config")).data == b"v1"


async def test_a_restarted_server_gives_the_session_back(tmp_path):
    """ZooKeeper keeps sessions in its data dir: down for less than the session timeout, a
    restart costs a "suspended", not the session or its ephemeral nodes. The timeout is 30 s
    (a tick of 1.5 s allows up to 20 ticks): a JVM's stop and start took over 8 s on a loaded
    CI machine, and the session expired."""
    with ZooKeeperServer(tmp_path / "zookeeper", tick_time_ms=1500) as server:
        async with ZkClient(server.connect_string, session_timeout_ms=30000, request_timeout_ms=1000) as zk:
            assert (await next_event(zk, "session")).state == "connected"
            await zk.create("/eph", b"x", ephemeral=True)
            session = zk.session_id
            await trio.to_thread.run_sync(server.stop)
            assert (await next_event(zk, "session")).state == "suspended"
            with pytest.raises(ConnectionLost):
                await zk.get("/eph")
            await trio.to_thread.run_sync(server.start)  # same port, same data dir
            assert (await next_event(zk, "session", timeout=60)).state == "connected"
            assert zk.session_id == session
            _, stat = await zk.get_stat("/eph")
            assert stat.ephemeral_owner == session


async def test_start_fails_within_its_timeout_when_nothing_listens():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        zk = ZkClient(f"127.0.0.1:{port}", connection_timeout_ms=1500)
        with trio.fail_after(10):
            with pytest.raises(ZooKeeperError) as raised:
                await zk.start()
    message = str(raised.value)
    assert message == f"cannot connect to ZooKeeper at 127.0.0.1:{port} within 1.5 s"
    with pytest.raises(ConnectionLost):
        await zk.get("/")
    await zk.close()
    with trio.fail_after(1):
        assert [event async for event in zk.events] == []


async def test_loop_keeps_running_while_zookeeper_is_frozen(private_zookeeper):
    async with ZkClient(private_zookeeper.connect_string, session_timeout_ms=3000) as zk:
        await zk.create("/x", b"before")
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await trio.sleep(0.02)
                ticks += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            private_zookeeper.pause()
            try:
                # A caller's own deadline is honoured while kazoo still waits on the socket.
                with trio.move_on_after(0.5) as scope:
                    await zk.get("/x")
                assert scope.cancelled_caught
                ticks_at_cancel = ticks
                # Without a deadline the request fails once kazoo gives up on the server.
                with pytest.raises(ConnectionLost, match="get /x: no answer from ZooKeeper"):
                    await zk.get("/x")
                assert ticks_at_cancel >= 5
                assert ticks > ticks_at_cancel + 5
            finally:
                private_zookeeper.resume()
            nursery.cancel_scope.cancel()

        # Back within the session timeout: same session, same data.
        with trio.fail_after(20):
            while True:
                try:
                    assert await zk.get("/x") == (b"before", 0)
                    break
                except ConnectionLost:
                    await trio.sleep(0.1)


def test_importing_the_layer_does_not_import_kazoo():
    code = ("import sys, minikafka.replication.zookeeper, minikafka.replication.kafka_zk, "
            "minikafka.replication.zk_server; print('kazoo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
