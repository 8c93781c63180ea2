"""Shared pytest setup for minikafka's own tests.

The broker fixtures (``minikafka_broker``, ``minikafka_broker_factory``) come from
``minikafka.broker.pytest_plugin``, which pytest loads through minikafka's ``pytest11`` entry
point: the suite runs against the installed package (``bash tests/run.sh`` runs
``pip install -e .`` first), since the layer folders are importable only as ``minikafka.*``.

It also provides ``small_filesystem``: a real tmpfs of a few MiB for full-disk tests.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from minikafka.replication.zk_server import ZooKeeperServer



def pytest_collection_modifyitems(items):
    # `-m "not zookeeper"` leaves out every test that needs a ZooKeeper (and so Java).
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if {"zookeeper", "private_zookeeper", "minikafka_zookeeper"} & set(fixtures):
            item.add_marker(pytest.mark.zookeeper)


@pytest.fixture(autouse=True)
def _children_take_ctrl_c():
    """SIGINT neither ignored nor blocked in the test process, so that the children it starts
    take a Ctrl-C: both are inherited through exec (a handler is not), and Python installs no
    KeyboardInterrupt handler where SIGINT starts ignored. A suite started in the background by
    a shell without job control (``nohup bash .ci/run &`` in a script) starts with it ignored
    (xdist's workers install Python's handler again, a plain ``pytest`` does not); a mask left
    by code that held SIGINT back would do the same. On three clean clones of 2026-11-29 the
    tests that press Ctrl-C on a replay or ``minikafka users add`` saw their child run on to the
    end (exit 0, or 1 at the end of its input) instead of stopping with 130, as a child that
    starts with SIGINT ignored does; the replay test now has its child say how it started."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    yield


@pytest.fixture(scope="module", params=["native", "python"])
def records_implementation(request):
    """Runs a module's tests once with ``protocol.records``' C loops and once with its
    pure-Python ones (protocol and storage suites take it automatically); without the C
    accelerator built the native run is skipped, unless ``MINIKAFKA_REQUIRE_NATIVE=1``
    (tests/run.sh sets it where a compiler is present) makes that a failure."""
    from minikafka.protocol import records

    native = request.param == "native"
    if native and records._native is None:
        if os.environ.get("MINIKAFKA_REQUIRE_NATIVE") == "1":
            pytest.fail("minikafka.protocol._records is not built")
        pytest.skip("the C accelerator minikafka.protocol._records is not built")
    before = records.native_in_use()
    records.use_native(native)
    yield request.param
    records.use_native(before)


@pytest.fixture(scope="session")
def zookeeper(minikafka_zookeeper) -> ZooKeeperServer:
    """One real ZooKeeper server (Debian's 3.8, standalone, free port) for the whole test
    session, the plugin's (the cluster fixtures use it too). Tests must not share nodes
    through it: take a connect string from ``zk_chroot``. Tests that stop or pause a server
    start a private ``ZooKeeperServer`` instead."""
    return minikafka_zookeeper


@pytest.fixture
def zk_chroot(zookeeper) -> str:
    """A connect string with a chroot of this test's own ("127.0.0.1:PORT/t<uuid>"); clients
    create the chroot on connect, so each test starts from an empty tree."""
    return f"{zookeeper.connect_string}/t{uuid.uuid4().hex}"


class SmallFilesystem:
    """A real tmpfs of a few MiB mounted at ``path``, to run out of space for real."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._filler = path / "filler"

    def fill(self, leave: int = 0) -> None:
        """Fill the filesystem with a filler file, then free ``leave`` bytes of it again
        (tmpfs counts whole pages: pass multiples of the page size)."""
        # Unbuffered: a buffered file keeps the tail of a short write and fails again on close.
        with open(self._filler, "ab", buffering=0) as file:
            chunk = b"\0" * 65536
            while True:
                try:
                    if not file.write(chunk):
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
            page = os.sysconf("SC_PAGE_SIZE")
            file.truncate(file.tell() // page * page)
        os.truncate(self._filler, max(os.path.getsize(self._filler) - leave, 0))

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)


@pytest.fixture
def small_filesystem(tmp_path):
    """``small_filesystem(size="2m", at=None, inodes=None)`` -> a SmallFilesystem on a fresh tmpfs
    (mounted at ``at``, default a new directory under tmp_path; ``inodes`` bounds the number of
    files and directories it holds); unmounted after
    the test. Mounting needs root (CI runs as root); elsewhere the test is skipped."""
    mounted: list[Path] = []

    def mount(size: str = "2m", at: Path | None = None, inodes: int | None = None) -> SmallFilesystem:
        where = at if at is not None else tmp_path / f"small-fs-{len(mounted)}"
        where.mkdir(parents=True, exist_ok=True)
        options = f"size={size}" + (f",nr_inodes={inodes}" if inodes is not None else "")
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                                capture_output=True, text=True)
        if result.returncode:
            pytest.skip(f"cannot mount a {size} tmpfs (needs root): {result.stderr.strip()}")
        mounted.append(where)
        return SmallFilesystem(where)

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _read_partition_0(bootstrap: str, topic: str, timeout: float = 30.0, client: str = "kafka-python"):
    """Every record of partition 0 from offset 0 to the log end, as one consumer from scratch sees
    it (no group): kafka-python's records, or for ``client`` "confluent-kafka" or "aiokafka"
    that client's, each given as an object with ``offset``, ``key`` and ``value``."""
    if client == "confluent-kafka":
        return _confluent_read_partition_0(bootstrap, topic, timeout)
    if client == "aiokafka":
        import asyncio

        return asyncio.run(_aiokafka_read_partition_0(bootstrap, topic, timeout))
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = consumer.end_offsets([tp])[tp]
        records = []
        deadline = time.monotonic() + timeout
        while consumer.position(tp) < end and time.monotonic() < deadline:
            records.extend(consumer.poll(timeout_ms=500).get(tp, []))
        assert consumer.position(tp) >= end, "the consumer did not reach the log end"
        return records
    finally:
        consumer.close()


def _confluent_read_partition_0(bootstrap: str, topic: str, timeout: float):
    import time
    from types import SimpleNamespace

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-all", "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        records = []
        deadline = time.monotonic() + timeout
        while (not records or records[-1].offset < end - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                records.append(SimpleNamespace(offset=message.offset(), key=message.key(), value=message.value()))
        assert records and records[-1].offset == end - 1, "the consumer did not reach the log end"
        return records
    finally:
        consumer.close()


async def _aiokafka_read_partition_0(bootstrap: str, topic: str, timeout: float):
    import time

    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = (await consumer.end_offsets([tp]))[tp]
        records = []
        deadline = time.monotonic() + timeout
        while await consumer.position(tp) < end and time.monotonic() < deadline:
            records.extend((await consumer.getmany(tp, timeout_ms=500)).get(tp, []))
        assert await consumer.position(tp) >= end, "the consumer did not reach the log end"
        return records
    finally:
        await consumer.stop()


@pytest.fixture
def read_all():
    """``read_all(bootstrap, topic, timeout=30, client="kafka-python")``: partition 0 read whole
    from offset 0 by ``client`` (also "confluent-kafka" or "aiokafka")."""
    return _read_partition_0
