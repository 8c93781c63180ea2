"""AlterReplicaLogDirs (KIP-113) against a real broker with two log dirs: kafka-python's
admin moves a replica with data while a producer writes to it, DescribeLogDirs shows the
future replica meanwhile, and every acknowledged value is read back, once, in order, at the
offsets it was given; then back again; the refused cases; a kill -9 in the middle of a move."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import MinikafkaBroker, kafka_request

pytestmark = pytest.mark.timeout(240)


def where(admin: KafkaAdminClient, topic: str) -> dict[tuple[int, bool], str]:
    """(partition, is future) -> the log dir DescribeLogDirs lists it in."""
    (described,) = admin.describe_log_dirs()
    found = {}
    for result in described["log_dirs"]:
        for entry in result["topics"]:
            if entry["name"] == topic:
                for partition in entry["partitions"]:
                    found[(partition["partition_index"], partition["is_future_key"])] = result["log_dir"]
    return found


def wait_moved(admin, topic, partition, destination, timeout=60.0):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = where(admin, topic)
        if found.get((partition, False)) == destination and (partition, True) not in found:
            return
        time.sleep(0.1)
    raise AssertionError(f"{topic}-{partition} not moved to {destination}: {where(admin, topic)}")


def read_all(bootstrap, topic, partition=0):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    got = []
    while consumer.position(tp) < end:
        for records in consumer.poll(timeout_ms=2000).values():
            got += [(r.offset, r.value) for r in records]
    consumer.close()
    return got


def produce_until(bootstrap, topic, stop, acknowledged, pause=0.0):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    seq = 0
    while not stop.is_set():
        if pause and seq % 50 == 0:
            time.sleep(pause)
        value = b"v%08d" % seq
        producer.send(topic, value, partition=0).add_callback(
            lambda metadata, value=value: acknowledged.append((metadata.offset, value)))
        seq += 1
        if seq % 200 == 0:
            producer.flush()
    producer.flush()
    producer.close()


@pytest.fixture
def two_dirs(tmp_path):
    with MinikafkaBroker(tmp_path / "broker", {"log.segment.bytes": "65536"}, log_dirs=2) as broker:
        yield broker


def test_a_replica_moves_and_back_while_a_producer_writes(two_dirs):
    broker = two_dirs
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    topic = "moving"
    admin.create_topics([NewTopic(topic, 1, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(3000):
        producer.send(topic, b"x%06d" % i + b"." * 200, partition=0)
    producer.flush()
    producer.close()
    home = where(admin, topic)[(0, False)]
    (other,) = {str(d) for d in broker.log_dirs} - {home}
    broker_id = admin.describe_log_dirs()[0]["broker"]
    tpr = TopicPartitionReplica(topic, 0, broker_id)

    # The kafka-python integration suite's case: to where it is is a no-op.
    assert admin.alter_replica_log_dirs({tpr: home}) == {tpr: NoError}
    assert where(admin, topic) == {(0, False): home}

    acknowledged: list[tuple[int, bytes]] = []
    for destination in (other, home):
        stop = threading.Event()
        writer = threading.Thread(target=produce_until, args=(broker.bootstrap, topic, stop, acknowledged))
        writer.start()
        try:
            assert admin.alter_replica_log_dirs({tpr: destination}) == {tpr: NoError}
            wait_moved(admin, topic, 0, destination)
        finally:
            stop.set()
            writer.join()
        assert (Path(destination) / f"{topic}-0").is_dir()
    got = read_all(broker.bootstrap, topic)
    assert [offset for offset, _ in got] == list(range(len(got)))
    assert got[:3000] == [(i, b"x%06d" % i + b"." * 200) for i in range(3000)]
    assert sorted(acknowledged) == [entry for entry in got[3000:] if entry in set(acknowledged)]
    assert set(acknowledged) <= set(got) and len(acknowledged) > 0
    # Exactly one directory of the partition is left, in the dir it was moved back to.
    assert sorted(p.name for d in broker.log_dirs for p in d.iterdir() if p.name.startswith(topic)) == [f"{topic}-0"]
    assert (Path(home) / f"{topic}-0").is_dir()
    admin.close()


def _set_move_rate(broker, broker_id: int, rate: int | None) -> None:
    """IncrementalAlterConfigs of this broker's replica.alter.log.dirs.io.max.bytes.per.second:
    SET, or DELETE for None (as kafka-reassign-partitions.sh --verify clears it)."""
    answer = kafka_request(broker.bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, {"validate_only": False, "resources": [{
        "resource_type": 4, "resource_name": str(broker_id), "configs": [{
            "name": "replica.alter.log.dirs.io.max.bytes.per.second", "config_operation": 1 if rate is None else 0,
            "value": None if rate is None else str(rate)}]}]})
    assert answer.responses[0].error_code == ErrorCode.NONE, answer.responses[0].error_message


def test_the_copy_rate_is_a_dynamic_config(two_dirs):
    """Set while the broker runs, the rate holds a move back: its future stays a fraction of
    the replica, within what the rate allows for the time passed. Deleted, the move completes."""
    broker = two_dirs
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("paced", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, batch_size=4096)
    for i in range(3000):
        producer.send("paced", b"p%06d" % i + b"." * 500, partition=0)
    producer.flush()
    producer.close()
    home = where(admin, "paced")[(0, False)]
    (other,) = {str(d) for d in broker.log_dirs} - {home}
    size = sum(p.stat().st_size for p in (Path(home) / "paced-0").glob("*.log"))
    broker_id = admin.describe_log_dirs()[0]["broker"]
    rate = 2048
    _set_move_rate(broker, broker_id, rate)
    tpr = TopicPartitionReplica("paced", 0, broker_id)
    began = time.monotonic()
    assert admin.alter_replica_log_dirs({tpr: other}) == {tpr: NoError}
    time.sleep(2)
    futures = [d for d in Path(other).iterdir() if d.name.endswith("-future")]
    copied = sum(p.stat().st_size for d in futures for p in d.glob("*.log"))
    elapsed = time.monotonic() - began
    # One chunk is whole batches (4 kB here) and is paid for after it is copied.
    assert len(futures) == 1 and copied <= rate * elapsed + 2 * 4096 + 1024 < size, (copied, size)
    assert where(admin, "paced") == {(0, False): home, (0, True): other}
    _set_move_rate(broker, broker_id, None)
    wait_moved(admin, "paced", 0, other)
    assert [offset for offset, _ in read_all(broker.bootstrap, "paced")] == list(range(3000))
    admin.close()


def test_refused_moves(two_dirs):
    broker = two_dirs
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("stays", 1, 1)])
    home = where(admin, "stays")[(0, False)]
    (other,) = {str(d) for d in broker.log_dirs} - {home}
    answer = kafka_request(broker.bootstrap, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
        {"path": str(broker.work_dir / "nowhere"), "topics": [{"name": "stays", "partitions": [0]}]},
        {"path": other, "topics": [{"name": "stays", "partitions": [5]}, {"name": "absent", "partitions": [0]}]},
    ]})
    errors = {(t.topic_name, p.partition_index): p.error_code for t in answer.results for p in t.partitions}
    assert errors == {("stays", 0): ErrorCode.LOG_DIR_NOT_FOUND, ("stays", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                      ("absent", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert where(admin, "stays") == {(0, False): home}
    # A topic made after its partition was asked for is made in the dir asked for.
    kafka_request(broker.bootstrap, ApiKey.ALTER_REPLICA_LOG_DIRS, 0, {"dirs": [
        {"path": other, "topics": [{"name": "later", "partitions": [0]}]}]})
    admin.create_topics([NewTopic("later", 1, 1)])
    assert where(admin, "later") == {(0, False): other}
    admin.close()


def test_kill_9_in_the_middle_of_a_move_then_restart(tmp_path):
    # The copy is throttled to 256 KiB/s, so the move of ~1.5 MB lasts ~6 s: killed after 1 s.
    broker = MinikafkaBroker(tmp_path / "broker", {"log.segment.bytes": "262144",
                                                   "replica.alter.log.dirs.io.max.bytes.per.second": "262144"},
                             log_dirs=2)
    with broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic("killed", 1, 1)])
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        values = [b"k%06d" % i + b"." * 500 for i in range(3000)]
        offsets = [producer.send("killed", value, partition=0) for value in values]
        producer.flush()
        offsets = [future.get().offset for future in offsets]
        producer.close()
        home = where(admin, "killed")[(0, False)]
        (other,) = {str(d) for d in broker.log_dirs} - {home}
        tpr = TopicPartitionReplica("killed", 0, admin.describe_log_dirs()[0]["broker"])
        assert admin.alter_replica_log_dirs({tpr: other}) == {tpr: NoError}
        deadline = time.monotonic() + 30
        while where(admin, "killed").get((0, True)) != other:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        acknowledged: list[tuple[int, bytes]] = []
        stop = threading.Event()
        writer = threading.Thread(target=produce_until, args=(broker.bootstrap, "killed", stop, acknowledged, 0.05))
        writer.start()
        time.sleep(1)  # some of it copied, and written meanwhile
        admin.close()
        broker.kill()
        seen = list(acknowledged)
        futures = [p for p in Path(other).iterdir() if p.name.endswith("-future")]
        assert len(futures) == 1 and any(futures[0].iterdir())
        broker.start()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        # Resumed, as Kafka resumes: one replica served meanwhile, the future listed beside it.
        assert where(admin, "killed") == {(0, False): home, (0, True): other}
        stop.set()  # the producer has written to the restarted broker too
        writer.join()
        got = read_all(broker.bootstrap, "killed")
        assert got[:3000] == list(zip(offsets, values)) and seen and set(seen) <= set(acknowledged) <= set(got)
        assert [offset for offset, _ in got] == list(range(len(got)))
        wait_moved(admin, "killed", 0, other, timeout=120)
        assert read_all(broker.bootstrap, "killed") == got
        assert sorted(p.name for d in broker.log_dirs for p in d.iterdir() if p.name.startswith("killed")) == ["killed-0"]
        admin.close()
