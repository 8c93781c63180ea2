"""AlterReplicaLogDirs on a cluster member (3 brokers, a real ZooKeeper): broker 1, given a
second log dir, moves the replica it leads and the one it follows while a producer writes to
both; every acknowledged value is read back, and broker 1's moved replicas hold the records
and leader epochs of the others' afterwards. The same member killed (kill -9) in the middle
of both moves: the leadership fails over, the member resumes its moves when restarted, and
nothing acknowledged is lost."""

from __future__ import annotations

import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica

from minikafka.storage import FakeClock, LogConfig
from minikafka.storage.log import Log
from minikafka.testing import MinikafkaCluster
from minikafka.testing.broker import close_all

pytestmark = [pytest.mark.zookeeper, pytest.mark.timeout(300)]


def _until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout} s")
        time.sleep(0.1)


def _replica(directory: Path, tmp: Path, topic: str, partition: int):
    """(offset, value) of every record and the leader epochs of a stopped broker's replica,
    read from a copy of its directory."""
    copy = tmp / f"copy-{len(list(tmp.glob('copy-*')))}"
    shutil.copytree(directory, copy)
    log = Log(copy, topic, partition, LogConfig(), FakeClock(0))
    from minikafka.protocol.records import iter_records
    records, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        batch = [r for r in iter_records(log.read(offset, 1 << 20).read_bytes()) if r.offset >= offset]
        records += [(r.offset, r.value) for r in batch]
        offset = batch[-1].offset + 1
    epochs = log.leader_epoch_cache.entries
    log.close()
    return records, epochs


def _where(admin: KafkaAdminClient, broker_id: int, topic: str) -> dict[tuple[int, bool], str]:
    """(partition, is future) -> the log dir broker ``broker_id`` lists it in (DescribeLogDirs)."""
    (described,) = [d for d in admin.describe_log_dirs() if d["broker"] == broker_id]
    return {(p["partition_index"], p["is_future_key"]): result["log_dir"]
            for result in described["log_dirs"] for t in result["topics"] if t["name"] == topic
            for p in t["partitions"]}


@contextmanager
def _two_dir_member(tmp_path, zookeeper, overrides: dict[str, str]):
    """A 3-broker cluster whose broker 1 has a second log dir; yields (cluster, first, second)."""
    cluster = MinikafkaCluster(tmp_path / "cluster", 3, overrides, zookeeper=zookeeper.connect_string)
    try:
        cluster.start()
        member = cluster.broker(1)
        first = member.log_dir
        second = Path(f"{first}-second")
        cluster.stop(1)
        member.log_dirs = [first, second]
        cluster.restart(1)
        yield cluster, first, second
    finally:
        close_all([cluster])


@contextmanager
def _producing(cluster: MinikafkaCluster, topic: str, acknowledged: dict[int, list], padding: bytes = b""):
    """An acks=all producer writing to both partitions of ``topic`` until the block ends;
    ``acknowledged[p]`` collects (offset, value) of each acknowledged write."""
    stop = threading.Event()

    def produce():
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=2, retries=10,
                                 retry_backoff_ms=200)
        seq = 0
        while not stop.is_set():
            for partition in (0, 1):
                value = b"%d-%08d" % (partition, seq) + padding
                producer.send(topic, value, partition=partition).add_callback(
                    lambda md, value=value, p=partition: acknowledged[p].append((md.offset, value)))
            seq += 1
            if seq % 100 == 0:
                producer.flush()
        producer.flush()
        producer.close()

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join()


def _moves(admin: KafkaAdminClient, topic: str, dirs: tuple[Path, Path]) -> dict[int, Path]:
    """Partition -> the log dir of broker 1 it is not in: a new partition goes to the dir
    holding fewer, so the two are usually in different dirs and each must move."""
    where = _where(admin, 1, topic)
    return {p: next(d for d in dirs if str(d) != where[(p, False)]) for p in (0, 1)}


def _alter(admin: KafkaAdminClient, topic: str, moves: dict[int, Path]) -> None:
    replicas = {TopicPartitionReplica(topic, p, 1): str(d) for p, d in moves.items()}
    assert admin.alter_replica_log_dirs(replicas) == dict.fromkeys(replicas, NoError)


def _assert_replicas_agree(cluster: MinikafkaCluster, tmp_path: Path, topic: str, dirs: tuple[Path, Path],
                           moves: dict[int, Path], acknowledged: dict[int, list]) -> None:
    """Once the ISR is full: every broker stopped, broker 1's replicas (each in the dir it
    moved to, none left in the other, no future) hold the records and leader epochs of the
    others below the high watermark, and every acknowledged write is there at its offset."""
    cluster.wait_for_full_isr([topic])
    hws = {p: cluster.high_watermark(topic, p) for p in (0, 1)}
    assert all(hws[p] >= len(acknowledged[p]) > 0 for p in (0, 1))
    for broker_id in (1, 2, 3):
        cluster.stop(broker_id)
    assert not [d for directory in dirs for d in directory.iterdir() if d.name.endswith("-future")]
    for partition in (0, 1):
        (left,) = set(dirs) - {moves[partition]}
        assert not (left / f"{topic}-{partition}").exists()
        theirs = _replica(cluster.broker(2).log_dir / f"{topic}-{partition}", tmp_path, topic, partition)
        also = _replica(cluster.broker(3).log_dir / f"{topic}-{partition}", tmp_path, topic, partition)
        ours = _replica(moves[partition] / f"{topic}-{partition}", tmp_path, topic, partition)
        below = lambda replica: ([r for r in replica[0] if r[0] < hws[partition]],  # noqa: E731
                                 [e for e in replica[1] if e[1] < hws[partition]])
        assert below(ours) == below(theirs) == below(also)
        assert set(acknowledged[partition]) <= set(ours[0][:hws[partition]])


def test_a_member_moves_the_replica_it_leads_and_the_one_it_follows(tmp_path, minikafka_zookeeper):
    with _two_dir_member(tmp_path, minikafka_zookeeper, {"log.segment.bytes": "65536"}) as (cluster, first, second):
        cluster.create_topic("moved", partitions=2, replication_factor=3)
        cluster.move_leader("moved", 0, 1)
        cluster.move_leader("moved", 1, 2)
        acknowledged = {0: [], 1: []}
        with _producing(cluster, "moved", acknowledged):
            time.sleep(2)
            admin = KafkaAdminClient(bootstrap_servers=cluster.broker(1).bootstrap)
            moves = _moves(admin, "moved", (first, second))
            _alter(admin, "moved", moves)
            _until(lambda: _where(admin, 1, "moved") == {(p, False): str(d) for p, d in moves.items()}, "moved")
            time.sleep(1)
        admin.close()
        assert cluster.leader("moved", 0) == 1 and cluster.leader("moved", 1) == 2
        _assert_replicas_agree(cluster, tmp_path, "moved", (first, second), moves, acknowledged)


def test_a_member_killed_in_the_middle_of_its_moves_resumes_them_and_loses_nothing(tmp_path, minikafka_zookeeper):
    # The copy is throttled to 256 KiB/s, so moving ~1.5 MB of each partition lasts ~12 s:
    # broker 1 is killed a second into it, leading one partition and following the other.
    overrides = {"log.segment.bytes": "262144", "replica.alter.log.dirs.io.max.bytes.per.second": "262144"}
    with _two_dir_member(tmp_path, minikafka_zookeeper, overrides) as (cluster, first, second):
        cluster.create_topic("killed", partitions=2, replication_factor=3)
        cluster.move_leader("killed", 0, 1)
        cluster.move_leader("killed", 1, 2)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        acknowledged = {0: [], 1: []}
        for partition in (0, 1):
            for i in range(3000):
                value = b"%d-p%06d" % (partition, i) + b"." * 500
                producer.send("killed", value, partition=partition).add_callback(
                    lambda md, value=value, p=partition: acknowledged[p].append((md.offset, value)))
        producer.flush()
        producer.close()
        assert len(acknowledged[0]) == len(acknowledged[1]) == 3000
        admin = KafkaAdminClient(bootstrap_servers=cluster.broker(1).bootstrap)
        moves = _moves(admin, "killed", (first, second))
        homes = {p: next(d for d in (first, second) if d != moves[p]) for p in (0, 1)}
        _alter(admin, "killed", moves)
        both = {**{(p, False): str(d) for p, d in homes.items()}, **{(p, True): str(d) for p, d in moves.items()}}
        _until(lambda: _where(admin, 1, "killed") == both, "both futures listed")
        admin.close()
        with _producing(cluster, "killed", acknowledged, padding=b"." * 200):
            time.sleep(1)  # some of each copied, and written meanwhile
            cluster.kill(1)
            futures = sorted(d.name.split(".")[0] for directory in (first, second) for d in directory.iterdir()
                             if d.name.endswith("-future"))
            assert futures == ["killed-0", "killed-1"]
            assert cluster.leader("killed", 0) in (2, 3)
            time.sleep(1)  # written while broker 1 is away
            cluster.restart(1)
            admin = KafkaAdminClient(bootstrap_servers=cluster.broker(1).bootstrap)
            # Resumed, as Kafka resumes them: each replica served from the first dir meanwhile
            assert _where(admin, 1, "killed") == both
            time.sleep(1)  # written to the restarted member too
        # The writes stop here: at full speed they outrun the copy's 256 KiB/s, and a move
        # completes only once its future has caught up (as Kafka's, throttled alike).
        _until(lambda: _where(admin, 1, "killed") == {(p, False): str(d) for p, d in moves.items()},
               "moved after the restart", timeout=120)
        admin.close()
        _assert_replicas_agree(cluster, tmp_path, "killed", (first, second), moves, acknowledged)
