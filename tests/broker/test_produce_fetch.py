"""Produce and Fetch over real sockets: acks, per-partition errors, long polls, limits,
sendfile'd bytes and down-conversion for v0/v1 consumers."""

from __future__ import annotations

import time

import pytest
import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.records import LOG_APPEND_TIME, Codec, build_message_set, iter_entries, iter_records


def values(records: bytes) -> list[bytes]:
    return [record.value for record in iter_records(bytes(records))]


async def test_produce_acks_one_and_all_then_fetch(client, message_set):
    first = await client.produce("basic", 0, message_set(b"a", b"b"), acks=1)
    second = await client.produce("basic", 0, message_set(b"c"), acks=-1)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 2)
    assert first.log_append_time_ms == -1  # CreateTime topic
    fetched = await client.fetch("basic", 0, 0)
    assert fetched.error_code == 0 and fetched.high_watermark == 3
    assert values(fetched.records) == [b"a", b"b", b"c"]
    from_middle = await client.fetch("basic", 0, 2)
    assert values(from_middle.records) == [b"c"]


@pytest.mark.magic_1_topics  # what v2 consumers read as stored: a v2 topic's batches are down-converted
async def test_fetch_v2_returns_the_stored_bytes_unchanged(broker, client, monkeypatch):
    import os

    from minikafka.broker import connection as connection_module

    stored = build_message_set([(b"k", b"v" * 100, 1234), (None, None, 1235)], codec=Codec.GZIP)
    await client.produce("verbatim", 0, stored)
    log = broker.log_manager.get_log("verbatim", 0)
    on_disk = log.read(0, 1 << 20).read_bytes()
    sent_from_files = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd, in_fd, offset, count):
        sent = real_sendfile(out_fd, in_fd, offset, count)
        sent_from_files.append(sent)
        return sent
    monkeypatch.setattr(connection_module.os, "sendfile", counting_sendfile)
    fetched = await client.fetch("verbatim", 0, 0)
    assert bytes(fetched.records) == on_disk
    # The message set went from the segment file to the socket by sendfile, not through Python.
    assert sum(sent_from_files) == len(on_disk)
    assert [(r.key, r.value, r.timestamp) for r in iter_records(bytes(fetched.records))] == [
        (b"k", b"v" * 100, 1234), (None, None, 1235)]


async def test_invalid_acks(client, message_set):
    result = await client.produce("acks", 0, message_set(b"x"), acks=2)
    assert result.error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert (await client.fetch("acks", 0, 0)).high_watermark == 0


async def test_refused_sets_write_nothing(start_broker, connect, message_set):
    broker = await start_broker(message_max_bytes=300, log_message_timestamp_difference_max_ms=60_000)
    client = await connect(broker)
    ok = await client.produce("refusals", 0, message_set(b"ok"))
    assert ok.error_code == 0
    too_large = await client.produce("refusals", 0, message_set(b"x" * 400))
    assert too_large.error_code == ErrorCode.MESSAGE_TOO_LARGE
    corrupt = bytearray(message_set(b"crc"))
    corrupt[-1] ^= 0xFF
    assert (await client.produce("refusals", 0, bytes(corrupt))).error_code == ErrorCode.CORRUPT_MESSAGE
    stale = message_set(b"old", timestamp=int(time.time() * 1000) - 3_600_000)
    assert (await client.produce("refusals", 0, stale)).error_code == ErrorCode.INVALID_TIMESTAMP
    assert (await client.produce("refusals", 0, None)).error_code == ErrorCode.CORRUPT_MESSAGE
    fetched = await client.fetch("refusals", 0, 0)
    assert fetched.high_watermark == 1
    assert values(fetched.records) == [b"ok"]


async def test_per_partition_and_per_topic_errors(start_broker, connect, message_set):
    broker = await start_broker(auto_create_topics_enable="false")
    client = await connect(broker)
    response = await client.request(ApiKey.PRODUCE, 2, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "missing", "partition_data": [{"index": 0, "records": message_set(b"x")}]},
        {"name": "bad/name", "partition_data": [{"index": 0, "records": message_set(b"x")}]},
        {"name": "__consumer_offsets", "partition_data": [{"index": 0, "records": message_set(b"x")}]},
    ]})
    codes = {t.name: [p.error_code for p in t.partition_responses] for t in response.responses}
    assert codes == {"missing": [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION],
                     "bad/name": [ErrorCode.INVALID_TOPIC_EXCEPTION],
                     "__consumer_offsets": [ErrorCode.INVALID_TOPIC_EXCEPTION]}


async def test_produce_never_creates_a_topic_and_refuses_unknown_partitions(start_broker, connect, message_set):
    """Kafka's Produce leaves auto-creation to Metadata, which clients send first."""
    broker = await start_broker(num_partitions=2)
    client = await connect(broker)
    body = {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "auto", "partition_data": [{"index": i, "records": message_set(b"%d" % i)} for i in range(3)]}]}
    response = await client.request(ApiKey.PRODUCE, 2, body)
    assert [p.error_code for p in response.responses[0].partition_responses] == \
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 3
    assert broker.partitions.partition_count("auto") is None
    await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "auto"}]})
    response = await client.request(ApiKey.PRODUCE, 2, body)
    codes = [p.error_code for p in response.responses[0].partition_responses]
    assert codes == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert broker.partitions.partition_count("auto") == 2


async def test_log_append_time_topic_reports_the_broker_time(broker, client, message_set):
    await broker.partitions.create_topic("appendtime", 1, 1, {}, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    result = await client.produce("appendtime", 0, message_set(b"x", timestamp=5))
    after = int(time.time() * 1000)
    assert result.error_code == 0
    assert before <= result.log_append_time_ms <= after
    record = next(iter_records(bytes((await client.fetch("appendtime", 0, 0)).records)))
    assert record.timestamp == result.log_append_time_ms and record.timestamp_type == LOG_APPEND_TIME


async def test_long_poll_is_woken_by_an_append(broker, connect, message_set):
    consumer = await connect()
    producer = await connect()
    await producer.produce("wake", 0, message_set(b"before"))
    result = {}

    async def poll():
        result["fetch"] = await consumer.fetch("wake", 0, 1, max_wait_ms=60_000, min_bytes=1)

    reads = []
    real_high_watermark = broker.partitions.high_watermark

    def counting_high_watermark(log):
        reads.append((log.topic, log.partition))
        return real_high_watermark(log)
    broker.partitions.high_watermark = counting_high_watermark
    try:
        with trio.fail_after(30):  # far below max_wait_ms: only the append can end the poll
            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll)
                await trio.sleep(0.2)
                assert "fetch" not in result
                # One look at the partition, then asleep until woken: no polling loop.
                assert reads.count(("wake", 0)) == 1
                await producer.produce("wake", 0, message_set(b"after"))
    finally:
        del broker.partitions.high_watermark
    assert values(result["fetch"].records) == [b"after"]
    assert reads.count(("wake", 0)) == 2


async def test_long_poll_times_out_empty(client, message_set):
    await client.produce("timeout", 0, message_set(b"x"))
    fetched = await client.fetch("timeout", 0, 1, max_wait_ms=100, min_bytes=1)
    assert fetched.error_code == 0 and bytes(fetched.records) == b"" and fetched.high_watermark == 1


async def test_long_poll_waits_for_min_bytes(broker, connect, message_set):
    consumer = await connect()
    producer = await connect()
    one = message_set(b"x" * 50)
    await producer.produce("minbytes", 0, one)
    got = {}

    async def poll():
        got["fetch"] = await consumer.fetch("minbytes", 0, 0, max_wait_ms=60_000, min_bytes=3 * len(one))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await producer.produce("minbytes", 0, one)
            await trio.sleep(0.1)
            assert "fetch" not in got  # two sets are not enough yet
            await producer.produce("minbytes", 0, one)
    assert len(values(got["fetch"].records)) == 3


@pytest.mark.magic_1_topics
async def test_partition_max_bytes_and_v3_response_max_bytes(client, message_set, fetch_body):
    for i in range(10):
        await client.produce("limits", 0, message_set(b"%03d" % i + b"." * 100))
    size = len(message_set(b"000" + b"." * 100))
    fetched = await client.fetch("limits", 0, 0, partition_max_bytes=3 * size)
    assert len(values(fetched.records)) == 3
    # v0-v2 (Kafka 0.10): the limit is hard, a message larger than it comes back cut short
    # (v0/v1 too, although they are down-converted: the client must see the partial message)...
    for version in (0, 1, 2):
        cut = await client.fetch("limits", 0, 0, version=version, partition_max_bytes=10)
        assert len(bytes(cut.records)) == 10 and values(cut.records) == []
    # ...v3: a message larger than every limit still comes back whole (KIP-74)...
    fetched = await client.fetch("limits", 0, 0, version=3, partition_max_bytes=10, max_bytes=10)
    assert len(values(fetched.records)) == 1
    # ...and the response limit is shared across partitions in request order.
    await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "limits2"}]})
    for i in range(5):
        await client.produce("limits2", 0, message_set(b"%03d" % i + b"." * 100))
    response = await client.request(ApiKey.FETCH, 3, fetch_body(
        [("limits", 0, 0, 1 << 20), ("limits2", 0, 0, 1 << 20)], max_bytes=4 * size))
    counts = [len(values(t.partitions[0].records)) for t in response.responses]
    assert counts == [4, 0]


async def test_v3_partition_whose_first_entry_does_not_fit_what_is_left_is_answered_empty(client, message_set,
                                                                                          fetch_body):
    """Kafka's ReplicaManager.readFromLocalLog (v3+, no hard limit): once a partition has
    returned data, a later one whose first batch exceeds the response bytes left answers no
    records, not the batch's first bytes (which a consumer could only drop and fetch again)."""
    for topic in ("first", "second"):
        await client.request(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
        for i in range(3):
            await client.produce(topic, 0, message_set(b"%03d" % i + b"." * 100))
    whole = await client.request(ApiKey.FETCH, 11, fetch_body([("first", 0, 0, 1 << 20)]))
    size = len(bytes(whole.responses[0].partitions[0].records)) // 3  # one stored batch per produce
    for version in (3, 4, 11):
        response = await client.request(ApiKey.FETCH, version, fetch_body(
            [("first", 0, 0, 1 << 20), ("second", 0, 0, 1 << 20)], max_bytes=2 * size + 10))
        first, second = (t.partitions[0] for t in response.responses)
        assert len(bytes(first.records)) == 2 * size
        assert second.error_code == ErrorCode.NONE
        assert not second.records, (version, len(bytes(second.records)))


async def test_offset_out_of_range_and_unknown_partition(client, message_set):
    await client.produce("range", 0, message_set(b"x"))
    assert (await client.fetch("range", 0, 1)).error_code == 0  # the log end offset is in range
    beyond = await client.fetch("range", 0, 2)
    assert beyond.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and beyond.high_watermark == -1
    assert (await client.fetch("range", 5, 0)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # an error answers at once, whatever max_wait_ms says
    with trio.fail_after(10):
        assert (await client.fetch("range", 0, 99, max_wait_ms=60_000, min_bytes=1)).error_code == 1


@pytest.mark.magic_1_topics
async def test_fetch_v0_v1_down_convert_to_magic_0(client):
    now = int(time.time() * 1000)
    plain = build_message_set([(b"k1", b"v1", now), (None, b"v2", now)])
    compressed = build_message_set([(b"k3", b"v3", now), (b"k4", None, now)], codec=Codec.SNAPPY)
    await client.produce("convert", 0, plain)
    await client.produce("convert", 0, compressed)
    for version in (0, 1):
        fetched = await client.fetch("convert", 0, 0, version=version)
        raw = bytes(fetched.records)
        assert {entry.magic for entry in iter_entries(raw)} == {0}
        records = list(iter_records(raw))
        assert [(r.offset, r.key, r.value) for r in records] == [
            (0, b"k1", b"v1"), (1, None, b"v2"), (2, b"k3", b"v3"), (3, b"k4", None)]
    v2 = await client.fetch("convert", 0, 0, version=2)
    assert {entry.magic for entry in iter_entries(bytes(v2.records))} == {1}


@pytest.mark.magic_1_topics
async def test_produce_v0_and_magic_0_sets(client):
    magic0 = build_message_set([(None, b"old", -1)], magic=0)
    result = await client.produce("v0", 0, magic0, version=0)
    assert (result.error_code, result.base_offset) == (0, 0)
    record = next(iter_records(bytes((await client.fetch("v0", 0, 0)).records)))
    assert (record.value, record.magic, record.timestamp) == (b"old", 0, -1)  # stored as sent


@pytest.mark.magic_1_topics
async def test_fetch_v2_hands_the_connection_a_file_slice_not_bytes(broker, client, message_set):
    """v2+ responses carry the segment bytes as a storage FileSlice (sent with sendfile);
    v0/v1 get records converted as the connection writes them."""
    from minikafka.broker.down_conversion import DownConvertedRecords
    from minikafka.broker.handlers import HANDLERS
    from minikafka.protocol.framing import encode_request, parse_request
    from minikafka.storage.types import FileSlice

    await client.produce("sliced", 0, message_set(b"a", b"b"))
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": [
        {"topic": "sliced", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
    for version, kind in ((0, DownConvertedRecords), (1, DownConvertedRecords), (2, FileSlice), (3, FileSlice)):
        request = parse_request(encode_request(ApiKey.FETCH, version, 1, "t", body)[4:])
        response = await HANDLERS[ApiKey.FETCH](broker, request)
        assert isinstance(response["responses"][0]["partitions"][0]["records"], kind)


def _record_batch(records, *, codec: int = 0, headers: bool = False) -> bytes:
    """One magic 2 batch of ``(key, value, timestamp)`` records, as kafka-python's producer
    builds it (an encoder that is not ours)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for offset, (key, value, timestamp) in enumerate(records):
        builder.append(offset, timestamp, key, value, [("h", b"1")] if headers else [])
    return bytes(builder.build())


@pytest.mark.magic_1_topics
async def test_produce_v3_takes_one_record_batch_and_stores_it_as_magic_1(client):
    now = int(time.time() * 1000)
    plain = _record_batch([(b"k1", b"v1", now), (None, b"v2", now + 1)])
    compressed = _record_batch([(b"k3", b"v3" * 50, now + 2), (b"k4", None, now + 3)], codec=Codec.LZ4)
    first = await client.produce("v3", 0, plain, version=3)
    second = await client.produce("v3", 0, compressed, version=3)
    assert (first.error_code, first.base_offset, second.error_code, second.base_offset) == (0, 0, 0, 2)
    fetched = await client.fetch("v3", 0, 0, version=4)
    raw = bytes(fetched.records)
    # The log keeps its format: plain messages, then one lz4 wrapper holding relative offsets.
    assert [(entry.magic, entry.codec) for entry in iter_entries(raw)] == [
        (1, Codec.NONE), (1, Codec.NONE), (1, Codec.LZ4)]
    assert [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(raw)] == [
        (0, b"k1", b"v1", now), (1, None, b"v2", now + 1), (2, b"k3", b"v3" * 50, now + 2), (3, b"k4", None, now + 3)]


@pytest.mark.magic_1_topics
async def test_produce_v3_takes_what_any_version_takes_and_refuses_what_magic_1_cannot_hold(client, message_set):
    now = int(time.time() * 1000)
    batch = _record_batch([(None, b"a", now)])
    # kafka-python sends magic 1 sets in v3 (it sees 0.10.2); several batches convert too.
    assert (await client.produce("v3any", 0, message_set(b"m1"), version=3)).base_offset == 0
    assert (await client.produce("v3any", 0, batch + batch, version=3)).base_offset == 1
    # What the log's format cannot hold is refused, as by a 0.11 broker with an 0.10.2 log
    # format, and writes nothing.
    with_headers = _record_batch([(None, b"h", now)], headers=True)
    assert (await client.produce("v3any", 0, with_headers, version=3)).error_code == \
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert (await client.produce("v3any", 0, batch[:-1], version=3)).error_code == ErrorCode.CORRUPT_MESSAGE
    fetched = await client.fetch("v3any", 0, 0, version=4)
    assert fetched.high_watermark == 3 and values(fetched.records) == [b"m1", b"a", b"a"]


async def test_fetch_v4_isolation_levels_read_the_same_committed_log(client, message_set, fetch_body):
    await client.produce("isolation", 0, message_set(b"a", b"b"))
    answers = {}
    for level in (0, 1):
        body = {**fetch_body([("isolation", 0, 0, 1 << 20), ("isolation", 7, 0, 1 << 20)]), "isolation_level": level}
        answers[level] = (await client.request(ApiKey.FETCH, 4, body)).responses[0].partitions
    for level, (found, missing) in answers.items():
        assert values(found.records) == [b"a", b"b"]
        # No transactions: everything below the high watermark is stable.
        assert (found.high_watermark, found.last_stable_offset) == (2, 2)
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and missing.last_stable_offset == -1
    assert answers[0][0].aborted_transactions is None  # READ_UNCOMMITTED: null, as Kafka
    assert answers[1][0].aborted_transactions == []


async def test_fetch_v4_with_an_unknown_isolation_level_closes_that_connection_only(connect, client, message_set,
                                                                                   fetch_body):
    await client.produce("isolation2", 0, message_set(b"a"))
    bad = await connect()
    body = {**fetch_body([("isolation2", 0, 0, 1 << 20)]), "isolation_level": 2}
    await bad.send(ApiKey.FETCH, 4, body)
    assert await bad.closed_by_peer()
    assert values((await client.fetch("isolation2", 0, 0, version=4)).records) == [b"a"]
