"""Partition reassignment (AlterPartitionReassignments / ListPartitionReassignments, KIP-455) on a
3-broker cluster with a real ZooKeeper: a partition moves while a producer writes acks=all, its
leader among the replicas removed or not, and no acknowledged value is lost; a move whose new
replica is paused stays in progress, removes nothing, and survives its controller's kill -9; a
cancelled move goes back to where it came from; refused requests change nothing; a topic
deleted mid-move is deleted with its move."""

from __future__ import annotations

import threading
import time

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.kafka_zk import decode_topic_assignment, decode_topic_reassignment, topic_path
from minikafka.testing import kafka_request

from .test_cluster_faults import read_all

pytestmark = pytest.mark.timeout(240)

TOPIC = "moving"


def create_assigned(cluster, replicas: list[int]) -> None:
    answer = kafka_request(cluster.broker(cluster.controller()).bootstrap, ApiKey.CREATE_TOPICS, 0, {
        "topics": [{"name": TOPIC, "num_partitions": -1, "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": replicas}], "configs": []}],
        "timeout_ms": 30000})
    assert answer.topics[0].error_code == ErrorCode.NONE
    cluster.wait_for_full_isr([TOPIC])
    for broker_id in cluster.ids:
        cluster.wait_until(lambda m: any(t.name == TOPIC and t.partitions and t.partitions[0].leader_id == replicas[0]
                                         for t in m.topics),
                           f"{TOPIC}-0 led by {replicas[0]} as broker {broker_id} sees it", 30,
                           via=cluster.broker(broker_id))


class Writer(threading.Thread):
    """Writes numbered values acks=all until stopped; ``acked`` are those acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=20, request_timeout_ms=10000,
                                      max_in_flight_requests_per_connection=1, linger_ms=5)
        self.acked: list[bytes] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        number = 0
        while not self.stopping.is_set():
            value = f"v{number}".encode()
            number += 1
            try:
                self.producer.send(TOPIC, value, partition=0).get(timeout=30)
            except Exception:   # not acknowledged: it may or may not be there
                continue
            self.acked.append(value)
            time.sleep(0.005)

    def wait_for(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        target = len(self.acked) + count
        while len(self.acked) < target:
            assert time.monotonic() < deadline, f"only {len(self.acked)} values acknowledged"
            time.sleep(0.05)

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)
        self.producer.close(timeout=10)


def admin_of(cluster, via: int | None = None) -> KafkaAdminClient:
    """An admin client bootstrapped from ``via`` (default: every broker; a paused one would
    hold its bootstrap)."""
    bootstrap = cluster.bootstrap if via is None else cluster.broker(via).bootstrap
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def wait_moved(cluster, target: list[int], timeout: float = 60.0) -> None:
    """Until the controller's metadata shows the partition on ``target``, all in sync, and
    nothing is listed as moving."""
    cluster.wait_until(lambda m: [(p.replica_nodes, sorted(p.isr_nodes)) for t in m.topics if t.name == TOPIC
                                  for p in t.partitions] == [(target, sorted(target))],
                       f"{TOPIC}-0 on {target}", timeout, via=cluster.broker(cluster.controller()))
    admin = admin_of(cluster, via=target[0])
    try:
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()


def check_nothing_lost(cluster, writer: Writer, target: list[int]) -> None:
    values = read_all(cluster.broker(target[0]).bootstrap, TOPIC, timeout=60)
    assert writer.acked and not set(writer.acked) - set(values), "acknowledged values lost"
    hw = cluster.high_watermark(TOPIC, 0)
    replicas = cluster.replicas_below_high_watermark({(TOPIC, 0): hw}, brokers=target)[(TOPIC, 0)]
    assert len(set(replicas.values())) == 1 and replicas[target[0]], "the target replicas differ"


def znode(cluster):
    raw = cluster._zk().get(topic_path(TOPIC))[0]
    return decode_topic_assignment(TOPIC, raw), decode_topic_reassignment(TOPIC, raw)


@pytest.mark.parametrize("leader_removed", [False, True], ids=["leader-kept", "leader-removed"])
def test_a_partition_moves_under_acks_all_writes_without_losing_one(minikafka_cluster_factory, leader_removed):
    cluster = minikafka_cluster_factory()
    first, second, third = sorted(cluster.ids)
    create_assigned(cluster, [first, second])
    assert cluster.leader(TOPIC, 0) == first
    target = [second, third] if leader_removed else [first, third]
    writer = Writer(cluster.bootstrap)
    writer.start()
    try:
        writer.wait_for(50)
        admin = admin_of(cluster)
        try:
            tp = TopicPartition(TOPIC, 0)
            assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        finally:
            admin.close()
        wait_moved(cluster, target)
        writer.wait_for(50)
    finally:
        writer.stop()
    assert cluster.leader(TOPIC, 0) in target
    assert znode(cluster) == ({0: target}, ({}, {}))
    removed = first if leader_removed else second  # the origin replica not in the target
    deadline = time.monotonic() + 30
    while (cluster.broker(removed).log_dir / f"{TOPIC}-0").exists():
        assert time.monotonic() < deadline, "the removed replica's copy was not deleted"
        time.sleep(0.2)
    check_nothing_lost(cluster, writer, target)


def test_a_move_waits_for_its_paused_replica_and_outlives_its_controller(minikafka_cluster_factory):
    """The new replica is paused: the move stays in progress (listed with what it adds and
    removes) and nothing is removed; the controller — also the leader, which the move removes —
    is killed; once the replica runs again the next controller completes the move."""
    cluster = minikafka_cluster_factory(**{"zookeeper.session.timeout.ms": "30000"})
    controller = cluster.controller()
    kept, paused = sorted(b for b in cluster.ids if b != controller)
    create_assigned(cluster, [controller, kept])
    target = [kept, paused]
    writer = Writer(",".join(cluster.broker(b).bootstrap for b in (controller, kept)))
    writer.start()
    try:
        writer.wait_for(30)
        cluster.pause(paused)
        try:
            # Raw requests to the controller: an admin client may pick the paused broker for its
            # metadata (any broker it knows) and wait out its request timeout there.
            at = cluster.broker(controller).bootstrap
            answer = kafka_request(at, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": target}]}]})
            assert [p.error_code for t in answer.responses for p in t.partitions] == [ErrorCode.NONE]
            listed = kafka_request(at, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": None})
            assert [(t.name, [(p.partition_index, list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                              for p in t.partitions]) for t in listed.topics] == [
                (TOPIC, [(0, [kept, paused, controller], [paused], [controller])])]
            assert znode(cluster) == ({0: [kept, paused, controller]}, ({0: [paused]}, {0: [controller]}))
            writer.wait_for(30)
            assert (cluster.broker(controller).log_dir / f"{TOPIC}-0").exists()
            cluster.kill(controller)
            writer.wait_for(30)
        finally:
            cluster.resume(paused)
        wait_moved(cluster, target, timeout=90)
        writer.wait_for(30)
    finally:
        writer.stop()
    assert znode(cluster) == ({0: target}, ({}, {}))
    check_nothing_lost(cluster, writer, target)


def leader_epoch(bootstrap: str) -> int:
    """The leader epoch of TOPIC-0 as the broker at ``bootstrap`` knows it (Metadata v7)."""
    answer = kafka_request(bootstrap, ApiKey.METADATA, 7, {"topics": [{"name": TOPIC}],
                                                            "allow_auto_topic_creation": False})
    return answer.topics[0].partitions[0].leader_epoch


def test_a_cancelled_move_goes_back_and_refused_ones_change_nothing(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(**{"zookeeper.session.timeout.ms": "30000"})
    controller = cluster.controller()
    other, paused = sorted(b for b in cluster.ids if b != controller)
    create_assigned(cluster, [controller, other])
    bootstrap = cluster.broker(controller).bootstrap

    def alter(partitions: list[dict], at: str = bootstrap):
        return kafka_request(at, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": [
            {"name": TOPIC, "partitions": partitions}]})

    def codes(answer) -> list[int]:
        return [p.error_code for t in answer.responses for p in t.partitions]

    assert alter([{"partition_index": 0, "replicas": [paused]}], cluster.broker(other).bootstrap).error_code == \
        ErrorCode.NOT_CONTROLLER
    assert codes(alter([{"partition_index": 0, "replicas": [other, 99]}])) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    assert codes(alter([{"partition_index": 0, "replicas": [other, other]}])) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    assert codes(alter([{"partition_index": 0, "replicas": None}])) == [ErrorCode.NO_REASSIGNMENT_IN_PROGRESS]
    assert codes(alter([{"partition_index": 5, "replicas": [other]}])) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert znode(cluster) == ({0: [controller, other]}, ({}, {}))

    cluster.pause(paused)
    try:
        assert codes(alter([{"partition_index": 0, "replicas": [other, paused]}])) == [ErrorCode.NONE]
        assert znode(cluster)[1] == ({0: [paused]}, {0: [controller]})
        grown = kafka_request(bootstrap, ApiKey.CREATE_PARTITIONS, 0, {"topics": [
            {"name": TOPIC, "count": 2, "assignments": None}], "timeout_ms": 30000, "validate_only": False})
        assert grown.results[0].error_code == ErrorCode.REASSIGNMENT_IN_PROGRESS
        assert codes(alter([{"partition_index": 0, "replicas": None}])) == [ErrorCode.NONE]
        listed = kafka_request(bootstrap, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": [
            {"name": TOPIC, "partition_indexes": [0]}]})
        assert (listed.error_code, list(listed.topics)) == (ErrorCode.NONE, [])
        assert znode(cluster) == ({0: [controller, other]}, ({}, {}))
        cancelled_epoch = leader_epoch(cluster.broker(controller).bootstrap)
    finally:
        cluster.resume(paused)
    cluster.wait_for_full_isr([TOPIC])
    # The paused broker's requests from the controller arrive in order once it runs: the move's
    # LeaderAndIsr (it creates its copy), then what the cancel sent it, the StopReplica that
    # deletes the copy before the metadata of the cancel's epoch. Seeing that epoch there, the
    # copy is gone: polling the directory instead may look before the copy was even created.
    deadline = time.monotonic() + 60
    while leader_epoch(cluster.broker(paused).bootstrap) < cancelled_epoch:
        assert time.monotonic() < deadline, f"broker {paused} never heard of the cancel's epoch {cancelled_epoch}"
        time.sleep(0.1)
    assert not (cluster.broker(paused).log_dir / f"{TOPIC}-0").exists(), "the cancelled replica's copy was kept"


def test_a_replica_removed_while_its_broker_was_down_is_deleted_when_it_returns(minikafka_cluster_factory):
    """A move that completes while one of its removed replicas is down cannot stop it: the
    broker, back, is never sent anything about the partition again (Kafka 2.8's ZooKeeper
    mode keeps such a stray copy for good). It deletes the copy once the controller's
    UpdateMetadata names the partition without it."""
    cluster = minikafka_cluster_factory(**{"zookeeper.session.timeout.ms": "30000"})
    controller = cluster.controller()
    other, removed = sorted(b for b in cluster.ids if b != controller)
    create_assigned(cluster, [controller, other, removed])
    bootstrap = cluster.broker(controller).bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for number in range(20):
        producer.send(TOPIC, f"v{number}".encode(), partition=0).get(timeout=30)
    producer.close(timeout=10)
    cluster.kill(removed)
    answer = kafka_request(bootstrap, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": [controller, other]}]}]})
    assert [p.error_code for t in answer.responses for p in t.partitions] == [ErrorCode.NONE]
    wait_moved(cluster, [controller, other])
    moved_epoch = leader_epoch(bootstrap)
    copy = cluster.broker(removed).log_dir / f"{TOPIC}-0"
    assert copy.exists()
    cluster.restart(removed)
    deadline = time.monotonic() + 60
    while leader_epoch(cluster.broker(removed).bootstrap) < moved_epoch or copy.exists():
        assert time.monotonic() < deadline, f"broker {removed} kept the copy the move removed"
        time.sleep(0.1)
    assert sorted(read_all(bootstrap, TOPIC, timeout=60)) == sorted(f"v{n}".encode() for n in range(20))


def test_a_topic_deleted_mid_move_is_gone_with_its_move_and_comes_back_clean(minikafka_cluster_factory):
    """A topic deleted while a partition moves (its new replica paused, so the move cannot
    complete) is deleted at once, its move with it: nothing listed, the replicas' copies gone,
    the paused broker's too once it runs. Kafka 2.8 instead holds the deletion until the move
    completes (markTopicIneligibleForDeletion): here DeleteTopics would wait out its timeout on a
    move that may never end, so minikafka lets the deletion win. The topic created again under
    the same name starts with no move and no stale copy."""
    cluster = minikafka_cluster_factory(**{"zookeeper.session.timeout.ms": "30000"})
    controller = cluster.controller()
    kept, paused = sorted(b for b in cluster.ids if b != controller)
    create_assigned(cluster, [controller, kept])
    at = cluster.broker(controller).bootstrap
    cluster.pause(paused)
    try:
        answer = kafka_request(at, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": [kept, paused]}]}]})
        assert [p.error_code for t in answer.responses for p in t.partitions] == [ErrorCode.NONE]
        deleted = kafka_request(at, ApiKey.DELETE_TOPICS, 0, {"topic_names": [TOPIC], "timeout_ms": 30000})
        assert [r.error_code for r in deleted.responses] == [ErrorCode.NONE]
        listed = kafka_request(at, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": None})
        assert list(listed.topics) == []
        for broker_id in (controller, kept):
            deadline = time.monotonic() + 30
            while (cluster.broker(broker_id).log_dir / f"{TOPIC}-0").exists():
                assert time.monotonic() < deadline, f"broker {broker_id} kept its copy"
                time.sleep(0.1)
        created = kafka_request(at, ApiKey.CREATE_TOPICS, 0, {
            "topics": [{"name": TOPIC, "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [controller, kept]}], "configs": []}],
            "timeout_ms": 30000})
        assert created.topics[0].error_code == ErrorCode.NONE
        cluster.wait_for_full_isr([TOPIC])
        assert znode(cluster) == ({0: [controller, kept]}, ({}, {}))
    finally:
        cluster.resume(paused)
    # The paused broker hears, in order, of the move, then of the deletion; nothing of the
    # topic's new incarnation is its.
    deadline = time.monotonic() + 30
    while (cluster.broker(paused).log_dir / f"{TOPIC}-0").exists():
        assert time.monotonic() < deadline, "the paused broker kept a copy"
        time.sleep(0.1)
    producer = KafkaProducer(bootstrap_servers=at, acks="all")
    producer.send(TOPIC, b"again", partition=0).get(timeout=30)
    producer.close()
    assert read_all(cluster.broker(kept).bootstrap, TOPIC) == [b"again"]
    cluster.wait_until(lambda m: [p.replica_nodes for t in m.topics if t.name == TOPIC for p in t.partitions]
                       == [[controller, kept]], "the paused broker told of the new topic", via=cluster.broker(paused))
