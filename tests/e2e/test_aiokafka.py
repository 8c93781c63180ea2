"""aiokafka, default configuration, against a real minikafka process.

aiokafka 0.14 produces magic 2 record batches only (its MessageAccumulator always builds
DefaultRecordBatchBuilder(magic=2)), even in Produce v2. minikafka stores Kafka 0.10's
message format (magic 0/1), so, like a Kafka broker whose log has an older message format,
it converts them down on append (protocol.record_batch); what magic 1 cannot hold (record
headers) is refused with UNSUPPORTED_FOR_MESSAGE_FORMAT. Consuming, offset lookup and admin
are tested too, partly with messages written by kafka-python.

aiokafka runs on asyncio, so each test is a plain function that drives its own event loop
(the suite's async tests run under trio).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import UnsupportedForMessageFormatError
from kafka import KafkaProducer

CODECS = [None, "gzip", "snappy", "lz4"]


def now_ms() -> int:
    return int(time.time() * 1000)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def produce(bootstrap, topic, records, **config):
    """Send (key, value[, timestamp_ms]) tuples, all in flight at once; RecordMetadata each."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=r[0], value=r[1], timestamp_ms=r[2] if len(r) > 2 else None)
                   for r in records]
        return list(await asyncio.gather(*futures))
    finally:
        await producer.stop()


async def consume(bootstrap, topic, count, *, partition=0, offset=0, timeout=20.0):
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    await consumer.start()
    try:
        consumer.seek(tp, offset)
        records = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(tp, timeout_ms=500)
            records.extend(batches.get(tp, []))
        return records
    finally:
        await consumer.stop()


def kafka_python_produce(bootstrap, topic, records, **config):
    """Write (key, value[, timestamp_ms]) tuples as magic 1 messages, with kafka-python."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        futures = [producer.send(topic, key=r[0], value=r[1], timestamp_ms=r[2] if len(r) > 2 else None)
                   for r in records]
        return [f.get(30) for f in futures]
    finally:
        producer.close(10)


def topic_errors(response) -> dict[str, int]:
    """topic -> error code from a CreateTopics / DeleteTopics response of any version."""
    body = response.to_object()
    entries = body.get("topic_errors") or body.get("topic_error_codes") or body.get("topics") or body.get("responses")
    return {e.get("topic", e.get("name")): e["error_code"] for e in entries}


async def create_topic(bootstrap, topic, partitions=1, configs=None):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
        assert topic_errors(response) == {topic: 0}
    finally:
        await admin.close()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_produce_consume_every_codec(broker, topic, stored_codecs, sample_records, codec):
    base = now_ms() - 60_000
    produced = [(key, value, base + 7 * index) for index, (key, value) in enumerate(sample_records)]

    async def scenario():
        metadata = await produce(broker.bootstrap, topic, produced, compression_type=codec)
        assert [m.offset for m in metadata] == list(range(len(sample_records)))
        records = await consume(broker.bootstrap, topic, len(sample_records))
        assert [(r.key, r.value, r.timestamp) for r in records] == produced
        assert [r.offset for r in records] == list(range(len(sample_records)))
        assert all(r.timestamp_type == 0 for r in records)
    run(scenario())
    # Converted to magic 1 with the batch's own codec, never recompressed to another one.
    assert stored_codecs(topic) == {codec or "none"}


def test_records_with_headers_are_refused_by_a_magic_1_topic_and_nothing_is_written(broker, topic):
    broker.create_topic(topic, message_format_version="0.10.2")

    async def scenario():
        await produce(broker.bootstrap, topic, [(None, b"before")])
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            with pytest.raises(UnsupportedForMessageFormatError):
                await producer.send_and_wait(topic, b"with a header", headers=[("trace", b"1")])
        finally:
            await producer.stop()
        records = await consume(broker.bootstrap, topic, 1)
        assert [(r.offset, r.value) for r in records] == [(0, b"before")]
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await consumer.start()
        try:
            assert await consumer.end_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 1}
        finally:
            await consumer.stop()
    run(scenario())


def test_zstd_is_refused_by_a_magic_1_topic_with_unsupported_compression_type(broker, topic):
    """aiokafka also offers zstd (through cramjam) and sends it whatever the broker's version.
    Magic 1 cannot hold zstd, so the broker refuses the batch with UNSUPPORTED_COMPRESSION_TYPE
    (76), as Kafka does for zstd in an old Produce version, and writes nothing. aiokafka 0.14
    has no exception class for 76 and reports UnknownError, so the code itself is checked on a
    raw Produce v2 request carrying a batch built by aiokafka's own builder."""
    from aiokafka.errors import KafkaError
    from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    broker.create_topic(topic, message_format_version="0.10.2")

    async def scenario():
        await produce(broker.bootstrap, topic, [(None, b"before")])
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="zstd")
        await producer.start()
        try:
            with pytest.raises(KafkaError):
                await producer.send_and_wait(topic, b"zstd" * 100)
        finally:
            await producer.stop()
    run(scenario())

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=DefaultRecordBatch.CODEC_ZSTD,
                                        is_transactional=0, producer_id=-1, producer_epoch=-1,
                                        base_sequence=-1, batch_size=16384)
    builder.append(0, timestamp=now_ms(), key=None, value=b"zstd" * 100, headers=[])
    batch = bytes(builder.build())
    name = topic.encode()
    body = (struct.pack(">hii", 1, 30_000, 1) + struct.pack(">h", len(name)) + name
            + struct.pack(">iii", 1, 0, len(batch)) + batch)
    request = struct.pack(">hhih", 0, 2, 7, 3) + b"raw" + body
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        response = _read_exactly(sock, size)
    correlation_id, topics, name_length = struct.unpack_from(">iih", response)
    partitions, partition, error_code, base_offset = struct.unpack_from(">iihq", response, 10 + name_length)
    assert (correlation_id, topics, partitions, partition) == (7, 1, 1, 0)
    assert (error_code, base_offset) == (76, -1)

    records = run(consume(broker.bootstrap, topic, 2, timeout=3))
    assert [(r.offset, r.value) for r in records] == [(0, b"before")]


def _read_exactly(sock, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_consume_every_codec(broker, topic, sample_records, codec):
    kafka_python_produce(broker.bootstrap, topic, sample_records, compression_type=codec)

    async def scenario():
        records = await consume(broker.bootstrap, topic, len(sample_records))
        assert [(r.key, r.value) for r in records] == sample_records
        assert [r.offset for r in records] == list(range(len(sample_records)))
        assert all(r.timestamp_type == 0 for r in records)
        middle = await consume(broker.bootstrap, topic, len(sample_records) - 7, offset=7)
        assert [r.offset for r in middle] == list(range(7, len(sample_records)))
    run(scenario())


def test_log_append_time_topic_shows_the_broker_time(broker, topic):
    """The producer's (old) timestamps are replaced by the broker's clock, both for magic 1
    messages from kafka-python and for aiokafka's own v2 batches, and aiokafka sees the
    broker's time in its send's metadata (Produce v2's log_append_time) and when consuming."""
    run(create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"}))
    stale = 1_000_000_000_000
    before = now_ms()
    kafka_python_produce(broker.bootstrap, topic, [(b"k", b"v", stale)])
    [sent] = run(produce(broker.bootstrap, topic, [(b"k2", b"v2", stale)]))
    after = now_ms()
    assert sent.offset == 1
    assert sent.timestamp_type == 1
    assert before <= sent.timestamp <= after
    records = run(consume(broker.bootstrap, topic, 2))
    assert [(r.offset, r.value, r.timestamp_type) for r in records] == [(0, b"v", 1), (1, b"v2", 1)]
    assert all(before <= r.timestamp <= after for r in records)
    assert records[1].timestamp == sent.timestamp


def test_create_time_topic_refuses_a_stale_timestamp(broker, topic):
    from aiokafka.errors import InvalidTimestampError

    run(create_topic(broker.bootstrap, topic, configs={"message.timestamp.difference.max.ms": "60000"}))

    async def scenario():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            with pytest.raises(InvalidTimestampError):
                await producer.send_and_wait(topic, b"stale", timestamp_ms=now_ms() - 3_600_000)
            fresh = now_ms()
            assert (await producer.send_and_wait(topic, b"fresh", timestamp_ms=fresh)).offset == 0
        finally:
            await producer.stop()
        [record] = await consume(broker.bootstrap, topic, 1)
        assert (record.value, record.timestamp, record.timestamp_type) == (b"fresh", fresh, 0)
    run(scenario())


def test_offsets_for_times_earliest_and_latest(broker, topic):
    base = now_ms() - 10_000
    kafka_python_produce(broker.bootstrap, topic, [(None, f"m{i}".encode(), base + 1000 * i) for i in range(5)])

    async def scenario():
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await consumer.start()
        tp = TopicPartition(topic, 0)
        try:
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 5}
            found = (await consumer.offsets_for_times({tp: base + 2500}))[tp]
            assert (found.offset, found.timestamp) == (3, base + 3000)
            assert (await consumer.offsets_for_times({tp: base + 60_000}))[tp] is None
        finally:
            await consumer.stop()
    run(scenario())


def test_topic_is_auto_created_by_a_metadata_request(broker, topic):
    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            assert topic not in await admin.list_topics()
            assert await producer.partitions_for(topic) == {0}
            assert topic in await admin.list_topics()
        finally:
            await producer.stop()
            await admin.close()
    run(scenario())


def test_admin_creates_and_deletes_topics(broker, topic):
    async def scenario():
        await create_topic(broker.bootstrap, topic, partitions=2, configs={"retention.bytes": "10485760"})
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            [description] = await admin.describe_topics([topic])
            assert description["error_code"] == 0
            assert sorted(p["partition"] for p in description["partitions"]) == [0, 1]
            assert (broker.log_dir / f"{topic}-1").is_dir()

            assert topic_errors(await admin.delete_topics([topic])) == {topic: 0}
            assert topic not in await admin.list_topics()
            assert not (broker.log_dir / f"{topic}-1").exists()
        finally:
            await admin.close()
    run(scenario())


@pytest.mark.parametrize("exclude", [False, True])
def test_pattern_subscription_sees_internal_topics_only_when_asked(broker, exclude):
    # aiokafka's own test of exclude_internal_topics=False: Metadata must list
    # __consumer_offsets (flagged internal) for the client to match it.
    async def subscribed():
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=f"internal-{exclude}",
                                    exclude_internal_topics=exclude, metadata_max_age_ms=200)
        consumer.subscribe(pattern="^__consumer_off.*")
        await consumer.start()
        try:
            deadline = time.monotonic() + 10
            while not consumer.subscription() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            return consumer.subscription(), consumer._client.cluster.internal_topics
        finally:
            await consumer.stop()

    subscription, internal = run(subscribed())
    assert internal == {"__consumer_offsets"}
    assert subscription == (set() if exclude else {"__consumer_offsets"})
