"""A real cluster: one ZooKeeper, three minikafka processes, real clients, real faults.

Every check reads the cluster's own answers (Metadata, produce acknowledgements, the
consumed records) and the replicas' files on disk; nothing is mocked.
"""

from __future__ import annotations

import filecmp
import os
import signal
import subprocess
import sys
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import MinikafkaCluster, kafka_request

pytestmark = [pytest.mark.timeout(240), pytest.mark.zookeeper]


@pytest.fixture
def cluster(minikafka_cluster):
    return minikafka_cluster


def create_topic(cluster, name: str, partitions: int = 1, rf: int = 3, **configs) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, rf, topic_configs={k.replace("_", "."): str(v)
                                                                          for k, v in configs.items()})])
    finally:
        admin.close()
    cluster.wait_until(lambda m: _fully_replicated(m, name, partitions, rf), f"{name} has leaders and a full ISR")


def _topic(metadata, name):
    return next((t for t in metadata.topics if t.name == name), None)


def _fully_replicated(metadata, name, partitions, rf) -> bool:
    topic = _topic(metadata, name)
    return (topic is not None and len(topic.partitions) == partitions
            and all(p.leader_id >= 0 and len(p.isr_nodes) == rf for p in topic.partitions))


def partition_state(cluster, topic: str, partition: int = 0, via=None):
    for p in _topic(cluster.metadata([topic], via=via), topic).partitions:
        if p.partition_index == partition:
            return p
    raise KeyError(partition)


def produce_all(bootstrap: str, topic: str, values: list[bytes], **config) -> dict[bytes, int]:
    """acks=all, one at a time with retries; returns value -> acknowledged offset."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=20, retry_backoff_ms=200,
                             request_timeout_ms=15000, max_in_flight_requests_per_connection=1, **config)
    acked = {}
    try:
        for value in values:
            try:
                acked[value] = producer.send(topic, value).get(timeout=60).offset
            except Exception:  # not acknowledged: the check below does not count it
                pass
    finally:
        producer.close(timeout=5)
    return acked


def consume_all(bootstrap: str, topic: str, expected: int, partitions: int = 1) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    from kafka import TopicPartition

    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    records = []
    deadline = time.monotonic() + 60
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                records += [(r.offset, r.value) for r in batch]
    finally:
        consumer.close()
    return records


def _replica_differences(cluster, topic: str, partition: int) -> list[str]:
    dirs = [b.log_dir / f"{topic}-{partition}" for b in cluster.brokers]
    segments = sorted(p.name for p in dirs[0].glob("*.log"))
    differences = []
    for other in dirs[1:]:
        if sorted(p.name for p in other.glob("*.log")) != segments:
            differences.append(f"{other}: segments {sorted(p.name for p in other.glob('*.log'))} != {segments}")
            continue
        differences += [str(other / n) for n in [*segments, "leader-epoch-checkpoint"]
                        if not filecmp.cmp(dirs[0] / n, other / n, shallow=False)]
    return differences


def assert_replicas_identical(cluster, topic: str, partition: int = 0, timeout: float = 30.0) -> None:
    """Every replica's segment files hold the same bytes, and its leader-epoch-checkpoint the
    same epochs, once the followers have fetched the leader's log end (nothing is produced
    meanwhile, so the high watermark is the log end)."""
    deadline = time.monotonic() + timeout
    while (differences := _replica_differences(cluster, topic, partition)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not differences, differences


def wait_for_isr(cluster, topic: str, size: int, partition: int = 0, timeout: float = 60.0, via=None):
    return cluster.wait_until(
        lambda m: any(p.partition_index == partition and len(p.isr_nodes) == size and p.leader_id >= 0
                      for p in (_topic(m, topic).partitions if _topic(m, topic) else [])),
        f"{topic}-{partition} has an ISR of {size}", timeout, via=via)


# --------------------------------------------------------------------------- the basics


def test_metadata_from_every_broker_shows_three_replicas(cluster):
    create_topic(cluster, "rf3", partitions=3)
    for broker in cluster.brokers:
        # Each broker learns the new topic from the controller's UpdateMetadata, in its time.
        metadata = cluster.wait_until(lambda m: _fully_replicated(m, "rf3", 3, 3), "rf3 known", via=broker)
        assert sorted(b.node_id for b in metadata.brokers) == [1, 2, 3]
        assert metadata.controller_id in (1, 2, 3)
        topic = _topic(metadata, "rf3")
        assert len(topic.partitions) == 3
        for p in topic.partitions:
            assert sorted(p.replica_nodes) == [1, 2, 3]
            assert sorted(p.isr_nodes) == [1, 2, 3]
            assert p.leader_id in p.replica_nodes
    leaders = {p.leader_id for p in _topic(cluster.metadata(["rf3"]), "rf3").partitions}
    assert len(leaders) == 3  # Kafka's assignment spreads the preferred leaders


def test_acks_all_round_trip_and_identical_replicas(cluster):
    create_topic(cluster, "events")
    values = [b"v%d" % i for i in range(200)]
    acked = produce_all(cluster.bootstrap, "events", values)
    assert sorted(acked.values()) == list(range(200))
    records = consume_all(cluster.bootstrap, "events", 200)
    assert sorted(records) == sorted((offset, value) for value, offset in acked.items())
    assert_replicas_identical(cluster, "events")
    checkpoints = {(b.log_dir / "events-0" / "leader-epoch-checkpoint").read_text() for b in cluster.brokers}
    assert len(checkpoints) == 1, checkpoints


def test_not_leader_for_partition_at_a_follower(cluster):
    create_topic(cluster, "routed")
    leader = cluster.leader("routed", 0)
    follower = next(b for i, b in enumerate(cluster.brokers, 1) if i != leader)
    from minikafka.protocol.records import build_message_set

    body = {"acks": 1, "timeout_ms": 5000, "topic_data": [{"name": "routed", "partition_data": [
        {"index": 0, "records": build_message_set([(None, b"x", 1)])}]}]}
    answer = kafka_request(follower.bootstrap, ApiKey.PRODUCE, 2, body)
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_FOR_PARTITION


def test_create_topic_refuses_more_replicas_than_brokers(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        from kafka.errors import InvalidReplicationFactorError

        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic("too-many", 1, 4)])
    finally:
        admin.close()


# --------------------------------------------------------------------------- failures


def test_leader_kill_moves_leadership_and_loses_nothing(cluster):
    create_topic(cluster, "durable")
    first = produce_all(cluster.bootstrap, "durable", [b"a%d" % i for i in range(100)])
    old = partition_state(cluster, "durable")
    leader = cluster.broker(old.leader_id)
    leader.kill()
    survivors = [b for b in cluster.brokers if b is not leader]
    new = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        new = partition_state(cluster, "durable", via=survivors[0])
        if new.leader_id not in (-1, old.leader_id):
            break
        time.sleep(0.1)
    assert new.leader_id in [b for b in (1, 2, 3) if b != old.leader_id]
    bootstrap = ",".join(b.bootstrap for b in survivors)
    second = produce_all(bootstrap, "durable", [b"b%d" % i for i in range(100)])
    assert len(second) == 100
    leader.start()
    wait_for_isr(cluster, "durable", 3)
    acked = {**first, **second}
    records = consume_all(cluster.bootstrap, "durable", len(acked))
    assert sorted(records) == sorted((o, v) for v, o in acked.items())
    assert len({o for o, _ in records}) == len(records)
    assert_replicas_identical(cluster, "durable")


def test_min_insync_replicas_refuses_when_two_brokers_are_down(cluster):
    create_topic(cluster, "guarded", min_insync_replicas=2)
    leader_id = cluster.leader("guarded", 0)
    others = [b for i, b in enumerate(cluster.brokers, 1) if i != leader_id]
    for broker in others:
        broker.kill()
    wait_for_isr(cluster, "guarded", 1, timeout=30, via=cluster.broker(leader_id))
    leader = cluster.broker(leader_id)
    from minikafka.protocol.records import build_message_set

    body = {"acks": -1, "timeout_ms": 5000, "topic_data": [{"name": "guarded", "partition_data": [
        {"index": 0, "records": build_message_set([(None, b"refused", 1)])}]}]}
    answer = kafka_request(leader.bootstrap, ApiKey.PRODUCE, 2, body)
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    end = kafka_request(leader.bootstrap, ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": "guarded", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert end.topics[0].partitions[0].offset == 0  # nothing was written


def test_isr_shrinking_below_min_insync_while_waiting_answers_after_append(tmp_path, zookeeper):
    """acks=-1 accepted with a full ISR, then both followers stall: the leader drops them after
    replica.lag.time.max.ms, the high watermark reaches the message with an ISR of one, and the
    answer is NOT_ENOUGH_REPLICAS_AFTER_APPEND (written, but not as durably as asked)."""
    from minikafka.protocol.records import build_message_set

    overrides = {"replica.lag.time.max.ms": "1500", "min.insync.replicas": "2"}
    with MinikafkaCluster(tmp_path / "c", 3, overrides, zookeeper=zookeeper.connect_string) as three:
        create_topic(three, "shrinking")
        leader_id = three.leader("shrinking", 0)
        followers = [b for i, b in enumerate(three.brokers, 1) if i != leader_id]
        for follower in followers:
            os.kill(follower.process.pid, signal.SIGSTOP)
        try:
            body = {"acks": -1, "timeout_ms": 30000, "topic_data": [{"name": "shrinking", "partition_data": [
                {"index": 0, "records": build_message_set([(None, b"late", 1)])}]}]}
            answer = kafka_request(three.broker(leader_id).bootstrap, ApiKey.PRODUCE, 2, body, timeout=40)
        finally:
            for follower in followers:
                os.kill(follower.process.pid, signal.SIGCONT)
        partition = answer.responses[0].partition_responses[0]
        assert partition.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert partition.base_offset == 0


def test_controller_failover_bumps_the_epoch_and_fences_the_old_one(cluster):
    create_topic(cluster, "before")
    controller_id = cluster.controller()
    old_epoch = _controller_epoch(cluster)
    cluster.broker(controller_id).kill()
    survivors = [b for i, b in enumerate(cluster.brokers, 1) if i != controller_id]
    metadata = cluster.wait_until(lambda m: m.controller_id not in (-1, controller_id), "a new controller",
                                  via=survivors[0])
    new_id = metadata.controller_id
    assert _controller_epoch(cluster) == old_epoch + 1
    # Topics created afterwards work.
    admin = KafkaAdminClient(bootstrap_servers=",".join(b.bootstrap for b in survivors))
    try:
        admin.create_topics([NewTopic("after", 1, 2)])
    finally:
        admin.close()
    cluster.wait_until(lambda m: _fully_replicated(m, "after", 1, 2), "after is led", via=survivors[0])
    acked = produce_all(",".join(b.bootstrap for b in survivors), "after", [b"x", b"y"])
    assert sorted(acked.values()) == [0, 1]
    # A LeaderAndIsr stamped with the old controller epoch is refused.
    stale = {"controller_id": controller_id, "controller_epoch": old_epoch, "ungrouped_partition_states": [],
             "live_leaders": []}
    answer = kafka_request(cluster.broker(new_id).bootstrap, ApiKey.LEADER_AND_ISR, 0, stale)
    assert answer.error_code == ErrorCode.STALE_CONTROLLER_EPOCH


def _controller_epoch(cluster) -> int:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=cluster.zookeeper_connect)
    client.start(timeout=10)
    try:
        return int(client.get("/controller_epoch")[0])
    finally:
        client.stop()
        client.close()


def test_controlled_shutdown_moves_leadership_first(cluster):
    create_topic(cluster, "graceful", partitions=3)
    acked = produce_all(cluster.bootstrap, "graceful", [b"g%d" % i for i in range(60)])
    victim_id = cluster.leader("graceful", 0)
    victim = cluster.broker(victim_id)
    assert victim.stop() == 0  # SIGTERM: controlled shutdown, then a clean exit
    assert "controlled shutdown complete" in victim.stderr_since_start()
    survivors = [b for b in cluster.brokers if b is not victim]
    metadata = cluster.metadata(["graceful"], via=survivors[0])
    for p in _topic(metadata, "graceful").partitions:
        assert p.leader_id not in (-1, victim_id)
    records = consume_all(",".join(b.bootstrap for b in survivors), "graceful", len(acked), partitions=3)
    assert sorted(v for _, v in records) == sorted(acked)


def test_a_broker_that_loses_its_session_comes_back_as_a_follower(cluster):
    create_topic(cluster, "paused")
    leader_id = cluster.leader("paused", 0)
    follower_id = next(i for i in (1, 2, 3) if i != leader_id)
    follower = cluster.broker(follower_id)
    first = produce_all(cluster.bootstrap, "paused", [b"p%d" % i for i in range(50)])
    os.kill(follower.process.pid, signal.SIGSTOP)
    try:
        wait_for_isr(cluster, "paused", 2, timeout=60, via=cluster.broker(leader_id))
        state = partition_state(cluster, "paused", via=cluster.broker(leader_id))
        assert follower_id not in state.isr_nodes
        second = produce_all(cluster.broker(leader_id).bootstrap, "paused", [b"q%d" % i for i in range(50)])
    finally:
        os.kill(follower.process.pid, signal.SIGCONT)
    wait_for_isr(cluster, "paused", 3, timeout=60)
    acked = {**first, **second}
    records = consume_all(cluster.bootstrap, "paused", len(acked))
    assert sorted(records) == sorted((o, v) for v, o in acked.items())
    assert_replicas_identical(cluster, "paused")


def test_single_broker_starts_without_zookeeper(minikafka_broker):
    answer = kafka_request(minikafka_broker.bootstrap, ApiKey.METADATA, 1, {"topics": None})
    assert [b.node_id for b in answer.brokers] == [0]


# --------------------------------------------------------------------------- every client


def _produce_confluent(bootstrap: str, topic: str, values: list[bytes], stop=None) -> dict[bytes, int]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000,
                         "retry.backoff.ms": 100, "enable.idempotence": False, "max.in.flight": 1,
                         "topic.metadata.refresh.interval.ms": 500})
    acked = {}

    def delivered(err, msg):
        if err is None:
            acked[msg.value()] = msg.offset()

    for value in values:
        if stop is not None and stop.is_set():
            break
        producer.produce(topic, value, on_delivery=delivered)
        producer.flush(60)
    producer.flush(60)
    return acked


def _produce_aiokafka(bootstrap: str, topic: str, values: list[bytes], stop=None) -> dict[bytes, int]:
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def run() -> dict[bytes, int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=15000,
                                    retry_backoff_ms=200, enable_idempotence=False)
        await producer.start()
        acked = {}
        try:
            for value in values:
                if stop is not None and stop.is_set():
                    break
                try:
                    metadata = await asyncio.wait_for(producer.send_and_wait(topic, value), 60)
                    acked[value] = metadata.offset
                except Exception:
                    pass
        finally:
            await producer.stop()
        return acked

    return asyncio.run(run())


def _produce_kafka_python(bootstrap: str, topic: str, values: list[bytes], stop=None) -> dict[bytes, int]:
    if stop is None:
        return produce_all(bootstrap, topic, values)
    acked = {}
    for value in values:
        if stop.is_set():
            break
        acked.update(produce_all(bootstrap, topic, [value]))
    return acked


PRODUCERS = {"kafka-python": _produce_kafka_python, "confluent-kafka": _produce_confluent,
             "aiokafka": _produce_aiokafka}


@pytest.mark.parametrize("client", [*PRODUCERS, "kcat"])
def test_every_client_produces_with_acks_all_and_consumes(cluster, client):
    create_topic(cluster, "clients")
    values = [b"%s-%d" % (client.encode(), i) for i in range(50)]
    if client == "kcat":
        # kcat reports no per-message offsets: what it wrote must all be read back, in order.
        subprocess.run(["kcat", "-P", "-b", cluster.bootstrap, "-t", "clients", "-X", "acks=all"],
                       input=b"\n".join(values) + b"\n", check=True, timeout=60)
        out = subprocess.run(["kcat", "-C", "-b", cluster.bootstrap, "-t", "clients", "-o", "beginning", "-e",
                              "-f", "%o %s\n"], capture_output=True, check=True, timeout=60).stdout
        assert [line.split(b" ", 1) for line in out.splitlines()] == [[b"%d" % i, v] for i, v in enumerate(values)]
        return
    acked = PRODUCERS[client](cluster.bootstrap, "clients", values)
    assert sorted(acked.values()) == list(range(50))
    records = consume_all(cluster.bootstrap, "clients", 50)
    assert sorted(records) == sorted((o, v) for v, o in acked.items())


@pytest.mark.parametrize("client", list(PRODUCERS))
def test_leader_kill_while_each_client_produces(cluster, client):
    """kill -9 of the leader mid-stream: the client carries on after a retriable error, every
    acknowledged value is read exactly once at the offset its ack named, and the old leader
    comes back as a follower whose files end up identical to the new leader's."""
    import threading

    create_topic(cluster, "stream")
    old_leader = cluster.leader("stream", 0)
    stop = threading.Event()
    result = {}
    values = [b"%s-%d" % (client.encode(), i) for i in range(100_000)]
    worker = threading.Thread(target=lambda: result.update(PRODUCERS[client](cluster.bootstrap, "stream", values, stop)))
    worker.start()
    try:
        cluster.wait_until(lambda m: _end_offset(cluster, "stream", old_leader) >= 30, "30 messages in", 60,
                           via=cluster.broker(old_leader))
        cluster.broker(old_leader).kill()
        survivor = next(b for i, b in enumerate(cluster.brokers, 1) if i != old_leader)
        state = cluster.wait_until(lambda m: leader_in(m, "stream") not in (None, -1, old_leader),
                                   "a new leader", 60, via=survivor)
        new_leader = partition_state_in(state, "stream").leader_id
        cluster.wait_until(lambda m: _end_offset(cluster, "stream", new_leader) >= 60, "30 more messages", 90,
                           via=survivor)
    finally:
        stop.set()
        worker.join(120)
    assert not worker.is_alive()
    # The new leader took over at leader epoch 0 + 1, recorded where its log ended then.
    assert _epochs(cluster.broker(new_leader), "stream")[-1][0] == 1
    cluster.broker(old_leader).start()
    wait_for_isr(cluster, "stream", 3, timeout=90)
    acked = result
    # The client carried on: values were acknowledged at offsets the new leader wrote. The log
    # end is no count of acks: a value the old leader had replicated but not committed when it
    # died stays in the log (at the new leader's first offsets) while its send failed.
    takeover = _epochs(cluster.broker(new_leader), "stream")[-1][1]
    assert len(acked) >= 30 and any(offset >= takeover for offset in acked.values())
    records = consume_all(cluster.bootstrap, "stream", len(acked))
    offsets = {}
    for offset, value in records:
        assert offset not in offsets, f"offset {offset} read twice"
        offsets[offset] = value
    for value, offset in acked.items():
        assert offsets.get(offset) == value, f"acknowledged {value!r} at {offset}, read {offsets.get(offset)!r}"
    assert_replicas_identical(cluster, "stream")


def _epochs(broker, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    """The replica's leader-epoch-checkpoint: version, count, then "epoch start_offset" lines."""
    lines = (broker.log_dir / f"{topic}-{partition}" / "leader-epoch-checkpoint").read_text().splitlines()
    return [tuple(map(int, line.split())) for line in lines[2:]]


def partition_state_in(metadata, topic: str, partition: int = 0):
    """The partition in a Metadata answer, or None while the broker does not know it yet."""
    topic_metadata = _topic(metadata, topic)
    if topic_metadata is None:
        return None
    return next((p for p in topic_metadata.partitions if p.partition_index == partition), None)


def leader_in(metadata, topic: str, partition: int = 0) -> int | None:
    state = partition_state_in(metadata, topic, partition)
    return None if state is None else state.leader_id


def _end_offset(cluster, topic: str, broker_id: int) -> int:
    answer = kafka_request(cluster.broker(broker_id).bootstrap, ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    partition = answer.topics[0].partitions[0]
    return partition.offset if partition.error_code == 0 else -1


# --------------------------------------------------------------------------- admin, groups, elections


def test_delete_topic_removes_every_replica(cluster):
    create_topic(cluster, "doomed", partitions=2)
    produce_all(cluster.bootstrap, "doomed", [b"x"])
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.delete_topics(["doomed"], timeout_ms=30000)
    finally:
        admin.close()
    for broker in cluster.brokers:
        cluster.wait_until(lambda m: _topic(m, "doomed") is None, "doomed gone", via=broker)
    deadline = time.monotonic() + 30
    while any(list(b.log_dir.glob("doomed-*")) for b in cluster.brokers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for b in cluster.brokers for p in b.log_dir.glob("doomed-*")]


def test_a_consumer_group_commits_on_the_cluster(cluster):
    create_topic(cluster, "work", partitions=2)
    acked = produce_all(cluster.bootstrap, "work", [b"w%d" % i for i in range(20)])
    consumer = KafkaConsumer("work", bootstrap_servers=cluster.bootstrap, group_id="workers",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000)
    seen = []
    try:
        for record in consumer:
            seen.append(record.value)
            if len(seen) == len(acked):
                break
        consumer.commit()
        from kafka import TopicPartition

        committed = sum(consumer.committed(TopicPartition("work", p)) or 0 for p in (0, 1))
    finally:
        consumer.close()
    assert sorted(seen) == sorted(acked)
    assert committed == len(acked)


@pytest.mark.parametrize("unclean", [False, True])
def test_leader_election_when_the_whole_isr_is_dead(tmp_path, zookeeper, unclean):
    """RF 2: the follower is stopped (out of the ISR), then the leader dies. Clean: the
    partition stays offline until the ISR member returns. Unclean: the stale replica leads at
    a new epoch."""
    overrides = {"unclean.leader.election.enable": str(unclean).lower(), "replica.lag.time.max.ms": "2000"}
    with MinikafkaCluster(tmp_path / "c", 2, overrides, zookeeper=zookeeper.connect_string) as two:
        create_topic(two, "fragile", rf=2)
        leader_id = two.leader("fragile", 0)
        follower_id = 3 - leader_id
        two.broker(follower_id).stop()
        wait_for_isr(two, "fragile", 1, via=two.broker(leader_id))
        produce_all(two.broker(leader_id).bootstrap, "fragile", [b"only-on-the-leader"])
        two.broker(leader_id).kill()
        two.broker(follower_id).start()
        if unclean:
            two.wait_until(lambda m: leader_in(m, "fragile") == follower_id,
                           "the stale replica leads", via=two.broker(follower_id))
            assert _epochs(two.broker(follower_id), "fragile")[-1][0] >= 1
        else:
            follower = two.broker(follower_id)
            two.wait_until(lambda m: len(m.brokers) == 1 and leader_in(m, "fragile") == -1,
                           "the partition offline", via=follower)
            time.sleep(1)  # a window for a wrong election to show; none may happen
            assert partition_state_in(two.metadata(["fragile"], via=follower), "fragile").leader_id == -1
            two.broker(leader_id).start()
            two.wait_until(lambda m: leader_in(m, "fragile") == leader_id,
                           "the ISR member leads again", via=two.broker(follower_id))
            records = consume_all(two.bootstrap, "fragile", 1)
            assert [v for _, v in records] == [b"only-on-the-leader"]


def _elect(cluster, election_type: int, topic: str) -> ErrorCode:
    """ElectLeaders for partition 0 of ``topic`` through kafka-python (0 preferred, 1 unclean),
    sent to the controller; its error for the partition."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        answer = admin.elect_leaders(election_type, {topic: [0]}, raise_errors=False)
    finally:
        admin.close()
    ((result,),) = [r.partition_result for r in answer.replica_election_results]
    return ErrorCode(result.error_code)


def test_unclean_election_on_request_elects_the_stale_replica_only_then(tmp_path, zookeeper):
    """ElectLeaders with the UNCLEAN type on a 3-broker cluster that does not elect unclean
    leaders by itself: nothing to do while the partition has a leader, nobody to elect while
    every replica is down, and the out-of-sync replica once it is back (its log then wins:
    what only the dead leader had is gone, as Kafka's unclean election loses it)."""
    overrides = {"unclean.leader.election.enable": "false", "replica.lag.time.max.ms": "2000"}
    with MinikafkaCluster(tmp_path / "c", 3, overrides, zookeeper=zookeeper.connect_string) as three:
        controller = three.controller()
        leader_id, stale_id = [b for b in three.ids if b != controller]
        answer = kafka_request(three.broker(controller).bootstrap, ApiKey.CREATE_TOPICS, 4, {"topics": [
            {"name": "stale", "num_partitions": -1, "replication_factor": -1, "configs": [],
             "assignments": [{"partition_index": 0, "broker_ids": [leader_id, stale_id]}]}], "timeout_ms": 30000})
        assert answer.topics[0].error_code == ErrorCode.NONE
        three.wait_for_full_isr(["stale"])
        produce_all(three.bootstrap, "stale", [b"replicated"])
        assert _elect(three, 1, "stale") == ErrorCode.ELECTION_NOT_NEEDED

        three.broker(stale_id).stop()
        wait_for_isr(three, "stale", 1)
        produce_all(three.bootstrap, "stale", [b"only-on-the-leader"])
        three.broker(leader_id).kill()
        three.wait_until(lambda m: leader_in(m, "stale") == -1, "the partition offline")
        assert _elect(three, 1, "stale") == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        assert _elect(three, 0, "stale") == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE

        three.broker(stale_id).start()
        three.wait_until(lambda m: len(m.brokers) == 2, "the stale replica's broker back")
        assert leader_in(three.metadata(["stale"]), "stale") == -1  # not elected by itself
        assert _elect(three, 1, "stale") == ErrorCode.NONE
        three.wait_until(lambda m: leader_in(m, "stale") == stale_id, "the stale replica leading")
        assert [v for _, v in consume_all(three.bootstrap, "stale", 1)] == [b"replicated"]


def test_minikafka_cluster_command(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "minikafka.broker", "cluster", "--brokers", "2",
                                "--base-port", "0", "--log-dir", str(tmp_path / "data")],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("minikafka cluster ready: bootstrap.servers="), line
        bootstrap = line.split("bootstrap.servers=")[1].split()[0]
        deadline = time.monotonic() + 30
        while True:  # the first broker hears of the second from the controller, in its time
            answer = kafka_request(bootstrap.split(",")[0], ApiKey.METADATA, 1, {"topics": None})
            if len(answer.brokers) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert sorted(b.node_id for b in answer.brokers) == [1, 2]
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["broker-1", "broker-2", "zookeeper"]
