"""The cluster fixture's faults, each seen by a real client: kill, controlled shutdown, restart,
pause / resume, a network partition and its heal, and a leader move through the controller.
"""

from __future__ import annotations

import socket
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError, RequestTimedOutError

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.records import build_message_set
from minikafka.testing import ZOOKEEPER, ControlError, kafka_request
from minikafka.testing.link_proxy import LinkProxy

pytestmark = pytest.mark.timeout(180)


def produce(bootstrap: str, topic: str, value: bytes, **config):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **{"retries": 5, "request_timeout_ms": 10000,
                                                                         **config})
    try:
        return producer.send(topic, value, partition=0).get(timeout=30)
    finally:
        producer.close(timeout=5)


def read_all(bootstrap: str, topic: str, timeout: float = 20.0) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    end = consumer.end_offsets([tp])[tp]
    values, deadline = [], time.monotonic() + timeout
    try:
        while len(values) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
    finally:
        consumer.close()
    return values


def other_than(cluster, broker_id: int) -> int:
    return next(b for b in cluster.ids if b != broker_id)


# --------------------------------------------------------------------------- the proxy alone


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(4) == b""
    except ConnectionResetError:
        return True


def refused(address) -> bool:
    """Accepted and reset at once: the reset may already meet the client's connect."""
    try:
        sock = socket.create_connection(address, timeout=5)
    except OSError:
        return True
    with sock:
        return closed_by_peer(sock)


def test_a_cut_link_closes_live_connections_refuses_new_ones_and_heals():
    server = socket.create_server(("127.0.0.1", 0))
    proxy = LinkProxy("test", lambda: server.getsockname()[:2])
    try:
        client = socket.create_connection(proxy.address, timeout=5)
        upstream, _ = server.accept()
        client.sendall(b"ping")
        assert upstream.recv(4) == b"ping"
        upstream.sendall(b"pong")
        assert client.recv(4) == b"pong"

        proxy.cut()
        assert closed_by_peer(client)
        assert refused(proxy.address)
        server.settimeout(0.5)
        with pytest.raises(socket.timeout):
            server.accept()  # nothing got through to the target

        proxy.heal()
        again = socket.create_connection(proxy.address, timeout=5)
        server.settimeout(5)
        upstream2, _ = server.accept()
        again.sendall(b"back")
        assert upstream2.recv(4) == b"back"
    finally:
        proxy.close()
        server.close()


# --------------------------------------------------------------------------- faults on a cluster


def test_kill_moves_leadership_and_restart_rejoins_the_isr(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(**{"min.insync.replicas": "2"})
    cluster.create_topic("k")
    first = produce(cluster.bootstrap, "k", b"before")
    leader = cluster.leader("k", 0)

    cluster.kill(leader)
    assert not cluster.broker(leader).running
    assert cluster.leader("k", 0) not in (leader, -1)  # already elected when kill returns
    after = produce(cluster.bootstrap, "k", b"during")
    assert after.offset == first.offset + 1

    cluster.restart(leader)
    metadata = cluster.wait_for_full_isr(["k"])
    assert leader in metadata.topics[0].partitions[0].isr_nodes
    assert read_all(cluster.broker(leader).bootstrap, "k") == [b"before", b"during"]


def test_stop_is_a_controlled_shutdown(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory()
    cluster.create_topic("s")
    leader = cluster.leader("s", 0)
    cluster.stop(leader)
    # The controller moved the leadership before the broker went: no wait for a session to expire.
    assert "controlled shutdown complete" in cluster.broker(leader).stderr_since_start()
    new_leader = cluster.leader("s", 0)
    assert new_leader not in (leader, -1)
    assert produce(cluster.bootstrap, "s", b"x").offset == 0
    cluster.restart(leader)
    assert leader in cluster.wait_for_full_isr(["s"]).topics[0].partitions[0].isr_nodes


def test_a_produce_times_out_while_the_leader_is_paused_and_succeeds_after_resume(minikafka_cluster_factory):
    # A session long enough that the pause alone does not move the leadership.
    cluster = minikafka_cluster_factory(**{"zookeeper.session.timeout.ms": "20000",
                                           "replica.lag.time.max.ms": "30000"})
    cluster.create_topic("p")
    leader = cluster.leader("p", 0)
    producer = KafkaProducer(bootstrap_servers=cluster.broker(leader).bootstrap, acks="all", retries=0,
                             request_timeout_ms=1500, max_block_ms=1500)
    try:
        producer.send("p", b"warm", partition=0).get(timeout=10)
        cluster.pause(leader)
        with pytest.raises((KafkaTimeoutError, RequestTimedOutError)):
            producer.send("p", b"paused", partition=0).get(timeout=5)
        cluster.resume(leader)
        assert producer.send("p", b"resumed", partition=0).get(timeout=10).offset >= 1
    finally:
        producer.close(timeout=2)
    assert cluster.leader("p", 0) == leader


def test_a_partitioned_leader_cannot_satisfy_acks_all_and_loses_its_unacknowledged_write(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory()
    cluster.create_topic("n")
    produce(cluster.bootstrap, "n", b"acked-before")
    old = cluster.leader("n", 0)

    cluster.partition([old])  # from the other brokers and ZooKeeper
    assert set(cluster.cut_links()) >= {(old, ZOOKEEPER), (old, other_than(cluster, old))}
    majority = [cluster.broker(b) for b in cluster.ids if b != old]
    new = cluster.metadata(["n"], via=majority[0]).topics[0].partitions[0].leader_id
    assert new not in (old, -1)

    # Clients reach every broker directly (only broker-to-broker and broker-to-ZooKeeper
    # links are cut), and kafka-python would find the new leader through the others; a
    # produce sent to the minority broker itself shows what it can do: append, but never
    # acknowledge with acks=all, as no follower fetches from it and it cannot shrink the ISR
    # without ZooKeeper.
    answer = kafka_request(cluster.broker(old).bootstrap, ApiKey.PRODUCE, 2, {
        "acks": -1, "timeout_ms": 3000, "topic_data": [{"name": "n", "partition_data": [
            {"index": 0, "records": build_message_set([(None, b"minority", int(time.time() * 1000))])}]}]})
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    majority_bootstrap = ",".join(b.bootstrap for b in majority)
    produce(majority_bootstrap, "n", b"majority")

    cluster.heal()
    assert cluster.cut_links() == []
    cluster.wait_for_full_isr(["n"])
    # The old leader rejoined as a follower and truncated its unacknowledged write.
    for broker in cluster.brokers:
        assert read_all(broker.bootstrap, "n") == [b"acked-before", b"majority"]


def test_move_leader_and_a_consumer_follows(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory()
    cluster.create_topic("m")
    produce(cluster.bootstrap, "m", b"one")
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, metadata_max_age_ms=500)
    consumer.assign([TopicPartition("m", 0)])

    def poll_until(value: bytes) -> list[bytes]:
        seen, deadline = [], time.monotonic() + 30
        while value not in seen and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                seen += [r.value for r in records]
        return seen

    try:
        assert poll_until(b"one") == [b"one"]
        old = cluster.leader("m", 0)
        to = other_than(cluster, old)
        cluster.move_leader("m", 0, to=to)
        assert cluster.leader("m", 0) == to
        # The old leader now answers a fetch with NOT_LEADER_FOR_PARTITION ...
        answer = kafka_request(cluster.broker(old).bootstrap, ApiKey.FETCH, 2, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "topics": [
                {"topic": "m", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]})
        assert answer.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
        # ... and the consumer, which met it too, follows the new leader.
        produce(cluster.bootstrap, "m", b"two")
        assert poll_until(b"two") == [b"two"]
    finally:
        consumer.close()

    with pytest.raises(ControlError, match="did not elect broker 9"):
        cluster.move_leader("m", 0, to=9)
    assert cluster.leader("m", 0) == to


def test_kafkas_own_preferred_replica_election_request_moves_leadership_back(minikafka_cluster_factory):
    """What kafka-preferred-replica-election.sh writes (no minikafka field): the controller
    elects the assignment's first replica and deletes the request."""
    from kazoo.client import KazooClient

    cluster = minikafka_cluster_factory()
    cluster.create_topic("pref")
    preferred = cluster.metadata(["pref"]).topics[0].partitions[0].replica_nodes[0]
    cluster.move_leader("pref", 0, to=other_than(cluster, preferred))
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=15)
    try:
        zk.create("/admin/preferred_replica_election", b'{"version":1,"partitions":[{"topic":"pref","partition":0}]}')
        cluster.wait_until(lambda m: any(t.name == "pref" and t.partitions[0].leader_id == preferred
                                         for t in m.topics), "the preferred replica leads", 30)
        deadline = time.monotonic() + 10
        while zk.exists("/admin/preferred_replica_election") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert zk.exists("/admin/preferred_replica_election") is None
    finally:
        zk.stop()
        zk.close()
