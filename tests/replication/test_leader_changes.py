"""Acknowledged writes survive leader changes that keep or move the leader (issue 23): a new
leader epoch with the same leader, a controlled shutdown, and a leader that changed its own ISR
before it died. Real brokers, a real ZooKeeper, real clients.
"""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer

from minikafka.broker.pytest_plugin import kafka_request
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.records import build_message_set

from .test_cluster_faults import produce, read_all

pytestmark = pytest.mark.timeout(180)


def raw_produce(bootstrap: str, topic: str, value: bytes, *, acks: int, timeout_ms: int = 10000) -> ErrorCode:
    """One Produce on a connection of its own to exactly this broker (no metadata, no retry)."""
    answer = kafka_request(bootstrap, ApiKey.PRODUCE, 2, {
        "acks": acks, "timeout_ms": timeout_ms, "topic_data": [{"name": topic, "partition_data": [
            {"index": 0, "records": build_message_set([(None, value, int(time.time() * 1000))])}]}]},
        timeout=timeout_ms / 1000 + 10)
    return ErrorCode(answer.responses[0].partition_responses[0].error_code)


def partition_in(metadata, topic: str):
    return next(t for t in metadata.topics if t.name == topic).partitions[0]


def wait_for(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not {what} within {timeout} s")
        time.sleep(0.05)


def test_a_new_epoch_of_the_same_leader_does_not_truncate_its_follower(minikafka_cluster_factory):
    """A follower that fetched records written under the new epoch before its own LeaderAndIsr
    came keeps them (Kafka's makeFollower: same leader, no truncation), so when it is elected
    next it still holds every acknowledged write."""
    cluster = minikafka_cluster_factory(**{"min.insync.replicas": "2"})
    cluster.create_topic("b")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=5, request_timeout_ms=10000)
    try:
        acked = [producer.send("b", f"v{i}".encode(), partition=0).get(timeout=30) for i in range(6)]
        leader = cluster.leader("b", 0)
        controller = cluster.controller()
        # A new controller would not take the dead follower out of the ISR (Kafka's neither).
        dying = next(b for b in cluster.ids if b not in (leader, controller))
        survivor = next(b for b in cluster.ids if b not in (leader, dying))
        # The ISR shrink (a new epoch, the same leader) reaches the survivor only after it has
        # fetched what the leader took under that epoch.
        cluster.broker(survivor).delay("LeaderAndIsr", 4000)
        cluster.kill(dying)
        acked += [producer.send("b", f"v{i}".encode(), partition=0).get(timeout=30) for i in range(6, 11)]
    finally:
        producer.close(timeout=5)
    # The survivor's next two fetches are held: the second comes once it has acted on its
    # LeaderAndIsr (truncated, before the fix), and the leader dies while it waits.
    cluster.broker(leader).delay("Fetch", 6000, count=2)
    wait_for(lambda: sum(f["api"] == "Fetch" for f in cluster.broker(leader).faults()["served"]) == 2,
             "the survivor's second held fetch")
    cluster.kill(leader)
    assert cluster.leader("b", 0) == survivor
    values = read_all(cluster.broker(survivor).bootstrap, "b")
    assert values[:6] == [f"v{i}".encode() for i in range(6)]
    assert {f"v{i}".encode() for i in range(11)} <= set(values)
    assert all(values[m.offset] == f"v{i}".encode() for i, m in enumerate(acked) if m.offset < len(values))
    assert "truncating" not in cluster.broker(survivor).stderr_since_start()


def test_a_new_epoch_of_the_same_leader_answers_a_pending_acks_all_produce(minikafka_cluster_factory):
    """The produce waits for a frozen follower; the controller takes it out of the ISR with a
    new epoch and the same leader; the write, now replicated to the whole ISR, is answered NONE
    (Kafka's delayed produce fails only when the broker no longer leads), not
    NOT_LEADER_FOR_PARTITION that makes clients write it again."""
    cluster = minikafka_cluster_factory(**{"replica.lag.time.max.ms": "60000"})
    cluster.create_topic("w")
    leader = cluster.leader("w", 0)
    controller = cluster.controller()
    frozen = next(b for b in cluster.ids if b not in (leader, controller))
    # Frozen during a controller's request, it would hold the controller for its socket timeout.
    cluster.wait_until(lambda m: partition_in(m, "w").leader_id == leader, "the topic known everywhere",
                       via=cluster.broker(frozen))
    cluster.pause(frozen)
    try:
        code = raw_produce(cluster.broker(leader).bootstrap, "w", b"pending", acks=-1, timeout_ms=30000)
    finally:
        cluster.resume(frozen)
    assert code == ErrorCode.NONE
    assert read_all(cluster.broker(leader).bootstrap, "w") == [b"pending"]
