"""ZooKeeperServer: a real JVM started, answering, logging to its data dir, and gone after stop."""

from __future__ import annotations

import os
import socket

import pytest

from minikafka.replication.zk_server import (
    ZooKeeperNotInstalled, ZooKeeperServer, ZooKeeperStartError, four_letter_word,
)

pytestmark = pytest.mark.timeout(90)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone once its status says so.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.zookeeper
def test_start_serves_on_a_free_port_and_stop_leaves_nothing(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk")
    with pytest.raises(RuntimeError, match="not started"):
        server.connect_string
    with server:
        host, port = server.connect_string.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert four_letter_word(host, int(port), "ruok") == "imok"
        assert "Mode: standalone" in four_letter_word(host, int(port), "srvr")
        pid = server.process.pid
    assert not _alive(pid)
    assert four_letter_word(host, int(port), "ruok", timeout=0.5) is None
    # The JVM's log is in the data dir (and so not on the test's stderr).
    assert "binding to port" in (tmp_path / "zk" / "zookeeper.log").read_text()
    server.stop()  # twice is harmless


@pytest.mark.zookeeper
def test_stop_also_ends_a_paused_server(tmp_path):
    with ZooKeeperServer(tmp_path / "zk") as server:
        server.pause()
        pid = server.process.pid
    assert not _alive(pid)


@pytest.mark.zookeeper
def test_a_taken_port_is_a_start_error(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = ZooKeeperServer(tmp_path / "zk", port=port)
        with pytest.raises(ZooKeeperStartError, match="BindException: Address already in use"):
            server.start(timeout=20)
        assert server.process is None


def test_missing_java_names_the_package_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    with pytest.raises(ZooKeeperNotInstalled, match="apt-get install zookeeper"):
        ZooKeeperServer(tmp_path / "zk").start()
