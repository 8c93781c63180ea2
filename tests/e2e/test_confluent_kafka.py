"""confluent-kafka (librdkafka), default configuration, against a real minikafka process.

The consumer gets a ``group.id`` because librdkafka's Consumer requires one, but it never
subscribes: partitions are assigned with explicit offsets, so no group protocol runs.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

CODECS = ["none", "gzip", "snappy", "lz4"]


def now_ms() -> int:
    return int(time.time() * 1000)


def produce(bootstrap, topic, records, **config):
    """Send (key, value[, timestamp]) tuples; return each delivery report's (error, message)."""
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    reports = [None] * len(records)

    def delivered(index):
        def callback(err, msg):
            reports[index] = (err, msg)
        return callback

    for i, record in enumerate(records):
        extra = {"timestamp": record[2]} if len(record) > 2 else {}
        producer.produce(topic, key=record[0], value=record[1], on_delivery=delivered(i), **extra)
    assert producer.flush(30) == 0
    return reports


def produce_ok(bootstrap, topic, records, **config):
    reports = produce(bootstrap, topic, records, **config)
    errors = [err for err, _ in reports if err is not None]
    assert not errors, errors
    return [msg for _, msg in reports]


def consume(bootstrap, topic, count, *, partition=0, offset=0, timeout=20.0):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-assign-only"})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        messages = []
        deadline = time.monotonic() + timeout
        while len(messages) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            messages.append(msg)
        return messages
    finally:
        consumer.close()


def create_topic(bootstrap, topic, partitions=1, config=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                            config=config or {})])
    futures[topic].result(30)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker, topic, stored_codecs, sample_records, codec):
    delivered = produce_ok(broker.bootstrap, topic, sample_records, **{"compression.type": codec})
    assert sorted(m.offset() for m in delivered) == list(range(len(sample_records)))

    messages = consume(broker.bootstrap, topic, len(sample_records))
    assert [(m.key(), m.value()) for m in messages] == sample_records
    assert [m.offset() for m in messages] == list(range(len(sample_records)))
    assert all(m.timestamp()[0] == TIMESTAMP_CREATE_TIME for m in messages)
    # librdkafka sends a batch uncompressed when compressing would not make it smaller (a
    # lone short message), so plain entries may sit next to the compressed ones.
    stored = stored_codecs(topic)
    assert codec in stored and stored <= {codec, "none"}


def test_headers_are_refused_by_a_magic_1_topic_not_dropped(broker, topic):
    """librdkafka sends record batches here (Produce v3 is served); a record with headers
    cannot be stored in magic 1, so its delivery fails with the broker's
    UNSUPPORTED_FOR_MESSAGE_FORMAT instead of the headers vanishing, and nothing is written."""
    broker.create_topic(topic, message_format_version="0.10.2")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    reports = []
    producer.produce(topic, value=b"with headers", headers=[("h", b"1")],
                     on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0
    assert [err.code() for err in reports] == [KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT]
    produce_ok(broker.bootstrap, topic, [(None, b"plain")])
    assert [(m.offset(), m.value()) for m in consume(broker.bootstrap, topic, 1)] == [(0, b"plain")]


def test_log_append_time_topic_shows_the_broker_time(broker, topic):
    create_topic(broker.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    delivered = produce_ok(broker.bootstrap, topic, [(b"k", b"v", 1_000_000_000_000), (None, b"w", 1_000_000_000_000)])
    after = now_ms()
    for m in delivered:
        kind, timestamp = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before <= timestamp <= after

    messages = consume(broker.bootstrap, topic, 2)
    assert [m.timestamp() for m in messages] == [m.timestamp() for m in delivered]


def test_create_time_topic_refuses_a_stale_timestamp(broker, topic):
    create_topic(broker.bootstrap, topic, config={"message.timestamp.difference.max.ms": "60000"})
    [(err, _)] = produce(broker.bootstrap, topic, [(None, b"stale", now_ms() - 3_600_000)])
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP

    fresh = now_ms()
    [msg] = produce_ok(broker.bootstrap, topic, [(None, b"fresh", fresh)])
    assert msg.offset() == 0
    [record] = consume(broker.bootstrap, topic, 1)
    assert (record.value(), record.timestamp()) == (b"fresh", (TIMESTAMP_CREATE_TIME, fresh))


def test_offsets_for_times_earliest_and_latest(broker, topic):
    base = now_ms() - 10_000
    produce_ok(broker.bootstrap, topic, [(None, f"m{i}".encode(), base + 1000 * i) for i in range(5)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "e2e-assign-only"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 5)
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, base + 2500)], timeout=10)
        assert found.offset == 3
        assert found.leader_epoch == 0  # ListOffsets v4 (KIP-320): the epoch of the offset found
        [exact] = consumer.offsets_for_times([TopicPartition(topic, 0, base + 1000)], timeout=10)
        assert exact.offset == 1
        [past_the_end] = consumer.offsets_for_times([TopicPartition(topic, 0, base + 60_000)], timeout=10)
        assert past_the_end.offset == -1  # librdkafka's OFFSET_END: no such message
    finally:
        consumer.close()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(topic, 0)
    for spec, expected in [(OffsetSpec.earliest(), 0), (OffsetSpec.latest(), 5),
                           (OffsetSpec.for_timestamp(base + 2500), 3)]:
        result = admin.list_offsets({tp: spec})[tp].result(30)
        assert result.offset == expected


def test_topic_is_auto_created_on_first_produce(broker, topic):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert topic not in admin.list_topics(timeout=10).topics
    [msg] = produce_ok(broker.bootstrap, topic, [(None, b"first")])
    assert (msg.partition(), msg.offset()) == (0, 0)
    metadata = admin.list_topics(timeout=10).topics[topic]
    assert metadata.error is None
    assert list(metadata.partitions) == [0]


def test_admin_creates_and_deletes_topics(broker, topic):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(broker.bootstrap, topic, partitions=3, config={"segment.bytes": "1048576"})
    metadata = admin.list_topics(timeout=10).topics[topic]
    assert sorted(metadata.partitions) == [0, 1, 2]
    assert all(p.leader == 0 and p.replicas == [0] and p.isrs == [0] for p in metadata.partitions.values())

    [msg] = produce_ok(broker.bootstrap, topic, [(b"k", b"v")])
    assert (broker.log_dir / f"{topic}-{msg.partition()}").is_dir()

    admin.delete_topics([topic])[topic].result(30)
    assert topic not in admin.list_topics(timeout=10).topics
    assert not any(path.name.startswith(f"{topic}-") for path in broker.log_dir.iterdir())

    # Creating an existing topic is refused with the broker's own error code.
    create_topic(broker.bootstrap, topic)
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    with pytest.raises(Exception) as refused:
        futures[topic].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_admin_create_topics_errors_and_validate_only(broker, new_topic):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def error_of(new):
        try:
            admin.create_topics([new])[new.topic].result(30)
        except Exception as exc:  # confluent raises KafkaException carrying a KafkaError
            return exc.args[0].code()
        return None

    assert error_of(NewTopic(new_topic(), num_partitions=1, replication_factor=2)) == KafkaError.INVALID_REPLICATION_FACTOR
    assert error_of(NewTopic(new_topic(), num_partitions=1, replication_factor=1,
                             config={"no.such.config": "1"})) == KafkaError.INVALID_CONFIG
    assert error_of(NewTopic("bad/name", num_partitions=1, replication_factor=1)) == KafkaError.TOPIC_EXCEPTION

    dry_run = new_topic()
    admin.create_topics([NewTopic(dry_run, num_partitions=2, replication_factor=1)],
                        validate_only=True)[dry_run].result(30)
    assert dry_run not in admin.list_topics(timeout=10).topics
    assert not (broker.log_dir / f"{dry_run}-0").exists()
