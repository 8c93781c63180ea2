"""The simulator's in-memory ZooKeeper keeps the semantics the brokers rely on: versions,
ephemeral nodes that go with their session, sessions that expire while cut off, and watches
delivered as ZkClient delivers them."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from minikafka.replication.simulation.zk import SimZkClient, SimZooKeeper
from minikafka.replication.zookeeper import BadVersion, ConnectionLost, NodeExists, NoNode

pytestmark = pytest.mark.trio


@pytest.fixture
def mock_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def _server_and_client(nursery, name="a", timeout_ms=4000):
    server = SimZooKeeper(nursery, lambda kind, message: None)
    client = SimZkClient(server, name, session_timeout_ms=timeout_ms)
    await client.start()
    return server, client


async def _events(client, count):
    return [await client.events.receive() for _ in range(count)]


async def test_versions_and_existence(mock_clock):
    async with trio.open_nursery() as nursery:
        _, zk = await _server_and_client(nursery)
        await zk.create("/a/b", b"1")
        assert await zk.get("/a/b") == (b"1", 0)
        with pytest.raises(NodeExists):
            await zk.create("/a/b", b"2")
        assert await zk.set("/a/b", b"2", version=0) == 1
        with pytest.raises(BadVersion):
            await zk.set("/a/b", b"3", version=0)
        with pytest.raises(NoNode):
            await zk.create("/x/y", makepath=False)
        assert await zk.create("/a/seq-", sequence=True) == "/a/seq-0000000001"
        nursery.cancel_scope.cancel()


async def test_a_cut_off_session_expires_and_its_ephemeral_node_goes(mock_clock):
    async with trio.open_nursery() as nursery:
        server, owner = await _server_and_client(nursery, "owner")
        watcher = SimZkClient(server, "watcher", session_timeout_ms=4000)
        await watcher.start()
        await owner.create("/brokers/ids/1", b"x", ephemeral=True)
        await watcher.watch_children("/brokers/ids")
        seen = [(e.kind, e.state, e.children) for e in await _events(watcher, 2)]
        assert seen == [("session", "connected", None), ("children", None, ["1"])]
        owner.set_reachable(False)
        with pytest.raises(ConnectionLost):
            await owner.get("/brokers/ids/1")  # waits the request timeout, then gives up
        assert (await watcher.events.receive()).children == []
        assert await watcher.children("/brokers/ids") == []
        owner.set_reachable(True)
        kinds = [(e.kind, e.state) for e in await _events(owner, 4)]
        assert kinds == [("session", "connected"), ("session", "suspended"), ("session", "expired"),
                         ("session", "connected")]
        nursery.cancel_scope.cancel()


async def test_a_short_blip_keeps_the_session_and_reports_what_changed(mock_clock):
    async with trio.open_nursery() as nursery:
        server, zk = await _server_and_client(nursery, "a")
        other = SimZkClient(server, "b", session_timeout_ms=4000)
        await other.start()
        await zk.watch_data("/controller")
        await _events(zk, 2)  # connected, and the missing node
        zk.set_reachable(False)
        await other.create("/controller", b"2", ephemeral=True)
        await trio.sleep(1)  # well within the session timeout: kazoo never notices
        zk.set_reachable(True)
        event = await zk.events.receive()
        assert (event.kind, event.data) == ("data", b"2")
        assert zk.session_id in server.sessions
        nursery.cancel_scope.cancel()
