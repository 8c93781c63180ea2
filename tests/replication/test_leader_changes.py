"""Acknowledged writes survive leader changes that keep or move the leader (issue 23): a new
leader epoch with the same leader, a controlled shutdown, and a leader that changed its own ISR
before it died. Real brokers, a real ZooKeeper, real clients.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from kafka import KafkaProducer

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.records import build_message_set
from minikafka.replication.kafka_zk import (
    ISR_CHANGE_NOTIFICATION_PATH, PREFERRED_REPLICA_ELECTION_PATH, decode_leader_isr, encode_isr_change,
    encode_preferred_replica_election, partition_state_path,
)
from minikafka.testing import kafka_request

from .test_cluster_faults import produce, read_all

pytestmark = pytest.mark.timeout(180)


def raw_produce(bootstrap: str, topic: str, value: bytes, *, acks: int, timeout_ms: int = 10000) -> ErrorCode:
    """One Produce on a connection of its own to exactly this broker (no metadata, no retry)."""
    answer = kafka_request(bootstrap, ApiKey.PRODUCE, 2, {
        "acks": acks, "timeout_ms": timeout_ms, "topic_data": [{"name": topic, "partition_data": [
            {"index": 0, "records": build_message_set([(None, value, int(time.time() * 1000))])}]}]},
        timeout=timeout_ms / 1000 + 10)
    return ErrorCode(answer.responses[0].partition_responses[0].error_code)


def partition_info(cluster, topic: str):
    return cluster.metadata([topic]).topics[0].partitions[0]


def partition_in(metadata, topic: str):
    return next(t for t in metadata.topics if t.name == topic).partitions[0]


def wait_for(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not {what} within {timeout} s")
        time.sleep(0.05)


def led_by_a_broker_to_pause(minikafka_cluster_factory, topic: str):
    """(cluster, old, heir): ``topic`` led by ``old``, neither broker the controller, on a
    cluster where neither a paused broker's session nor the controller's request to it runs out."""
    cluster = minikafka_cluster_factory(**{"zookeeper.session.timeout.ms": "30000",
                                           "controller.socket.timeout.ms": "120000"})
    controller = cluster.controller()
    old, heir = [b for b in cluster.ids if b != controller]
    cluster.create_topic(topic)
    if cluster.leader(topic, 0) != old:
        cluster.move_leader(topic, 0, to=old)
    cluster.wait_for_full_isr([topic])
    return cluster, old, heir


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


def test_controlled_shutdown_demotes_the_old_leader(minikafka_cluster_factory):
    """The controller sends the moved partition's new state to the stopping broker too (Kafka
    0.10.2's controlled-shutdown selector), so while it still runs it refuses produces for it
    instead of acknowledging writes the new leader never gets."""
    # The stopping broker waits out retries for a partition it cannot hand over: a window in
    # which it still serves the producers pointed at it.
    cluster = minikafka_cluster_factory(**{"controlled.shutdown.retry.backoff.ms": "3000"})
    cluster.create_topic("stuck", replication_factor=2)
    stuck = partition_info(cluster, "stuck")
    old = stuck.leader_id
    follower = next(r for r in stuck.replica_nodes if r != old)
    heir = next(b for b in cluster.ids if b not in (old, follower))
    cluster.create_topic("moved")
    if cluster.leader("moved", 0) != old:
        cluster.move_leader("moved", 0, to=old)
    acked = [b"before"]
    produce(cluster.bootstrap, "moved", b"before")
    cluster.kill(follower)  # "stuck" has nobody else in its ISR now

    stopping = threading.Thread(target=cluster.stop, args=(old,))
    stopping.start()
    try:
        cluster.wait_until(lambda m: partition_in(m, "moved").leader_id == heir, "moved to the heir",
                           via=cluster.broker(heir))
        code = raw_produce(cluster.broker(old).bootstrap, "moved", b"to-the-old-leader", acks=1)
    finally:
        stopping.join()
    if code == ErrorCode.NONE:
        acked.append(b"to-the-old-leader")
    cluster.restart(old)
    cluster.wait_until(lambda m: old in partition_in(m, "moved").isr_nodes, "the old leader back in the ISR", 60)
    assert code == ErrorCode.NOT_LEADER_FOR_PARTITION
    for broker in (old, heir):
        assert set(acked) <= set(read_all(cluster.broker(broker).bootstrap, "moved"))


def test_a_moved_leadership_waits_for_the_old_leader_to_answer_its_demotion(minikafka_cluster_factory):
    """A preferred-leader move away from a leader that is alive but slow to answer (paused, as a
    loaded process is): its successor is told it leads only once the old leader has answered
    the LeaderAndIsr that demotes it. Told at the same time (Kafka 0.10.2's order), the heir led
    at once while the old leader, once it ran again, could still acknowledge acks=1 writes in
    the old epoch (the nemesis run's stale_producer finding)."""
    cluster, old, heir = led_by_a_broker_to_pause(minikafka_cluster_factory, "slow")
    zk = cluster._zk()
    cluster.pause(old)
    try:
        zk.create(PREFERRED_REPLICA_ELECTION_PATH, encode_preferred_replica_election([("slow", 0, heir)]),
                  makepath=True)
        wait_for(lambda: decode_leader_isr("slow", 0, zk.get(partition_state_path("slow", 0))[0]).leader == heir,
                 "the move written to ZooKeeper")
        # Told at once, the heir took writes a round trip after that; told after the old
        # leader's answer, it refuses them for as long as the old leader stays paused.
        for attempt in range(10):
            code = raw_produce(cluster.broker(heir).bootstrap, "slow", f"early-{attempt}".encode(), acks=1)
            assert code == ErrorCode.NOT_LEADER_FOR_PARTITION, attempt
            time.sleep(0.2)
    finally:
        cluster.resume(old)
    cluster.wait_until(lambda m: partition_in(m, "slow").leader_id == heir, "the heir leading",
                       via=cluster.broker(heir))
    assert raw_produce(cluster.broker(old).bootstrap, "slow", b"late", acks=1) == ErrorCode.NOT_LEADER_FOR_PARTITION
    produce(cluster.bootstrap, "slow", b"after")
    assert read_all(cluster.broker(heir).bootstrap, "slow") == [b"after"]


def test_a_leader_that_changed_its_own_isr_and_died_is_replaced(minikafka_cluster_factory):
    """The leader shrank its ISR in ZooKeeper and died before the controller heard of it (Kafka
    0.10.2's leaders batch the ISR change notification for up to 5 s; a minikafka leader writes it
    at once, so the test makes the leader's write itself, the same conditional update of the
    partition's state node): the controller's update with the version it knew fails with
    BadVersion, and it re-reads that partition and elects a new leader from the new ISR."""
    from kazoo.client import KazooClient

    cluster = minikafka_cluster_factory()
    cluster.create_topic("i")
    produce(cluster.bootstrap, "i", b"before")
    controller = cluster.controller()
    leader = cluster.leader("i", 0)
    if leader == controller:  # a new controller reads every state afresh
        leader = next(b for b in cluster.ids if b != controller)
        cluster.move_leader("i", 0, to=leader)
    lagging = next(b for b in cluster.ids if b not in (leader, controller))
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=15)
    try:
        path = "/brokers/topics/i/partitions/0/state"
        raw, stat = zk.get(path)
        state = json.loads(raw)
        state["isr"] = [r for r in state["isr"] if r != lagging]
        zk.set(path, json.dumps(state).encode(), version=stat.version)
    finally:
        zk.stop()
        zk.close()
    cluster.kill(leader)
    cluster.wait_until(lambda m: partition_in(m, "i").leader_id == controller, "the ISR's survivor elected", 20)
    produce(cluster.bootstrap, "i", b"after")
    assert read_all(cluster.broker(controller).bootstrap, "i") == [b"before", b"after"]


def test_an_election_decides_on_the_isr_in_zookeeper_not_the_controllers_last_view(minikafka_cluster_factory):
    """A replica back in the ISR, written by its leader, whose notification the controller has
    not handled yet (Kafka 0.10.2's leaders batch it for up to 5 s; a README example met the
    window after a restart): a preferred election to it reads the partition's state from
    ZooKeeper first, as Kafka's electLeaderForPartition does. Before: the controller decided on
    the ISR it last knew, without the replica, and refused (PREFERRED_LEADER_NOT_AVAILABLE).
    The test makes the leader's two writes itself: the shrink with its notification, then the
    expansion without one."""
    cluster = minikafka_cluster_factory()
    cluster.create_topic("stale")
    cluster.wait_for_full_isr(["stale"])
    leader = cluster.leader("stale", 0)
    heir = next(b for b in cluster.ids if b != leader)
    zk = cluster._zk()
    path = partition_state_path("stale", 0)
    raw, stat = zk.get(path)
    full = json.loads(raw)
    shrunk = dict(full, isr=[r for r in full["isr"] if r != heir])
    zk.set(path, json.dumps(shrunk).encode(), version=stat.version)
    zk.create(f"{ISR_CHANGE_NOTIFICATION_PATH}/isr_change_", encode_isr_change([("stale", 0)]), sequence=True)
    cluster.wait_until(lambda m: heir not in partition_in(m, "stale").isr_nodes, "the controller told of the shrink",
                       via=cluster.broker(cluster.controller()))
    zk.set(path, json.dumps(full).encode(), version=zk.get(path)[1].version)
    cluster.move_leader("stale", 0, to=heir)
    assert decode_leader_isr("stale", 0, zk.get(path)[0]).leader == heir


def test_a_preferred_election_request_is_deleted_only_once_its_election_is_done(minikafka_cluster_factory):
    """Whoever writes /admin/preferred_replica_election takes its disappearance for the answer
    (kafka-preferred-replica-election.sh; the fixture's move_leader, whose reads after it failed
    in CI: "the controller did not elect broker 3 (leader 1, ...)"). Kafka 0.10.2's controller
    deletes it once the elections are done; minikafka's deleted it first. Here the election
    cannot finish while the old leader, paused, has not answered its demotion: the request
    must still be there after the new leader is written, and gone once it is told."""
    cluster, old, heir = led_by_a_broker_to_pause(minikafka_cluster_factory, "asked")
    zk = cluster._zk()
    path = partition_state_path("asked", 0)
    cluster.pause(old)
    try:
        zk.create(PREFERRED_REPLICA_ELECTION_PATH, encode_preferred_replica_election([("asked", 0, heir)]),
                  makepath=True)
        wait_for(lambda: decode_leader_isr("asked", 0, zk.get(path)[0]).leader == heir, "the move written")
        time.sleep(1.0)  # the demotion is still unanswered: the request must stay meanwhile
        assert zk.exists(PREFERRED_REPLICA_ELECTION_PATH) is not None
    finally:
        cluster.resume(old)
    wait_for(lambda: zk.exists(PREFERRED_REPLICA_ELECTION_PATH) is None, "the request deleted")
    cluster.wait_until(lambda m: partition_in(m, "asked").leader_id == heir, "the heir leading")


def test_describe_log_dirs_answers_a_leaders_offset_lag_as_kafka(minikafka_cluster_factory):
    """DescribeLogDirs' offset_lag of a current replica is max(high watermark - log end, 0),
    Kafka 2.8's getLogEndOffsetLag: 0 on a leader whose follower has not fetched its last
    write yet (minikafka answered log end - high watermark, 1 here)."""
    cluster = minikafka_cluster_factory(**{"zookeeper.session.timeout.ms": "30000",
                                           "replica.lag.time.max.ms": "60000"})
    cluster.create_topic("lagged")
    leader = cluster.leader("lagged", 0)
    follower = next(b for b in cluster.ids if b != leader)
    cluster.pause(follower)
    try:
        assert raw_produce(cluster.broker(leader).bootstrap, "lagged", b"unreplicated", acks=1) == ErrorCode.NONE
        answer = kafka_request(cluster.broker(leader).bootstrap, ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": None})
    finally:
        cluster.resume(follower)
    lags = [p.offset_lag for d in answer.results for t in d.topics if t.name == "lagged" for p in t.partitions]
    assert lags == [0]
    # The write was held below the high watermark by the paused follower, not lost.
    wait_for(lambda: cluster.high_watermark("lagged", 0) == 1, "the follower fetching it once resumed")
