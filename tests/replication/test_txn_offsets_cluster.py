"""Transactional offset commits in a 3-broker cluster when the group's coordinator is killed:
the new coordinator loads the partition's transactional offsets and markers from its replica,
so a committed transaction's offsets are visible, an open one's stay pending (OffsetFetch
require_stable: UNSTABLE_OFFSET_COMMIT) until its marker, then visible.

The transaction's requests are sent raw (TxnOffsetCommit, then WriteTxnMarkers as a
transaction coordinator sends them to the partition's leader): this is the group side of a
transaction, whichever broker coordinates the transaction itself.
"""

from __future__ import annotations

import select
import socket
import time

import pytest

from minikafka.broker.groups.records import partition_for
from minikafka.broker.groups.store import GROUP_METADATA_TOPIC
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.framing import encode_request
from minikafka.testing import kafka_request

from .test_groups_cluster import coordinator_of

pytestmark = pytest.mark.timeout(300)

OFFSETS_PARTITIONS = 3
RETRIED = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}


def until_answered(cluster, request, timeout: float = 60.0):
    """``request(coordinator's bootstrap)`` until no partition answers a coordinator error."""
    deadline = time.monotonic() + timeout
    while True:
        answer, errors = request(cluster.broker(coordinator_of(cluster, "g")).bootstrap)
        if not set(errors) & RETRIED:
            return answer, errors
        assert time.monotonic() < deadline, f"still {[ErrorCode(e).name for e in errors]}"
        time.sleep(0.2)


def txn_commit(cluster, producer_id: int, partition: int, offset: int) -> None:
    def request(bootstrap):
        answer = kafka_request(bootstrap, ApiKey.TXN_OFFSET_COMMIT, 3, {
            "transactional_id": f"tx{producer_id}", "group_id": "g", "producer_id": producer_id,
            "producer_epoch": 0, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": partition, "committed_offset": offset,
                                                     "committed_metadata": ""}]}]})
        return answer, [p.error_code for t in answer.topics for p in t.partitions]

    assert until_answered(cluster, request)[1] == [ErrorCode.NONE]


def end_txn(cluster, producer_id: int, commit: bool) -> None:
    index = partition_for("g", OFFSETS_PARTITIONS)

    def request(bootstrap):
        answer = kafka_request(bootstrap, ApiKey.WRITE_TXN_MARKERS, 0, {"markers": [{
            "producer_id": producer_id, "producer_epoch": 0, "transaction_result": commit, "coordinator_epoch": 0,
            "topics": [{"name": GROUP_METADATA_TOPIC, "partition_indexes": [index]}]}]})
        errors = [p.error_code for m in answer.markers for t in m.topics for p in t.partitions]
        return answer, [ErrorCode.NOT_COORDINATOR if e == ErrorCode.NOT_LEADER_OR_FOLLOWER else e for e in errors]

    assert until_answered(cluster, request)[1] == [ErrorCode.NONE]


def stable_offsets(cluster) -> dict[int, int]:
    """OffsetFetch v7 with require_stable: offset per partition, or the error's code."""
    def request(bootstrap):
        answer = kafka_request(bootstrap, ApiKey.OFFSET_FETCH, 7, {
            "group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1, 2]}], "require_stable": True})
        errors = [answer.error_code] + [p.error_code for t in answer.topics for p in t.partitions]
        return answer, errors

    answer, _ = until_answered(cluster, request)
    return {p.partition_index: p.error_code or p.committed_offset for t in answer.topics for p in t.partitions}


def test_transactional_offsets_survive_their_coordinator_being_killed(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(3, **{"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)})
    cluster.create_topic("t", 3, 3)
    txn_commit(cluster, 101, 0, 10)   # committed before the kill
    txn_commit(cluster, 102, 1, 20)   # aborted before the kill
    txn_commit(cluster, 103, 2, 30)   # open across the kill
    end_txn(cluster, 101, True)
    end_txn(cluster, 102, False)
    assert stable_offsets(cluster) == {0: 10, 1: -1, 2: ErrorCode.UNSTABLE_OFFSET_COMMIT}

    killed = coordinator_of(cluster, "g")
    cluster.kill(killed)
    assert coordinator_of(cluster, "g") != killed
    assert stable_offsets(cluster) == {0: 10, 1: -1, 2: ErrorCode.UNSTABLE_OFFSET_COMMIT}
    end_txn(cluster, 103, True)
    assert stable_offsets(cluster) == {0: 10, 1: -1, 2: 30}


def test_a_marker_whose_sender_left_before_its_replicas_had_it_still_completes_the_offsets(minikafka_cluster_factory):
    """The transaction coordinator's connection closes (its broker killed, or its request timed
    out) while the COMMIT marker it sent waits for the followers of ``__consumer_offsets``: once
    the marker is committed the offsets become visible, as Kafka's append callback completes
    them whatever became of the request. Before: the request's cancellation skipped the
    completion, and the offsets stayed UNSTABLE_OFFSET_COMMIT until a coordinator wrote the
    marker again (here none does: the marker is sent raw)."""
    cluster = minikafka_cluster_factory(3, **{"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)})
    cluster.create_topic("t", 3, 3)
    txn_commit(cluster, 104, 0, 41)
    assert stable_offsets(cluster)[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    index = partition_for("g", OFFSETS_PARTITIONS)
    coordinator = cluster.broker(coordinator_of(cluster, "g"))
    segments = sorted((coordinator.log_dir / f"{GROUP_METADATA_TOPIC}-{index}").glob("*.log"))
    written = sum(segment.stat().st_size for segment in segments)
    followers = [broker_id for broker_id in cluster.ids if cluster.broker(broker_id) is not coordinator]
    for follower in followers:
        cluster.pause(follower)
    try:
        with socket.create_connection((coordinator.host, coordinator.port)) as sender:
            sender.sendall(encode_request(ApiKey.WRITE_TXN_MARKERS, 0, 1, "coordinator", {"markers": [{
                "producer_id": 104, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                "topics": [{"name": GROUP_METADATA_TOPIC, "partition_indexes": [index]}]}]}))
            deadline = time.monotonic() + 10
            while sum(segment.stat().st_size for segment in segments) == written:
                assert time.monotonic() < deadline, "the leader did not append the marker"
                time.sleep(0.01)
            # Appended by the leader, not acknowledged: the followers cannot fetch it.
            assert not select.select([sender], [], [], 0)[0], "the marker was answered before its replicas had it"
    finally:
        for follower in followers:
            cluster.resume(follower)
    deadline = time.monotonic() + 30
    while (offsets := stable_offsets(cluster))[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT:
        assert time.monotonic() < deadline, "the committed marker's offsets stayed pending"
        time.sleep(0.2)
    assert offsets == {0: 41, 1: -1, 2: -1}
