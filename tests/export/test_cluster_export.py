"""Exactly-once export from a replicated cluster while leadership moves.

Three minikafka brokers (one ZooKeeper) share one export directory, as brokers sharing a
filesystem would. An RF 3 topic with small segments and a small ``retention.bytes`` is
produced to in phases; after each phase the leader of a partition is killed (``kill -9``) or
stopped (SIGTERM: a controlled shutdown) while its hand-off has chunks claimed in ZooKeeper,
i.e. while it exports, and started again, so the leader of each partition moves twice, once
each way. A thread keeps the rows of every file ever seen at each path. In the end the
exported rows must equal what a kafka-python consumer read, every offset exactly once, no
path may ever have held two different contents, and retention must have deleted exported
segments on every replica (followers included) without losing one record to the export.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from minikafka.testing import MinikafkaCluster

pytestmark = [pytest.mark.spark, pytest.mark.zookeeper, pytest.mark.timeout(600)]

TOPIC = "events"
PARTITIONS = 2
SECOR_NAME = re.compile(r"(?P<generation>\d+)_(?P<partition>\d+)_(?P<first>\d{20})\.parquet")


class FileWatcher(threading.Thread):
    """Every export file ever seen, with the digest of each distinct content it held."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out = out
        self.contents: dict[Path, set[str]] = defaultdict(set)
        self._seen: dict[Path, tuple[int, int]] = {}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.05):
            self.scan()

    def scan(self) -> None:
        for path in self.out.glob(f"{TOPIC}/dt=*/*.parquet"):
            try:
                stat = path.stat()
                if self._seen.get(path) == (stat.st_ino, stat.st_mtime_ns):
                    continue
                rows = pq.read_table(path).to_pylist()
            except (FileNotFoundError, OSError):
                continue
            self._seen[path] = (stat.st_ino, stat.st_mtime_ns)
            self.contents[path].add(hashlib.sha256(repr(rows).encode()).hexdigest())

    def stop(self) -> None:
        self._done.set()
        self.join(10)
        self.scan()


def zk_progress(cluster, partition: int) -> dict | None:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=10)
    try:
        if not zk.exists(f"/minikafka/export/topics/{TOPIC}/partitions/{partition}"):
            return None
        data, _ = zk.get(f"/minikafka/export/topics/{TOPIC}/partitions/{partition}")
        return json.loads(data)
    finally:
        zk.stop()
        zk.close()


def exporter_running(broker) -> bool:
    """Whether the broker process has a child: the exporter its hand-off runs."""
    tasks = Path(f"/proc/{broker.process.pid}/task")
    return any((task / "children").read_text().split() for task in tasks.iterdir()
               if (task / "children").exists())


def wait_for(condition, what: str, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not {what} within {timeout} s")


def full_isr(metadata) -> bool:
    topic = next((t for t in metadata.topics if t.name == TOPIC), None)
    return (topic is not None and len(topic.partitions) == PARTITIONS
            and all(p.leader_id > 0 and len(p.isr_nodes) == 3 for p in topic.partitions))


class Reader:
    """One consumer for the whole test, reading each phase up to the high watermark."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.records: list[tuple] = []
        self.next = {p: 0 for p in range(PARTITIONS)}
        self.consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                                      enable_auto_commit=False, request_timeout_ms=15000)
        self.partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        self.consumer.assign(self.partitions)

    def catch_up(self, ends: dict[int, int], timeout: float = 60) -> None:
        """Read until every partition's records up to ``ends`` (exclusive) are in."""
        deadline = time.monotonic() + timeout
        while any(self.next[p] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"the consumer did not catch up: {self.next} < {ends}"
            for batch in self.consumer.poll(timeout_ms=500).values():
                self.records += [(r.partition, r.offset, r.key, r.value, r.timestamp) for r in batch]
                for r in batch:
                    self.next[r.partition] = max(self.next[r.partition], r.offset + 1)

    def close(self) -> None:
        self.consumer.close()


def produce(cluster, phase: int, per_partition: int = 40) -> dict[int, int]:
    """Produce with acks=all; returns each partition's offset after its last acknowledged record."""
    # Pinned to 0.10: the topics are magic 1 (log.message.format.version 0.10.2), which refuses
    # the idempotent batches kafka-python 3 sends to a newer broker.
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=20, api_version=(0, 10),
                             retry_backoff_ms=200, max_in_flight_requests_per_connection=1,
                             batch_size=300)  # a set larger than segment.bytes is refused
    try:
        futures = [producer.send(TOPIC, key=b"k%d-%d" % (phase, i), value=b"v%d-%04d-" % (phase, i) + b"x" * 60,
                                 partition=p)
                   for i in range(per_partition) for p in range(PARTITIONS)]
        producer.flush(60)
        ends = {}
        for future in futures:
            metadata = future.get(timeout=60)
            ends[metadata.partition] = max(ends.get(metadata.partition, 0), metadata.offset + 1)
        return ends
    finally:
        producer.close(timeout=5)


def exported(out: Path) -> list[tuple]:
    rows = []
    for path in sorted(out.glob(f"{TOPIC}/dt=*/*.parquet")):
        table = pq.read_table(path).to_pylist()
        name = SECOR_NAME.fullmatch(path.name)
        assert name is not None, path
        assert int(name["generation"]) == 1 and int(name["partition"]) == table[0]["partition"]
        assert int(name["first"]) == min(r["offset"] for r in table), path
        rows += [(r["partition"], r["offset"], r["key"], r["value"], round(r["timestamp"].timestamp() * 1000))
                 for r in table]
    return rows


def active_base(cluster, partition: int) -> int:
    """The base offset of the leader's active segment: every offset below it is in a closed segment."""
    leader = cluster.broker(cluster.leader(TOPIC, partition))
    return max(int(p.stem) for p in (leader.log_dir / f"{TOPIC}-{partition}").glob("*.log"))


def test_leader_moves_during_export_keep_it_exactly_once(tmp_path, zookeeper):
    out = tmp_path / "out"
    overrides = {"minikafka.export.dir": str(out), "minikafka.export.master": "local[1]",
                 "log.message.format.version": "0.10.2",
                 "log.retention.check.interval.ms": "300", "replica.lag.time.max.ms": "3000"}
    with MinikafkaCluster(tmp_path / "cluster", 3, overrides, zookeeper=zookeeper.connect_string) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, topic_configs={
                "segment.bytes": "1000", "retention.bytes": "8000", "file.delete.delay.ms": "100"})])
        finally:
            admin.close()
        cluster.wait_until(full_isr, "topic led with a full ISR")
        watcher = FileWatcher(out)
        watcher.start()
        reader = Reader(cluster)
        moves = [("kill", 0), ("stop", 1), ("stop", 0), ("kill", 1)]
        moved = defaultdict(list)
        try:
            for phase, (how, partition) in enumerate(moves):
                reader.catch_up(produce(cluster, phase))
                leader = cluster.leader(TOPIC, partition)
                broker = cluster.broker(leader)
                # Chunks of the partition are claimed and the leader's exporter is running.
                wait_for(lambda: (zk_progress(cluster, partition) or {}).get("pending") and exporter_running(broker),
                         f"partition {partition} being exported by broker {leader}", 60)
                broker.kill() if how == "kill" else broker.stop()
                new_leader = wait_for(lambda: (lambda l: l if l not in (-1, leader) else None)(
                    cluster.leader(TOPIC, partition)), f"a new leader of partition {partition}", 60)
                moved[partition].append((how, leader, new_leader))
                broker.start()
                cluster.wait_until(full_isr, "the restarted broker back in the ISR", 60)
            reader.catch_up(produce(cluster, len(moves)))
            for partition in range(PARTITIONS):
                wait_for(lambda: (lambda p: p is not None and not p["pending"]
                                  and p["next_offset"] == active_base(cluster, partition))(
                    zk_progress(cluster, partition)), f"partition {partition} exported", 300)
            ends = {p: active_base(cluster, p) for p in range(PARTITIONS)}
        finally:
            watcher.stop()
            reader.close()

        assert {p: [how for how, *_ in m] for p, m in moved.items()} == {0: ["kill", "stop"], 1: ["stop", "kill"]}
        rows = exported(out)
        expected = sorted(r for r in reader.records if r[1] < ends[r[0]])
        assert len(rows) == len(set((p, o) for p, o, *_ in rows)), "an offset was exported twice"
        assert sorted(rows) == expected
        assert len(expected) > 0.7 * len(reader.records)  # most of it is in closed segments
        rewritten = {path: digests for path, digests in watcher.contents.items() if len(digests) > 1}
        assert not rewritten, f"files written twice with different contents: {sorted(rewritten)}"
        # Retention ran on every replica, followers too, and only over exported segments.
        for broker in cluster.brokers:
            for partition in range(PARTITIONS):
                bases = sorted(int(p.stem) for p in (broker.log_dir / f"{TOPIC}-{partition}").glob("*.log"))
                assert 0 < bases[0] <= ends[partition], (broker.log_dir, partition, bases)
