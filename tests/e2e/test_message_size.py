"""``message.max.bytes`` at its exact boundary, with each client in its default configuration.

Kafka measures a magic 0/1 message as its log entry: the 12-byte offset+size prefix plus the
message (crc 4, magic 1, attributes 1, timestamp 8 for magic 1, key and value each with a
4-byte length). An uncompressed magic 1 message with a null key and an N-byte value therefore
takes 34 + N bytes, and is accepted exactly when 34 + N <= message.max.bytes.

aiokafka and librdkafka (confluent-kafka, kcat: they see Produce v3 and Fetch v4 served) send
magic 2 record batches, which Kafka (and minikafka, which converts them to
magic 1) measures as received: the 61-byte batch header plus each record (length varint,
attributes 1, timestamp delta and offset delta varints 1 each, key length varint 1 for a
null key, value length varint, value, header count 1). For a one-record batch with a null key
and an N-byte value (lengths of two varint bytes for N in 64..8191) that is 70 + N bytes.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest

MAX_MESSAGE_BYTES = 2000
ENTRY_OVERHEAD = 12 + 4 + 1 + 1 + 8 + 4 + 4
LARGEST_VALUE = MAX_MESSAGE_BYTES - ENTRY_OVERHEAD
BATCH_OVERHEAD = 61 + 2 + 1 + 1 + 1 + 1 + 2 + 1
LARGEST_BATCH_VALUE = MAX_MESSAGE_BYTES - BATCH_OVERHEAD


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from minikafka.testing import MinikafkaBroker
    overrides = {"message.max.bytes": str(MAX_MESSAGE_BYTES)}
    with MinikafkaBroker(tmp_path_factory.mktemp("minikafka-size"), overrides) as running:
        yield running


def test_kafka_python(broker, topic):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.consumer.fetcher import RecordTooLargeError
    from kafka.errors import MessageSizeTooLargeError

    # kafka-python pinned to 0.10.2 sends magic 1; a magic 2 topic measures what it converts
    # them to (as Kafka does), so the magic 1 boundary is a magic 1 topic's.
    broker.create_topic(topic, message_format_version="0.10.2")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 2))
    try:
        assert producer.send(topic, b"a" * LARGEST_VALUE).get(30).offset == 0
        with pytest.raises(MessageSizeTooLargeError):
            producer.send(topic, b"b" * (LARGEST_VALUE + 1)).get(30)
        assert producer.send(topic, b"c").get(30).offset == 1
    finally:
        producer.close(10)
    # Fetch v3 returns a first message larger than the fetch limit whole (KIP-74); a consumer
    # on an older Fetch gets it cut short and must say so, not wait on it forever.
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000,
                             max_partition_fetch_bytes=100)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    try:
        values = [r.value for _, r in zip(range(2), consumer)]
    finally:
        consumer.close()
    assert values == [b"a" * LARGEST_VALUE, b"c"]
    for api_version in ((0, 9), (0, 10, 0)):  # Fetch v1 (down-converted to magic 0), v2
        old = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                            consumer_timeout_ms=10_000, max_partition_fetch_bytes=100)
        old.assign([TopicPartition(topic, 0)])
        old.seek_to_beginning()
        try:
            with pytest.raises(RecordTooLargeError):
                next(old)
        finally:
            old.close()


def test_confluent_kafka(broker, topic):
    from confluent_kafka import KafkaError, Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    reports = {}
    for value in (b"a" * LARGEST_BATCH_VALUE, b"b" * (LARGEST_BATCH_VALUE + 1)):
        producer.produce(topic, value, on_delivery=lambda err, msg: reports.__setitem__(msg.value()[:1], (err, msg)))
        producer.flush(30)
    err, msg = reports[b"a"]
    assert err is None and msg.offset() == 0
    err, _ = reports[b"b"]
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_aiokafka(broker, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import MessageSizeTooLargeError

    async def scenario():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            assert (await producer.send_and_wait(topic, b"a" * LARGEST_BATCH_VALUE)).offset == 0
            with pytest.raises(MessageSizeTooLargeError):
                await producer.send_and_wait(topic, b"b" * (LARGEST_BATCH_VALUE + 1))
            assert (await producer.send_and_wait(topic, b"c")).offset == 1
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.start()
        try:
            values = []
            for _ in range(20):
                if len(values) >= 2:
                    break
                batches = await consumer.getmany(timeout_ms=500)
                values += [r.value for records in batches.values() for r in records]
            return values
        finally:
            await consumer.stop()
    values = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert values == [b"a" * LARGEST_BATCH_VALUE, b"c"]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat(broker, topic):
    def produce(value: str):
        return subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic], input=value + "\n",
                              capture_output=True, text=True, timeout=60)
    accepted = produce("a" * LARGEST_BATCH_VALUE)
    assert accepted.returncode == 0 and "ERROR" not in accepted.stderr, accepted.stderr
    refused = produce("b" * (LARGEST_BATCH_VALUE + 1))
    assert "Message size too large" in refused.stderr
    consumed = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e"],
                              capture_output=True, text=True, timeout=60)
    assert consumed.stdout.splitlines() == ["a" * LARGEST_BATCH_VALUE]
