"""The controller's requests to the brokers on a real cluster: each one retried until its broker
takes it (or its registration ends), without a slow broker holding the controller's other work."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer

from minikafka.broker.pytest_plugin import kafka_request
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.kafka_zk import decode_leader_isr, partition_state_path

pytestmark = pytest.mark.timeout(180)


def create_topic(cluster, name: str, replicas: list[int]):
    """CreateTopics on the controller with this assignment, without waiting for the brokers to
    know it (REQUEST_TIMED_OUT, as Kafka's timeout 0, once the assignment is written); returns
    the partition's first state, once the controller has written it."""
    body = {"topics": [{"name": name, "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": replicas}], "configs": []}],
            "timeout_ms": 0}
    answer = kafka_request(cluster.broker(cluster.controller()).bootstrap, ApiKey.CREATE_TOPICS, 0, body)
    assert answer.topics[0].error_code in (ErrorCode.NONE, ErrorCode.REQUEST_TIMED_OUT)
    deadline = time.monotonic() + 30
    while cluster._zk().exists(partition_state_path(name, 0)) is None:
        assert time.monotonic() < deadline, f"no state for {name}-0 in ZooKeeper"
        time.sleep(0.05)
    return leader_isr(cluster, name)


def leader_isr(cluster, topic: str):
    return decode_leader_isr(topic, 0, cluster._zk().get(partition_state_path(topic, 0))[0])


def test_a_request_the_controller_could_not_deliver_arrives_once_the_link_is_back(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory()
    controller = cluster.controller()
    cut, third = [b for b in cluster.ids if b != controller]
    cluster.partition([controller], [cut])  # both still reach ZooKeeper: cut stays registered
    # cut is the first replica: elected leader, told so by a LeaderAndIsr that cannot reach it.
    assert create_topic(cluster, "late", [cut, controller, third]).leader == cut
    cluster.heal()
    # Dropped, the UpdateMetadata and LeaderAndIsr never came: cut did not know the topic, and
    # nobody led the partition.
    cluster.wait_until(lambda m: any(t.name == "late" and t.error_code == ErrorCode.NONE and
                                     t.partitions[0].leader_id == cut for t in m.topics),
                       "the topic led by the cut broker in its own metadata", 30, via=cluster.broker(cut))
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=5)
    try:
        assert producer.send("late", b"led", partition=0).get(timeout=30).offset == 0
    finally:
        producer.close(timeout=5)


def test_a_paused_broker_does_not_hold_the_controllers_other_work(minikafka_cluster_factory):
    # The pause must not end the paused broker's session, nor the controller's request to it
    # time out, while the test looks.
    cluster = minikafka_cluster_factory(**{"zookeeper.session.timeout.ms": "30000",
                                           "controller.socket.timeout.ms": "120000"})
    controller = cluster.controller()
    paused, third = [b for b in cluster.ids if b != controller]
    cluster.pause(paused)
    try:
        create_topic(cluster, "waits", [controller, third, paused])
        # Awaited inline, a request to the paused broker held the controller's next events for
        # 120 s: even "waits" got no state in ZooKeeper within 30 s.
        create_topic(cluster, "goes-on", [third, controller])
        cluster.wait_for_full_isr(["goes-on"], timeout=20)
    finally:
        cluster.resume(paused)
    cluster.wait_for_full_isr(["waits"], timeout=30)



def test_a_leadership_outside_the_isr_is_refused_and_the_rest_of_the_request_applied(minikafka_cluster_factory):
    """A LeaderAndIsr making a broker leader of a partition whose ISR lacks it (no controller
    sends one) is answered INVALID_REQUEST for that partition, with nothing of it applied; the
    request's other partitions are. Before, the broker's metadata took the new state, then the
    leader state's own check raised and the request, and the partitions after it, were lost."""
    from minikafka.replication.kafka_zk import CONTROLLER_EPOCH_PATH

    cluster = minikafka_cluster_factory()
    controller = cluster.controller()
    target = next(b for b in cluster.ids if b != controller)
    others = [b for b in cluster.ids if b != target]
    odd = create_topic(cluster, "odd", [others[0], target, others[1]])
    plain = create_topic(cluster, "plain", [others[0], target, others[1]])
    cluster.wait_for_full_isr(["odd", "plain"])
    epoch = int(cluster._zk().get(CONTROLLER_EPOCH_PATH)[0])

    def state(topic, leader_isr, leader, isr):
        return {"topic_name": topic, "partition_index": 0, "controller_epoch": epoch, "leader": leader,
                "leader_epoch": leader_isr.leader_epoch + 1, "isr": isr, "zk_version": 0,
                "replicas": [others[0], target, others[1]]}

    leader = cluster.broker(others[0])
    body = {"controller_id": controller, "controller_epoch": epoch,
            "ungrouped_partition_states": [state("odd", odd, target, others), state("plain", plain, others[0], cluster.ids)],
            "live_leaders": [{"broker_id": others[0], "host_name": leader.host, "port": leader.port},
                             {"broker_id": target, "host_name": cluster.broker(target).host,
                              "port": cluster.broker(target).port}]}
    answer = kafka_request(cluster.broker(target).bootstrap, ApiKey.LEADER_AND_ISR, 0, body)
    assert answer.error_code == ErrorCode.NONE
    assert sorted((p.topic_name, p.error_code) for p in answer.partition_errors) == [
        ("odd", ErrorCode.INVALID_REQUEST), ("plain", ErrorCode.NONE)]
    seen = {t.name: t.partitions[0] for t in cluster.metadata(["odd", "plain"], via=cluster.broker(target)).topics}
    assert seen["odd"].leader_id == others[0]
