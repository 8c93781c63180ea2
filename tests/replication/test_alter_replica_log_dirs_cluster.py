"""AlterReplicaLogDirs on a cluster member (3 brokers, a real ZooKeeper): broker 1, given a
second log dir, moves the replica it leads and the one it follows while a producer writes to
both; every acknowledged value is read back, and broker 1's moved replicas hold the records
and leader epochs of the others' afterwards."""

from __future__ import annotations

import shutil
import threading
import time
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


def test_a_member_moves_the_replica_it_leads_and_the_one_it_follows(tmp_path, minikafka_zookeeper):
    cluster = MinikafkaCluster(tmp_path / "cluster", 3, {"log.segment.bytes": "65536"},
                               zookeeper=minikafka_zookeeper.connect_string)
    try:
        cluster.start()
        member = cluster.broker(1)
        first = member.log_dir
        second = Path(f"{first}-second")
        cluster.stop(1)
        member.log_dir = Path(f"{first},{second}")  # log.dirs of two (the harness passes --log-dir)
        cluster.restart(1)
        cluster.create_topic("moved", partitions=2, replication_factor=3)
        cluster.wait_for_full_isr(["moved"])
        cluster.move_leader("moved", 0, 1)
        cluster.move_leader("moved", 1, 2)
        acknowledged = {0: [], 1: []}
        stop = threading.Event()

        def produce():
            producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=2)
            seq = 0
            while not stop.is_set():
                for partition in (0, 1):
                    value = b"%d-%08d" % (partition, seq)
                    producer.send("moved", value, partition=partition).add_callback(
                        lambda md, value=value, p=partition: acknowledged[p].append((md.offset, value)))
                seq += 1
                if seq % 100 == 0:
                    producer.flush()
            producer.flush()
            producer.close()

        writer = threading.Thread(target=produce)
        writer.start()
        try:
            time.sleep(2)
            admin = KafkaAdminClient(bootstrap_servers=member.bootstrap)
            replicas = [TopicPartitionReplica("moved", p, 1) for p in (0, 1)]
            assert admin.alter_replica_log_dirs({r: str(second) for r in replicas}) == dict.fromkeys(replicas, NoError)

            def moved() -> bool:
                (described,) = [d for d in admin.describe_log_dirs() if d["broker"] == 1]
                where = {(p["partition_index"], p["is_future_key"]): result["log_dir"]
                         for result in described["log_dirs"] for t in result["topics"] if t["name"] == "moved"
                         for p in t["partitions"]}
                return where == {(0, False): str(second), (1, False): str(second)}

            _until(moved, "moved")
            time.sleep(1)
        finally:
            stop.set()
            writer.join()
        admin.close()
        assert cluster.leader("moved", 0) == 1 and cluster.leader("moved", 1) == 2
        cluster.wait_for_full_isr(["moved"])
        hws = {p: cluster.high_watermark("moved", p) for p in (0, 1)}
        assert all(hws[p] >= len(acknowledged[p]) > 0 for p in (0, 1))
        for broker_id in (1, 2, 3):
            cluster.stop(broker_id)
        for partition in (0, 1):
            assert not (first / f"moved-{partition}").exists()
            theirs = _replica(cluster.broker(2).log_dir / f"moved-{partition}", tmp_path, "moved", partition)
            also = _replica(cluster.broker(3).log_dir / f"moved-{partition}", tmp_path, "moved", partition)
            ours = _replica(second / f"moved-{partition}", tmp_path, "moved", partition)
            below = lambda replica: ([r for r in replica[0] if r[0] < hws[partition]],  # noqa: E731
                                     [e for e in replica[1] if e[1] < hws[partition]])
            assert below(ours) == below(theirs) == below(also)
            assert set(acknowledged[partition]) <= set(ours[0][:hws[partition]])
    finally:
        close_all([cluster])
