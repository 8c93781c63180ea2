"""Fixtures for the ZooKeeper layer's tests: a private server to pause or stop, and a real way
to make ZooKeeper expire a client's session.

The shared server (``zookeeper``) and the per-test chroot (``zk_chroot``) live in
tests/conftest.py, for the cluster tests too.
"""

from __future__ import annotations

import pytest
import trio

from minikafka.replication.zk_server import ZooKeeperServer
from minikafka.replication.zookeeper import ZkClient


@pytest.fixture
def private_zookeeper(tmp_path):
    """A ZooKeeper server of this test's own, for tests that pause or stop it."""
    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        yield server


def _close_session_from_outside(hosts: str, session_id: int, password: bytes) -> None:
    from kazoo.client import KazooClient

    # ZooKeeper's own tests (and Curator's KillSession) do this: a second connection that
    # presents the session's id and password takes the session over, and closing it ends the
    # session on the server, which deletes its ephemeral nodes and turns the original
    # client away with "session expired" when it reconnects.
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password))
    intruder.start(timeout=10)
    intruder.stop()
    intruder.close()


@pytest.fixture
def expire_session():
    """``await expire_session(zk)``: ZooKeeper ends ``zk``'s session as if it had timed out."""

    async def expire(zk: ZkClient) -> int:
        session_id, password = zk._client.client_id  # the password never leaves ZkClient otherwise
        await trio.to_thread.run_sync(_close_session_from_outside, zk.hosts, session_id, password)
        return session_id

    return expire


@pytest.fixture
def until():
    """``until(condition, what, timeout=30)``: poll ``condition()`` (a real check, not a sleep
    standing in for one) until it holds; fail naming ``what`` after ``timeout`` seconds."""
    import time

    def wait(condition, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"not {what} within {timeout} s"
            time.sleep(0.2)

    return wait
