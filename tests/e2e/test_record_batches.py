"""Topics of magic 2 (the default) with each client: headers and every codec (zstd included)
round-trip, and new clients read magic 1 topics and a topic whose format changed mid-log."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaPartition

HEADERS = [("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), ("empty", b"")]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def confluent_produce(bootstrap, topic, values, **config):
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    errors = []
    for value in values:
        producer.produce(topic, value=value, headers=HEADERS, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0 and errors == [None] * len(values)


def confluent_read(bootstrap, topic, count):
    """(offset, value, headers) of the first ``count`` records of partition 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "batches-assign-only"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = []
        deadline = time.monotonic() + 20
        while len(read) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                read.append((message.offset(), message.value(), message.headers() or []))
        return read
    finally:
        consumer.close()


def aiokafka_read(bootstrap, topic, count, offset=0):
    async def read():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        partition = AioPartition(topic, 0)
        consumer.assign([partition])
        await consumer.start()
        try:
            consumer.seek(partition, offset)
            found = []
            while len(found) < count:
                found += (await consumer.getmany(partition, timeout_ms=500)).get(partition, [])
            return [(r.offset, r.value, list(r.headers)) for r in found]
        finally:
            await consumer.stop()
    return asyncio.run(asyncio.wait_for(read(), 30))


def kafka_python_read(bootstrap, topic, count):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=10_000)
    consumer.assign([KafkaPartition(topic, 0)])
    consumer.seek_to_beginning()
    try:
        return [(r.offset, r.value, list(r.headers)) for _, r in zip(range(count), consumer)]
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_headers_and_codecs_round_trip(broker, topic, stored_codecs, codec):
    values = [b"value-%d-" % i * 10 for i in range(20)]
    confluent_produce(broker.bootstrap, topic, values, **{"compression.type": codec})
    expected = [(i, value, HEADERS) for i, value in enumerate(values)]
    assert confluent_read(broker.bootstrap, topic, 20) == expected
    assert aiokafka_read(broker.bootstrap, topic, 20) == expected
    assert kafka_python_read(broker.bootstrap, topic, 20) == expected
    # librdkafka compresses with zstd only against Fetch v10 (its ZSTD feature), advertised now
    assert stored_codecs(topic) == {codec}


@pytest.mark.parametrize("codec", [None, "gzip", "lz4", "zstd"])
def test_aiokafka_headers_and_codecs_round_trip(broker, topic, codec):
    async def produce():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, b"a%d" % i, headers=HEADERS)
        finally:
            await producer.stop()
    asyncio.run(asyncio.wait_for(produce(), 30))
    assert confluent_read(broker.bootstrap, topic, 5) == [(i, b"a%d" % i, HEADERS) for i in range(5)]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_headers_and_codecs_round_trip(broker, topic, stored_codecs, codec):
    # Its default configuration: it infers the broker's version from ApiVersions and, taking it
    # for one that has InitProducerId, produces idempotent record batches.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec)
    try:
        for i in range(3):
            producer.send(topic, b"kp%d-" % i * 20, headers=HEADERS).get(30)  # worth compressing
    finally:
        producer.close(10)
    expected = [(i, b"kp%d-" % i * 20, HEADERS) for i in range(3)]
    assert kafka_python_read(broker.bootstrap, topic, 3) == expected
    assert confluent_read(broker.bootstrap, topic, 3) == expected
    assert stored_codecs(topic) == {codec}


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_headers_round_trip(broker, topic):
    subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-H", "trace=abc", "-H", "empty="],
                   input="with headers\n", text=True, check=True, timeout=60)
    out = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-e", "-J"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    [message] = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert (message["payload"], message["headers"]) == ("with headers", ["trace", "abc", "empty", ""])


def test_new_clients_read_a_magic_1_topic_and_one_whose_format_changed(minikafka_broker_factory, new_topic):
    broker = minikafka_broker_factory()
    old, changed = new_topic("magic-1"), new_topic("changed")
    for topic in (old, changed):
        broker.create_topic(topic, message_format_version="0.10.2")
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4",
                                 enable_idempotence=False)  # a 0.10.2 topic holds no producer ids
        try:
            for i in range(3):
                producer.send(topic, b"m1-%d" % i)
        finally:
            producer.close(10)
    # What AlterConfigs would persist: the topic's override, written while the broker is down.
    broker.stop()
    (broker.log_dir / f"{changed}-0" / "topic-config.properties").write_text("message.format.version=2.8\n")
    broker.start()
    confluent_produce(broker.bootstrap, changed, [b"v2-0", b"v2-1"], **{"compression.type": "zstd"})
    magic_1 = [(i, b"m1-%d" % i, []) for i in range(3)]
    mixed = magic_1 + [(3, b"v2-0", HEADERS), (4, b"v2-1", HEADERS)]
    for read in (confluent_read, aiokafka_read, kafka_python_read):
        assert read(broker.bootstrap, old, 3) == magic_1, read.__name__
    # aiokafka 0.14 parses a fetched buffer in the magic of its first entry: the change
    # started a segment, so no answer spans it (as served by Kafka, one would)
    for read in (confluent_read, aiokafka_read, kafka_python_read):
        assert read(broker.bootstrap, changed, 5) == mixed, read.__name__
