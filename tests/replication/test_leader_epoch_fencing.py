"""KIP-320 on a real 3-broker cluster: after a leader change, a request that names the old
leader epoch is fenced at every replica, one that names an epoch the replica has not reached
is told so, and only the leader at the current epoch answers."""

from __future__ import annotations

import time

import pytest

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.records import build_message_set
from minikafka.testing import kafka_request


def _list_latest(broker, topic: str, current_leader_epoch: int):
    answer = kafka_request(broker.bootstrap, ApiKey.LIST_OFFSETS, 4, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1,
                                        "current_leader_epoch": current_leader_epoch}]}]})
    return answer.topics[0].partitions[0]


def _epoch_end(broker, topic: str, leader_epoch: int, current_leader_epoch: int):
    answer = kafka_request(broker.bootstrap, ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": leader_epoch,
                                         "current_leader_epoch": current_leader_epoch}]}]})
    found = answer.topics[0].partitions[0]
    return found.error_code, found.leader_epoch, found.end_offset


@pytest.mark.zookeeper
@pytest.mark.timeout(240)
def test_requests_at_the_old_epoch_are_fenced_after_a_leader_change(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(3)
    cluster.create_topic("fenced", 1, 3)
    cluster.wait_for_full_isr(["fenced"])
    first = cluster.leader("fenced", 0)
    body = {"acks": -1, "timeout_ms": 10000, "topic_data": [{"name": "fenced", "partition_data": [
        {"index": 0, "records": build_message_set([(None, b"%d" % i, 1) for i in range(3)])}]}]}
    produced = kafka_request(cluster.broker(first).bootstrap, ApiKey.PRODUCE, 2, body, timeout=30)
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    old = _list_latest(cluster.broker(first), "fenced", -1)
    assert (old.error_code, old.offset) == (ErrorCode.NONE, 3)
    old_epoch = old.leader_epoch

    second = next(b for b in cluster.ids if b != first)
    cluster.move_leader("fenced", 0, second)
    leader = cluster.broker(second)
    # Until the followers' fetches lift the new leader's high watermark to its epoch start, its
    # latest offset is LEADER_NOT_AVAILABLE (KIP-207): ask until it is there.
    deadline = time.monotonic() + 30
    while (new := _list_latest(leader, "fenced", -1)).error_code == ErrorCode.LEADER_NOT_AVAILABLE:
        assert time.monotonic() < deadline, "the new leader's high watermark never reached its epoch start"
        time.sleep(0.05)
    assert new.error_code == ErrorCode.NONE and new.leader_epoch > old_epoch
    new_epoch = new.leader_epoch
    cluster.wait_for_full_isr(["fenced"])

    assert _list_latest(leader, "fenced", old_epoch).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert _list_latest(leader, "fenced", new_epoch + 1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert _list_latest(leader, "fenced", new_epoch).offset == 3
    assert _epoch_end(leader, "fenced", old_epoch, old_epoch)[0] == ErrorCode.FENCED_LEADER_EPOCH
    # The old epoch ended where the new one started, at the log end then.
    assert _epoch_end(leader, "fenced", old_epoch, new_epoch) == (ErrorCode.NONE, old_epoch, 3)
    # The old leader follows now: the epoch is checked before the leadership (Kafka's
    # Partition.getLocalLog), so a client with stale metadata hears that it is stale.
    follower = cluster.broker(first)
    assert _list_latest(follower, "fenced", old_epoch).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert _list_latest(follower, "fenced", new_epoch).error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert _epoch_end(follower, "fenced", old_epoch, new_epoch + 1)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH


def _fetch(broker, topic: str, replica_id: int, fetch_offset: int, current_leader_epoch: int):
    body = {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": current_leader_epoch,
                                         "fetch_offset": fetch_offset, "partition_max_bytes": 1 << 20}]}]}
    return kafka_request(broker.bootstrap, ApiKey.FETCH, 9, body).responses[0].partitions[0]


@pytest.mark.zookeeper
@pytest.mark.timeout(240)
def test_a_fenced_follower_fetch_moves_no_high_watermark(minikafka_cluster_factory):
    """Kafka records a follower's fetch offset only after a read its epoch allowed: a follower
    that missed a leader change may hold a log the leader's diverges from, and its log end must
    not count towards the high watermark. Here the real followers are cut off and the test
    fetches in their name, first at an epoch the leader has left, then at its own."""
    cluster = minikafka_cluster_factory(3, **{"replica.lag.time.max.ms": "120000"})
    cluster.create_topic("positions", 1, 3)
    cluster.wait_for_full_isr(["positions"])
    leader_id = cluster.leader("positions", 0)
    followers = [b for b in cluster.ids if b != leader_id]
    leader = cluster.broker(leader_id)
    epoch = _list_latest(leader, "positions", -1).leader_epoch
    cluster.partition(followers, [leader_id])
    body = {"acks": 1, "timeout_ms": 10000, "topic_data": [{"name": "positions", "partition_data": [
        {"index": 0, "records": build_message_set([(None, b"%d" % i, 1) for i in range(3)])}]}]}
    produced = kafka_request(leader.bootstrap, ApiKey.PRODUCE, 2, body, timeout=30)
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE

    for follower in followers:
        fenced = _fetch(leader, "positions", follower, 3, epoch - 1 if epoch > 0 else epoch + 1)
        assert fenced.error_code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH)
    assert _list_latest(leader, "positions", epoch).offset == 0  # the high watermark stayed
    for follower in followers:
        assert _fetch(leader, "positions", follower, 3, epoch).error_code == ErrorCode.NONE
    assert _list_latest(leader, "positions", epoch).offset == 3
