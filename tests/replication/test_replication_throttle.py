"""Replication throttles (KIP-73) on a 3-broker cluster with a real ZooKeeper, set and cleared
as kafka-reassign-partitions.sh sets and clears them (--throttle, then --verify): the dynamic
broker rates through AlterConfigs, the topic's throttled-replica lists, deletion through
IncrementalAlterConfigs.

Three partitions of 1.2 MB each, on brokers 1 and 2 (leader 1), all moved to add broker 3:
partition 0 listed on the leader's side (broker 1 serves it throttled), partition 1 on the
follower's (broker 3 fetches it throttled), partition 2 not at all. While the throttles hold,
partition 2 reaches broker 3 whole, while what broker 3 holds of 0 and 1 stays within what the
rate allows for the time passed, and the in-sync follower 2 stays in sync (an in-sync replica is
never throttled). Once the throttles are deleted the moves complete and the replicas agree."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.quota import SAMPLES, WINDOW_S
from minikafka.testing import kafka_request

pytestmark = [pytest.mark.zookeeper, pytest.mark.timeout(240)]

TOPIC = "throttled"
RATE = 20_000  # bytes per second
FETCH_MAX = 65_536  # replica.fetch.max.bytes: what one answer may carry of a partition past the rate
BROKER, TOPIC_RESOURCE = 4, 2  # ConfigResource types


def _alter(cluster, resource_type: int, name: str, changes: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs: SET each value, DELETE each None (what --verify sends)."""
    at = cluster.broker(int(name) if resource_type == BROKER else cluster.controller()).bootstrap
    answer = kafka_request(at, ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, {"validate_only": False, "resources": [{
        "resource_type": resource_type, "resource_name": name,
        "configs": [{"name": k, "config_operation": 1 if v is None else 0, "value": v} for k, v in changes.items()]}]})
    (result,) = answer.responses
    assert result.error_code == ErrorCode.NONE, (name, result.error_message)


def _bytes_on(cluster, broker_id: int, partition: int) -> int:
    directory = cluster.broker(broker_id).log_dir / f"{TOPIC}-{partition}"
    return sum(p.stat().st_size for p in directory.glob("*.log")) if directory.exists() else 0


def _isr(cluster, partition: int) -> list[int]:
    metadata = cluster.metadata([TOPIC], via=cluster.broker(cluster.controller()))
    (topic,) = metadata.topics
    return sorted(next(p.isr_nodes for p in topic.partitions if p.partition_index == partition))


def test_throttled_replicas_copy_within_the_rate_until_the_throttle_is_deleted(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(3, **{"replica.fetch.max.bytes": str(FETCH_MAX),
                                              "replica.lag.time.max.ms": "3000"})
    answer = kafka_request(cluster.broker(cluster.controller()).bootstrap, ApiKey.CREATE_TOPICS, 0, {
        "topics": [{"name": TOPIC, "num_partitions": -1, "replication_factor": -1,
                    "assignments": [{"partition_index": p, "broker_ids": [1, 2]} for p in range(3)], "configs": []}],
        "timeout_ms": 30000})
    assert answer.topics[0].error_code == ErrorCode.NONE
    cluster.wait_for_full_isr([TOPIC])
    cluster.wait_for_leaders(TOPIC, 3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5)
    for i in range(1200):
        for partition in range(3):
            producer.send(TOPIC, b"%d-%06d" % (partition, i) + b"." * 990, partition=partition)
    producer.flush()
    size = _bytes_on(cluster, 1, 0)
    assert size > 1_000_000

    for broker_id in (1, 2, 3):
        _alter(cluster, BROKER, str(broker_id), {"leader.replication.throttled.rate": str(RATE),
                                                 "follower.replication.throttled.rate": str(RATE)})
    _alter(cluster, TOPIC_RESOURCE, TOPIC, {"leader.replication.throttled.replicas": "0:1",
                                            "follower.replication.throttled.replicas": "1:3"})
    described = kafka_request(cluster.broker(1).bootstrap, ApiKey.DESCRIBE_CONFIGS, 1, {
        "resources": [{"resource_type": BROKER, "resource_name": "1",
                       "configuration_keys": ["leader.replication.throttled.rate"]}], "include_synonyms": False})
    (entry,) = described.results[0].configs
    assert (entry.value, entry.config_source, entry.read_only) == (str(RATE), 2, False)  # DYNAMIC_BROKER_CONFIG

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        moved = {TopicPartition(TOPIC, p): [1, 2, 3] for p in range(3)}
        assert admin.alter_partition_reassignments(moved) == dict.fromkeys(moved)
    finally:
        admin.close()
    began = time.monotonic()
    cluster.wait_until(lambda m: 3 in next(p.isr_nodes for t in m.topics if t.name == TOPIC
                                           for p in t.partitions if p.partition_index == 2),
                       "the unthrottled partition in sync on broker 3", 60, via=cluster.broker(cluster.controller()))
    # Written while throttled: the in-sync follower 2 is not held back, so acks=all goes on
    # and it stays in the ISR (its lag limit, 3 s, is far shorter than the throttled copy).
    for i in range(50):
        producer.send(TOPIC, b"during-%d" % i, partition=0).get(timeout=30)
    time.sleep(4)
    copied = {p: _bytes_on(cluster, 3, p) for p in (0, 1)}
    elapsed = time.monotonic() - began
    allowed = RATE * (elapsed + SAMPLES * WINDOW_S) + 2 * FETCH_MAX
    assert all(copied[p] <= allowed for p in (0, 1)), (copied, allowed, size)
    assert _isr(cluster, 0) == [1, 2] and _isr(cluster, 1) == [1, 2]

    # --verify's clean-up: every throttle deleted, then the moves complete.
    for broker_id in (1, 2, 3):
        _alter(cluster, BROKER, str(broker_id), {"leader.replication.throttled.rate": None,
                                                 "follower.replication.throttled.rate": None,
                                                 "replica.alter.log.dirs.io.max.bytes.per.second": None})
    _alter(cluster, TOPIC_RESOURCE, TOPIC, {"leader.replication.throttled.replicas": None,
                                            "follower.replication.throttled.replicas": None})
    cluster.wait_for_full_isr([TOPIC], timeout=120)
    producer.close()
    hws = {(TOPIC, p): cluster.high_watermark(TOPIC, p) for p in range(3)}
    for partition, replicas in cluster.replicas_below_high_watermark(hws).items():
        assert len(set(replicas.values())) == 1 and replicas[3], partition
