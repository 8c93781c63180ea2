"""Faults on demand with real clients against a real ``minikafka serve --test-control`` process:
injected errors as kafka-python, confluent-kafka and aiokafka meet them (retried, or handed
to the application with their code), delays, pause/resume, and no control channel on a broker
not started for tests."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidTimestampError, KafkaTimeoutError, RequestTimedOutError

from minikafka.testing import ControlError, MinikafkaBroker

NOT_LEADER = "NOT_LEADER_OR_FOLLOWER"  # code 6's current name, as the broker reports it


@pytest.fixture(autouse=True)
def no_leftover_faults(broker):
    broker.clear_faults()
    yield
    broker.clear_faults()


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        return [(record.offset, record.value) for record in consumer]
    finally:
        consumer.close()


def served_to(broker: MinikafkaBroker, client_prefix: str) -> list[list[str]]:
    """The errors of each faulted request from a client whose id starts with the prefix."""
    return [[error["error"] for error in entry["errors"]] for entry in broker.faults()["served"]
            if (entry["client_id"] or "").startswith(client_prefix)]


# ------------------------------------------------------------------------------ kafka-python


def test_kafka_python_producer_retries_injected_not_leader_and_writes_once(broker, topic, caplog):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id=f"kp-{topic}",
                             retries=5, retry_backoff_ms=20)
    try:
        assert producer.send(topic, b"before").get(timeout=30).offset == 0
        broker.inject("Produce", ["NOT_LEADER_FOR_PARTITION", 6], topic=topic, partition=0)
        with caplog.at_level(logging.WARNING, logger="kafka.producer.sender"):
            assert producer.send(topic, b"retried").get(timeout=30).offset == 1
    finally:
        producer.close()
    seen = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(seen) == 2 and all("NotLeaderForPartitionError" in message for message in seen), seen
    assert served_to(broker, f"kp-{topic}") == [[NOT_LEADER], [NOT_LEADER]]
    assert broker.faults()["pending"] == []
    assert read_all(broker.bootstrap, topic) == [(0, b"before"), (1, b"retried")]


def test_kafka_python_gets_a_non_retriable_error_with_its_code(broker, topic):
    # Not idempotent: kafka-python's idempotent producer takes any non-retriable produce error
    # as fatal to itself, and this test goes on sending after one.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=5, retry_backoff_ms=20,
                             enable_idempotence=False)
    try:
        producer.send(topic, b"before").get(timeout=30)
        broker.inject("Produce", ["INVALID_TIMESTAMP"])
        with pytest.raises(InvalidTimestampError) as failed:
            producer.send(topic, b"refused").get(timeout=30)
        assert failed.value.errno == 32
        assert producer.send(topic, b"after").get(timeout=30).offset == 1
    finally:
        producer.close()
    assert read_all(broker.bootstrap, topic) == [(0, b"before"), (1, b"after")]


def test_kafka_python_consumer_sees_injected_fetch_errors_then_reads(broker, topic):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(topic, b"v").get(timeout=30)
    producer.close()
    broker.inject("Fetch", ["NOT_LEADER_FOR_PARTITION", "UNKNOWN_TOPIC_OR_PARTITION"], topic=topic)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id=f"kc-{topic}",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=20000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        assert next(consumer).value == b"v"
    finally:
        consumer.close()
    assert served_to(broker, f"kc-{topic}") == [[NOT_LEADER], ["UNKNOWN_TOPIC_OR_PARTITION"]]


def test_a_delayed_produce_is_answered_after_a_later_one_without_failing(broker, topic):
    slow = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    fast = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    try:
        slow.send(topic, b"first").get(timeout=30)
        fast.partitions_for(topic)
        broker.delay("Produce", ms=3000)
        late = slow.send(topic, b"slow")
        deadline = time.monotonic() + 30
        while broker.faults()["pending"]:  # until the broker holds the slow request
            assert time.monotonic() < deadline, "the delayed produce never reached the broker"
            time.sleep(0.01)
        assert fast.send(topic, b"fast").get(timeout=30).offset == 1
        assert late.get(timeout=30).offset == 2  # slower, not failed
    finally:
        slow.close()
        fast.close()
    assert read_all(broker.bootstrap, topic) == [(0, b"first"), (1, b"fast"), (2, b"slow")]


# ------------------------------------------------------------------------------ confluent-kafka


def _confluent_deliver(producer, topic: str, value: bytes):
    reports = []
    producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(30) == 0
    [(error, message)] = reports
    return error, message


def test_confluent_kafka_producer_retries_injected_not_leader_and_writes_once(broker, topic):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": f"ck-{topic}",
                         "retry.backoff.ms": 20})
    error, message = _confluent_deliver(producer, topic, b"before")
    assert error is None and message.offset() == 0
    broker.inject("Produce", ["NOT_LEADER_FOR_PARTITION", 6])
    error, message = _confluent_deliver(producer, topic, b"retried")
    assert error is None and message.offset() == 1
    assert served_to(broker, f"ck-{topic}") == [[NOT_LEADER], [NOT_LEADER]]
    assert read_all(broker.bootstrap, topic) == [(0, b"before"), (1, b"retried")]


def test_confluent_kafka_gets_a_non_retriable_error_with_its_code(broker, topic):
    from confluent_kafka import KafkaError, Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "retry.backoff.ms": 20})
    assert _confluent_deliver(producer, topic, b"before")[0] is None
    broker.inject("Produce", [32])
    error, _ = _confluent_deliver(producer, topic, b"refused")
    assert error is not None and error.code() == KafkaError.INVALID_TIMESTAMP == 32
    error, message = _confluent_deliver(producer, topic, b"after")
    assert error is None and message.offset() == 1
    assert read_all(broker.bootstrap, topic) == [(0, b"before"), (1, b"after")]


def test_confluent_kafka_consumer_waits_out_an_unavailable_coordinator(broker, topic):
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    assert _confluent_deliver(producer, topic, b"v")[0] is None
    broker.inject("FindCoordinator", ["GROUP_COORDINATOR_NOT_AVAILABLE"] * 2)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                         "client.id": f"cc-{topic}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        message = None
        deadline = time.monotonic() + 60
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1)
        assert message is not None and message.error() is None and message.value() == b"v"
    finally:
        consumer.close()
    assert served_to(broker, f"cc-{topic}")[:2] == [["COORDINATOR_NOT_AVAILABLE"]] * 2


# ------------------------------------------------------------------------------ aiokafka


def test_aiokafka_producer_retries_injected_not_leader_and_writes_once(broker, topic):
    from aiokafka import AIOKafkaProducer

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, client_id=f"aio-{topic}",
                                    retry_backoff_ms=20, request_timeout_ms=30000)
        await producer.start()
        try:
            assert (await producer.send_and_wait(topic, b"before", partition=0)).offset == 0
            broker.inject("Produce", ["NOT_LEADER_FOR_PARTITION", 6])
            return (await producer.send_and_wait(topic, b"retried", partition=0)).offset
        finally:
            await producer.stop()

    assert asyncio.run(asyncio.wait_for(run(), 60)) == 1
    assert served_to(broker, f"aio-{topic}") == [[NOT_LEADER], [NOT_LEADER]]
    assert read_all(broker.bootstrap, topic) == [(0, b"before"), (1, b"retried")]


def test_aiokafka_gets_a_non_retriable_error_with_its_code(broker, topic):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import InvalidTimestampError as AioInvalidTimestamp

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, retry_backoff_ms=20)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"before", partition=0)
            broker.inject("Produce", ["INVALID_TIMESTAMP"])
            with pytest.raises(AioInvalidTimestamp) as failed:
                await producer.send_and_wait(topic, b"refused", partition=0)
            assert failed.value.errno == 32
            return (await producer.send_and_wait(topic, b"after", partition=0)).offset
        finally:
            await producer.stop()

    assert asyncio.run(asyncio.wait_for(run(), 60)) == 1
    assert read_all(broker.bootstrap, topic) == [(0, b"before"), (1, b"after")]


# ------------------------------------------------------------------------------ pause / resume


def test_a_produce_times_out_during_a_pause_and_succeeds_after_resume(minikafka_broker, topic):
    producer = KafkaProducer(bootstrap_servers=minikafka_broker.bootstrap, retries=0,
                             request_timeout_ms=1500, delivery_timeout_ms=3000, linger_ms=0)
    try:
        assert producer.send(topic, b"before").get(timeout=30).offset == 0
        minikafka_broker.pause()
        assert minikafka_broker.paused
        # The request times out in the client (how depends on where it was waiting).
        with pytest.raises((RequestTimedOutError, KafkaTimeoutError)):
            producer.send(topic, b"during").get(timeout=30)
        minikafka_broker.resume()
        after = producer.send(topic, b"after").get(timeout=30)
    finally:
        producer.close()
    values = read_all(minikafka_broker.bootstrap, topic)
    assert (after.offset, b"after") in values and values[0] == (0, b"before")


def test_a_paused_broker_stops_cleanly_and_refuses_fault_commands(minikafka_broker):
    minikafka_broker.pause()
    with pytest.raises(ControlError, match="paused"):
        minikafka_broker.inject("Produce", [6])
    assert minikafka_broker.stop() == 0  # continued first, then SIGTERM: a clean exit


# ------------------------------------------------------------------------------ off by default


def test_no_control_channel_without_test_mode(tmp_path, topic):
    with MinikafkaBroker(tmp_path, test_control=False) as plain:
        assert plain.control_address is None
        assert "test control" not in plain.stdout_path.read_text()
        with pytest.raises(ControlError, match="without test control"):
            plain.inject("Produce", ["NOT_LEADER_FOR_PARTITION"])
        # The Kafka listener does not speak the control protocol: the line is a bad frame and
        # only that connection closes.
        host, port = plain.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b'{"op": "inject", "api": "Produce", "errors": [6]}\n')
            assert sock.recv(1024) == b""
        producer = KafkaProducer(bootstrap_servers=plain.bootstrap)
        try:
            assert producer.send(topic, b"fine").get(timeout=30).offset == 0
        finally:
            producer.close()
