"""Idempotent producers against a real broker process: kafka-python, confluent-kafka and
aiokafka with idempotence on store each record once, also when the broker's responses are
lost and they retry (fault injection); producer state survives kill -9."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.record_batch import build_record_batch
from minikafka.testing import kafka_request

pytestmark = pytest.mark.timeout(120)

VALUES = [f"value-{i}".encode() for i in range(40)]


def kafka_python_produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
    try:
        futures = [producer.send(topic, value, partition=0) for value in values]
        producer.flush(60)
        return [future.get(10).offset for future in futures]
    finally:
        producer.close(10)


def confluent_produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    offsets: dict[int, int] = {}

    def report(i: int):
        def delivered(error, message):
            assert error is None, error
            offsets[i] = message.offset()
        return delivered

    for i, value in enumerate(values):
        producer.produce(topic, value, partition=0, on_delivery=report(i))
        producer.poll(0)
    assert producer.flush(60) == 0
    return [offsets[i] for i in range(len(values))]


def aiokafka_produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
        await producer.start()
        try:
            sent = [await producer.send(topic, value, partition=0) for value in values]
            return [(await future).offset for future in sent]
        finally:
            await producer.stop()

    return asyncio.run(run())


PRODUCERS = {"kafka-python": kafka_python_produce, "confluent-kafka": confluent_produce,
             "aiokafka": aiokafka_produce}


def stored_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    values, deadline = [], time.monotonic() + 30
    try:
        while len(values) < end and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("client", sorted(PRODUCERS))
def test_each_record_is_stored_once(broker, topic, client):
    offsets = PRODUCERS[client](broker.bootstrap, topic, VALUES)
    assert offsets == list(range(len(VALUES)))
    assert stored_values(broker.bootstrap, topic) == VALUES


@pytest.mark.parametrize("client", sorted(PRODUCERS))
def test_a_batch_retried_after_its_response_was_lost_is_stored_once_and_acknowledged_with_its_offsets(
        minikafka_broker, topic, client):
    """The broker appends the batch, the response never arrives, the client retries the same
    sequence numbers: the retry is answered with the offsets of the first append."""
    PRODUCERS[client](minikafka_broker.bootstrap, topic, [b"first"])
    minikafka_broker.drop_responses("Produce", topic=topic, count=2)
    offsets = PRODUCERS[client](minikafka_broker.bootstrap, topic, VALUES)
    assert [fault["drop_response"] for fault in minikafka_broker.faults()["served"]] == [True, True]
    assert offsets == list(range(1, len(VALUES) + 1))
    assert stored_values(minikafka_broker.bootstrap, topic) == [b"first"] + VALUES


def produce_batch(bootstrap: str, topic: str, producer_id: int, sequence: int, count: int = 1, epoch: int = 0):
    """One idempotent batch of ``count`` records in a Produce v3 of its own: (error, base offset)."""
    batch = build_record_batch([(None, b"s%d" % (sequence + i), int(time.time() * 1000), ()) for i in range(count)],
                               producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
    answer = kafka_request(bootstrap, ApiKey.PRODUCE, 3, {
        "transactional_id": None, "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}]})
    slot = answer.responses[0].partition_responses[0]
    return ErrorCode(slot.error_code), slot.base_offset


def test_producer_state_survives_kill_9(minikafka_broker, topic):
    bootstrap = minikafka_broker.bootstrap
    producer_id = kafka_request(bootstrap, ApiKey.INIT_PRODUCER_ID, 0,
                                {"transactional_id": None, "transaction_timeout_ms": 60000}).producer_id
    kafka_request(bootstrap, ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
    assert [produce_batch(bootstrap, topic, producer_id, seq, 2) for seq in (0, 2, 4)] == [
        (ErrorCode.NONE, 0), (ErrorCode.NONE, 2), (ErrorCode.NONE, 4)]
    minikafka_broker.restart(clean=False)  # SIGKILL, then a start that recovers
    bootstrap = minikafka_broker.bootstrap
    # Recovery rebuilt the producer's state: its last batch is a duplicate, a gap is refused,
    # the next sequence is taken.
    assert produce_batch(bootstrap, topic, producer_id, 4, 2) == (ErrorCode.NONE, 4)
    assert produce_batch(bootstrap, topic, producer_id, 7)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce_batch(bootstrap, topic, producer_id, 6) == (ErrorCode.NONE, 6)
    assert stored_values(bootstrap, topic) == [b"s%d" % i for i in range(7)]
