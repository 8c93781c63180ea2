"""Fixture brokers forked from the session's warm parent (minikafka.testing.warm) are as
isolated as spawned ones: their own process, port, files, threads, randomness and state, a child
of the test process, untouched by the warm parent's death; and a broker that crashes is reported
as a spawned one is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from minikafka.testing import MinikafkaBroker
from minikafka.testing.broker import finish_stopping, started_brokers, warm_starter
from minikafka.testing.warm import PROBE_ENV, ForkedProcess


def open_files(pid: int) -> set[str]:
    """What the process has open: paths, and sockets and pipes by inode; not /dev/null nor the
    anonymous inodes (epoll, eventfd), whose names are the same in every process."""
    targets = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass
    return {target for target in targets if target != "/dev/null" and not target.startswith("anon_inode:")}


def produce_and_read(bootstrap: str, topic: str, value: bytes) -> list[bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(topic, value).get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, 0)])
    values = [record.value for record in consumer]
    consumer.close()
    return values


def test_two_forked_brokers_share_no_port_file_thread_randomness_or_state(tmp_path, monkeypatch):
    monkeypatch.setenv(PROBE_ENV, str(tmp_path / "probe-a"))
    a = MinikafkaBroker(tmp_path / "a").start()
    monkeypatch.setenv(PROBE_ENV, str(tmp_path / "probe-b"))
    b = MinikafkaBroker(tmp_path / "b").start()
    try:
        assert isinstance(a.process, ForkedProcess) and isinstance(b.process, ForkedProcess)
        assert a.process.pid != b.process.pid and a.port != b.port
        for broker in (a, b):  # children of this process, as a spawned broker is
            assert int(open(f"/proc/{broker.process.pid}/stat").read().split()[3]) == os.getpid()
        assert not open_files(a.process.pid) & open_files(b.process.pid)
        parent = warm_starter()._process.pid
        assert len(os.listdir(f"/proc/{parent}/task")) == 1  # it forks from a single thread
        assert not open_files(parent) & (open_files(a.process.pid) | open_files(b.process.pid))
        probe_a, probe_b = (json.loads((tmp_path / name).read_text()) for name in ("probe-a", "probe-b"))
        assert probe_a["threads"] == probe_b["threads"] == 1
        assert probe_a["random"] != probe_b["random"] and probe_a["trio"] != probe_b["trio"]
        assert produce_and_read(a.bootstrap, "only-in-a", b"a") == [b"a"]
        assert produce_and_read(b.bootstrap, "only-in-b", b"b") == [b"b"]
        assert not (b.log_dir / "only-in-a-0").exists() and not (a.log_dir / "only-in-b-0").exists()
    finally:
        a.stop()
        b.stop()
    assert a.unexpected_exits == b.unexpected_exits == []


def spares() -> set[int]:
    """This process's children forked by the warm parent that are not started brokers: spares."""
    parent = warm_starter()._process.pid
    with open(f"/proc/{parent}/cmdline", "rb") as cmdline:
        forked = cmdline.read()
    found = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                ppid = int(stat.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                same = cmdline.read() == forked
        except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
            continue
        if ppid == os.getpid() and same:
            found.add(int(entry))
    return found - {parent} - {broker.process.pid for broker in started_brokers()}


def test_the_next_spare_is_forked_when_a_broker_stops_not_while_one_starts(tmp_path):
    # On two cores the fork (and its page copying) beside a broker's first requests made
    # them ~5 ms slower: the parent forks the next spare once a test is done with its broker.
    finish_stopping()  # earlier tests' brokers, which are forked processes too
    first = MinikafkaBroker(tmp_path / "first").start()
    try:
        assert produce_and_read(first.bootstrap, "t", b"v") == [b"v"]
        assert spares() == set()
    finally:
        first.stop()
    deadline = time.monotonic() + 10
    while not spares() and time.monotonic() < deadline:
        time.sleep(0.001)
    (spare,) = spares()
    second = MinikafkaBroker(tmp_path / "second").start()  # takes that spare
    try:
        assert second.process.pid == spare and spares() == set()
        assert produce_and_read(second.bootstrap, "t", b"w") == [b"w"]
    finally:
        second.stop()


def test_killing_the_warm_parent_leaves_running_brokers_alone_and_later_ones_spawn(tmp_path):
    script = tmp_path / "test_user.py"
    script.write_text(textwrap.dedent("""
        import signal
        from kafka import KafkaProducer
        from minikafka.testing.broker import finish_stopping, started_brokers, warm_starter
        from minikafka.testing.warm import ForkedProcess

        def test_parent_killed(minikafka_broker_factory, caplog):
            first = minikafka_broker_factory()
            assert isinstance(first.process, ForkedProcess)
            warm_starter()._process.send_signal(signal.SIGKILL)
            warm_starter()._process.wait()
            producer = KafkaProducer(bootstrap_servers=first.bootstrap)
            assert producer.send("t", b"v").get(timeout=10).offset == 0
            producer.close()
            second = minikafka_broker_factory()  # spawned now, with one warning that says so
            assert not isinstance(second.process, ForkedProcess) and second.running
            assert first.running
            said = [r.getMessage() for r in caplog.records if "warm start" in r.getMessage()]
            assert len(said) == 1 and said[0].startswith(
                "minikafka: warm start unavailable, spawning brokers instead: the warm parent failed")
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_warm_start_can_be_turned_off(tmp_path, monkeypatch):
    script = tmp_path / "test_user.py"
    script.write_text(textwrap.dedent("""
        import subprocess

        def test_spawned(minikafka_broker):
            assert isinstance(minikafka_broker.process, subprocess.Popen)
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, MINIKAFKA_WARM_START="0"))
    assert result.returncode == 0, result.stdout + result.stderr


def _faults_writing_after_fork(buffer: bytearray, prepare) -> int:
    """Minor page faults a forked child takes writing one byte per page of ``buffer`` (made
    and touched by this process before the fork), after calling ``prepare`` in the child."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            prepare()
            def faults() -> int:
                with open("/proc/self/stat") as stat:
                    return int(stat.read().rsplit(")", 1)[1].split()[7])
            before = faults()
            for position in range(0, len(buffer), 4096):
                buffer[position] = 1
            os.write(write_end, str(faults() - before).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        taken = int(answer.read())
    os.waitpid(pid, 0)
    return taken


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's fork and /proc")
def test_a_spare_takes_its_copy_on_write_faults_before_its_request():
    from minikafka.testing.warm import _copy_written_pages, _private_writable_ranges

    pages = 2048
    buffer = bytearray(b"\0" * (pages * 4096))
    # The measure itself: a plain forked child pays one fault per page it writes.
    assert _faults_writing_after_fork(buffer, lambda: None) > pages // 2
    # A spare has already broken the sharing of its private memory (MADV_POPULATE_WRITE).
    assert _faults_writing_after_fork(
        buffer, lambda: _copy_written_pages(_private_writable_ranges(), threading.Event())) < pages // 10


def test_a_forked_broker_takes_exactly_the_environment_of_its_request(monkeypatch):
    from minikafka.testing.warm import _take_environment

    monkeypatch.setenv("MINIKAFKA_TEST_GONE", "1")
    monkeypatch.setenv("MINIKAFKA_TEST_CHANGED", "before")
    monkeypatch.delenv("MINIKAFKA_TEST_ADDED", raising=False)  # restored (unset) after the test
    wanted = {key: value for key, value in os.environ.items() if key != "MINIKAFKA_TEST_GONE"}
    wanted |= {"MINIKAFKA_TEST_CHANGED": "after", "MINIKAFKA_TEST_ADDED": "new"}
    _take_environment(wanted)
    assert dict(os.environ) == wanted
