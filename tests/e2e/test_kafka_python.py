"""kafka-python 3.x, default configuration, against a real minikafka process."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidTimestampError

CODECS = [None, "gzip", "snappy", "lz4"]


def now_ms() -> int:
    return int(time.time() * 1000)


def produce(bootstrap, topic, records, **config):
    """Send (key, value[, timestamp_ms]) tuples; return the RecordMetadata of each, in order."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        futures = [producer.send(topic, key=r[0], value=r[1], timestamp_ms=r[2] if len(r) > 2 else None)
                   for r in records]
        producer.flush(timeout=30)
        return [f.get(timeout=30) for f in futures]
    finally:
        producer.close(timeout=10)


def consume(bootstrap, topic, count, *, partition=0, offset=0, timeout=20.0):
    """Read ``count`` records from ``offset`` with an assigned partition (no group)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, partition)
    try:
        consumer.assign([tp])
        consumer.seek(tp, offset)
        records = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            records.extend(consumer.poll(timeout_ms=500).get(tp, []))
        return records
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_produce_consume_every_codec(broker, topic, stored_codecs, sample_records, codec):
    # kafka-python refuses a record whose key and value are both None; every other shape goes.
    metadata = produce(broker.bootstrap, topic, sample_records, compression_type=codec)
    assert [m.offset for m in metadata] == list(range(len(sample_records)))

    records = consume(broker.bootstrap, topic, len(sample_records))
    assert [(r.key, r.value) for r in records] == sample_records
    assert [r.offset for r in records] == list(range(len(sample_records)))
    assert all(r.timestamp_type == 0 for r in records)
    # kafka-python 3 sends a record batch uncompressed when compressing would not make it smaller.
    assert stored_codecs(topic) - {"none"} == ({codec} if codec else set())


def test_consume_from_the_middle_of_a_compressed_batch(broker, topic, sample_records):
    produce(broker.bootstrap, topic, sample_records, compression_type="gzip", linger_ms=50)
    records = consume(broker.bootstrap, topic, len(sample_records) - 7, offset=7)
    assert [r.offset for r in records] == list(range(7, len(sample_records)))
    assert [(r.key, r.value) for r in records] == sample_records[7:]


@pytest.mark.parametrize(("producer_codec", "topic_codec"), [("gzip", "lz4"), (None, "gzip"), ("gzip", "uncompressed")],
                         ids=lambda c: c or "none")
def test_a_magic_1_topic_stores_its_compression_type(broker, topic, stored_codecs, sample_records,
                                                     producer_codec, topic_codec):
    # Kafka 0.10.2's LogValidator recompresses a magic 0/1 set into the topic's codec (its
    # targetCodec) too, not only a v2 log: pinned to 0.10.1 the producer sends magic 1.
    broker.create_topic(topic, message_format_version="0.10.2", compression_type=topic_codec)
    timestamp = now_ms() - 1000
    sent = [(key, value, timestamp + index) for index, (key, value) in enumerate(sample_records)]
    metadata = produce(broker.bootstrap, topic, sent, compression_type=producer_codec, api_version=(0, 10, 1),
                       linger_ms=50)
    assert [m.offset for m in metadata] == list(range(len(sent)))
    assert stored_codecs(topic) == {"none" if topic_codec == "uncompressed" else topic_codec}
    assert stored_magics(broker, topic) == {1}
    records = consume(broker.bootstrap, topic, len(sent))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (index, key, value, stamp) for index, (key, value, stamp) in enumerate(sent)]


def stored_magics(broker, topic) -> set[int]:
    from minikafka.protocol.records import iter_entries
    return {entry.magic for segment in (broker.log_dir / f"{topic}-0").glob("*.log")
            for entry in iter_entries(segment.read_bytes())}


def test_log_append_time_topic_shows_the_broker_time(broker, topic):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        admin.close()
    client_timestamp = 1_000_000_000_000  # 2001: far from the broker's clock
    before = now_ms()
    metadata = produce(broker.bootstrap, topic, [(b"k", b"v", client_timestamp), (None, b"w", client_timestamp)])
    after = now_ms()
    for m in metadata:
        assert before <= m.timestamp <= after

    records = consume(broker.bootstrap, topic, 2)
    assert [r.timestamp_type for r in records] == [1, 1]
    assert [r.timestamp for r in records] == [m.timestamp for m in metadata]


def test_create_time_topic_refuses_a_stale_timestamp(broker, topic):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"message.timestamp.difference.max.ms": "60000"})])
    finally:
        admin.close()
    with pytest.raises(InvalidTimestampError):
        produce(broker.bootstrap, topic, [(None, b"stale", now_ms() - 3_600_000)])

    fresh = now_ms()
    [metadata] = produce(broker.bootstrap, topic, [(None, b"fresh", fresh)])
    assert metadata.offset == 0  # the refused message left nothing behind
    [record] = consume(broker.bootstrap, topic, 1)
    assert (record.value, record.timestamp, record.timestamp_type) == (b"fresh", fresh, 0)


def test_offsets_for_times_earliest_and_latest(broker, topic):
    base = now_ms() - 10_000
    produce(broker.bootstrap, topic, [(None, f"m{i}".encode(), base + 1000 * i) for i in range(5)])
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = TopicPartition(topic, 0)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 5}
        found = consumer.offsets_for_times({tp: base + 2500})[tp]
        assert (found.offset, found.timestamp) == (3, base + 3000)
        exact = consumer.offsets_for_times({tp: base + 1000})[tp]
        assert (exact.offset, exact.timestamp) == (1, base + 1000)
        assert consumer.offsets_for_times({tp: base})[tp].offset == 0
        assert consumer.offsets_for_times({tp: base + 60_000})[tp] is None
    finally:
        consumer.close()


def test_topic_is_auto_created_on_first_produce(broker, topic):
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        assert topic not in consumer.topics()
    finally:
        consumer.close()
    [metadata] = produce(broker.bootstrap, topic, [(None, b"first")])
    assert (metadata.partition, metadata.offset) == (0, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        assert topic in consumer.topics()
        assert consumer.partitions_for_topic(topic) == {0}
    finally:
        consumer.close()


def test_admin_creates_and_deletes_topics(broker, topic):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 3, 1, topic_configs={"retention.ms": "3600000"})])
        assert topic in admin.list_topics()
        [description] = admin.describe_topics([topic])
        assert sorted(p["partition_index"] for p in description["partitions"]) == [0, 1, 2]

        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        metadata = producer.send(topic, b"v", key=b"k", partition=2).get(30)
        producer.close(10)
        assert (metadata.partition, metadata.offset) == (2, 0)
        assert (broker.log_dir / f"{topic}-2").is_dir()

        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
        assert not (broker.log_dir / f"{topic}-2").exists()
    finally:
        admin.close()


def test_acks_0_messages_arrive_without_responses(broker, topic):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=0)
    try:
        for i in range(100):
            producer.send(topic, f"fire-and-forget-{i}".encode())
        producer.flush(30)
    finally:
        producer.close(10)
    records = consume(broker.bootstrap, topic, 100)
    assert [r.value for r in records] == [f"fire-and-forget-{i}".encode() for i in range(100)]


def test_a_waiting_consumer_is_woken_by_a_produce(broker, topic):
    produce(broker.bootstrap, topic, [(None, b"first")])
    # The broker may hold a fetch for 25 s; the record must arrive well before that, because
    # the append wakes the parked fetch rather than the fetch timing out.
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=25_000)
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 1)
        assert consumer.poll(timeout_ms=300) == {}  # a long poll is now parked in the broker
        produce(broker.bootstrap, topic, [(None, b"second")])
        records = []
        deadline = time.monotonic() + 8
        while not records and time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=1000).get(tp, [])
        assert [r.value for r in records] == [b"second"]
    finally:
        consumer.close()


def test_internal_topics_are_listed_and_hidden_by_the_client(broker, topic):
    produce(broker.bootstrap, topic, [(None, b"x")])
    # As in Kafka, __consumer_offsets exists once a client has used a group.
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.list_groups()
    admin.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        assert topic in consumer.topics() and "__consumer_offsets" not in consumer.topics()
        cluster = consumer._client.cluster
        assert "__consumer_offsets" in cluster.topics(exclude_internal_topics=False)
        assert cluster.internal_topics == {"__consumer_offsets"}
    finally:
        consumer.close()
