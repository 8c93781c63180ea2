"""Log compaction on a 3-broker cluster: every replica cleans its own log (as Kafka), and a
new leader after a kill serves the same latest value of every key."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer

from minikafka.storage.checkpoint import OffsetCheckpointFile
from minikafka.storage.cleaner import CLEANER_OFFSET_CHECKPOINT

pytestmark = [pytest.mark.zookeeper, pytest.mark.timeout(300)]


def cleaned_to(broker, topic: str) -> int:
    path = broker.log_dir / CLEANER_OFFSET_CHECKPOINT
    return OffsetCheckpointFile(path).read().get((topic, 0), 0) if path.exists() else 0


def test_every_replica_compacts_and_a_new_leader_serves_the_same_latest_values(minikafka_cluster_factory, read_all):
    cluster = minikafka_cluster_factory(3, **{"log.cleaner.backoff.ms": "100"})
    cluster.create_topic("changelog", 1, 3, cleanup_policy="compact", segment_bytes="2048",
                         min_cleanable_dirty_ratio="0.01", segment_ms="100")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=5, batch_size=512)
    written = {}
    try:
        futures = [(b"key-%d" % (i % 12), b"value-%d" % i) for i in range(400)]
        sent = [(key, value, producer.send("changelog", key=key, value=value, partition=0)) for key, value in futures]
        for key, value, future in sent:
            written[future.get(30).offset] = (key, value)
        time.sleep(0.2)  # past segment.ms: the next append rolls every replica's active segment
        producer.send("changelog", key=b"end", value=b"roll", partition=0).get(30)
    finally:
        producer.close(timeout=5)
    latest = {}
    for offset in sorted(written):
        latest[written[offset][0]] = offset

    deadline = time.monotonic() + 120
    while not all(cleaned_to(cluster.broker(b), "changelog") >= 400 for b in cluster.ids):
        assert time.monotonic() < deadline, {b: cleaned_to(cluster.broker(b), "changelog") for b in cluster.ids}
        time.sleep(0.3)

    def check(view):
        assert all(written.get(r.offset, (b"end", b"roll")) == (r.key, r.value) for r in view)
        assert {r.key: r.offset for r in view if r.key != b"end"} == latest
        assert len(view) < 100  # of 401 records: this replica compacted its log

    check(read_all(cluster.bootstrap, "changelog"))
    first = cluster.leader("changelog", 0)
    cluster.kill(first)
    second = cluster.leader("changelog", 0)
    assert second not in (first, -1)
    check(read_all(cluster.bootstrap, "changelog"))
    cluster.kill(second)
    assert cluster.leader("changelog", 0) not in (first, second, -1)
    check(read_all(cluster.bootstrap, "changelog"))
