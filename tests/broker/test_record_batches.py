"""Produce v3-v8 and Fetch v4-v6 on topics of magic 2 (the default): batches stored and
served as produced, zstd from Produce v7 only, the log start offset in v5 answers, the
refused records in v8 answers."""

from __future__ import annotations

import time

import pytest

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.compression import Codec
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.record_batch import build_record_batch
from minikafka.protocol.records import iter_entries, iter_records

HEADERS = (("traceparent", b"00-4bf92f3577b34da6-01"),)


def batch(*values: bytes, codec: Codec = Codec.NONE) -> bytes:
    now = int(time.time() * 1000)
    return bytes(build_record_batch([(None, value, now, HEADERS) for value in values], codec=codec))


async def test_batches_are_stored_and_served_as_produced(client):
    produced = batch(b"a", b"b", codec=Codec.LZ4)
    answer = await client.produce("v2", 0, produced, version=3)
    assert (answer.error_code, answer.base_offset) == (0, 0)
    fetched = await client.fetch("v2", 0, 0, version=4)
    served = bytes(fetched.records)
    assert [entry.magic for entry in iter_entries(served)] == [2]
    assert served[21:] == produced[21:]  # attributes to the end: the producer's bytes
    assert [(r.offset, r.value, r.headers) for r in iter_records(served)] == [(0, b"a", HEADERS), (1, b"b", HEADERS)]


async def test_magic_1_sets_are_up_converted(client, message_set):
    assert (await client.produce("up", 0, message_set(b"m1", b"m2"), version=2)).base_offset == 0
    fetched = await client.fetch("up", 0, 0, version=4)
    assert [(e.magic, e.offset) for e in iter_entries(bytes(fetched.records))] == [(2, 1)]
    assert [r.value for r in iter_records(bytes(fetched.records))] == [b"m1", b"m2"]


async def test_zstd_needs_produce_v7(client):
    compressed = batch(b"z" * 100, codec=Codec.ZSTD)
    assert (await client.produce("zstd", 0, compressed, version=6)).error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    answer = await client.produce("zstd", 0, compressed, version=7)
    assert (answer.error_code, answer.base_offset) == (0, 0)
    fetched = await client.fetch("zstd", 0, 0, version=6)
    assert [r.value for r in iter_records(bytes(fetched.records))] == [b"z" * 100]


async def test_v5_answers_carry_the_log_start_offset(client):
    answer = await client.produce("start", 0, batch(b"x"), version=5)
    assert (answer.error_code, answer.log_start_offset) == (0, 0)
    fetched = await client.fetch("start", 0, 0, version=5)
    assert (fetched.error_code, fetched.high_watermark, fetched.log_start_offset) == (0, 1, 0)


def _timed_batch(*timestamps: int) -> bytes:
    return bytes(build_record_batch([(b"k", b"v", timestamp, ()) for timestamp in timestamps]))


async def test_v8_names_the_records_out_of_timestamp_range(start_broker, connect):
    await start_broker({"log.message.timestamp.difference.max.ms": "3600000"})
    client = await connect()
    now = int(time.time() * 1000)
    produced = _timed_batch(now, now - 7200_000, now, now + 7200_000)
    old = await client.produce("timed", 0, produced, version=7)
    assert (old.error_code, old.base_offset) == (ErrorCode.INVALID_TIMESTAMP, -1)
    answer = await client.produce("timed", 0, produced, version=8)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.INVALID_TIMESTAMP, -1)
    assert answer.error_message.startswith("One or more records have been rejected due to invalid timestamp")
    assert [e.batch_index for e in answer.record_errors] == [1, 3]
    assert answer.record_errors[0].batch_index_error_message.startswith(
        f"Timestamp {now - 7200_000} of message with offset 1 is out of range.")
    assert (await client.fetch("timed", 0, 0, version=4)).high_watermark == 0


async def create_topic(client, name: str, **configs: str) -> None:
    created = await client.request(ApiKey.CREATE_TOPICS, 0, {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                    "configs": [{"name": key.replace("_", "."), "value": value} for key, value in configs.items()]}],
        "timeout_ms": 1000})
    assert [t.error_code for t in created.topics] == [0]


async def test_v8_names_the_keyless_records_a_compacted_topic_refuses(client):
    await create_topic(client, "compacted", cleanup_policy="compact")
    now = int(time.time() * 1000)
    keyless = bytes(build_record_batch([(b"k", b"a", now, ()), (None, b"b", now, ()), (None, b"c", now, ())]))
    old = await client.produce("compacted", 0, keyless, version=7)
    assert (old.error_code, old.base_offset) == (ErrorCode.CORRUPT_MESSAGE, -1)
    answer = await client.produce("compacted", 0, keyless, version=8)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.INVALID_RECORD, -1)
    assert answer.error_message == "One or more records have been rejected"
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (i, "Compacted topic cannot accept message without key in topic partition compacted-0.") for i in (1, 2)]


COMPRESSION_TYPES = {"uncompressed": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4,
                     "zstd": Codec.ZSTD}


@pytest.mark.parametrize("compression_type", COMPRESSION_TYPES)
async def test_the_topic_codec_applies_to_batches_and_up_converted_sets(client, message_set, compression_type):
    await create_topic(client, "coded", compression_type=compression_type)
    now = int(time.time() * 1000)
    produced = [  # each in another codec than the topic's, then in the topic's
        bytes(build_record_batch([(b"k", b"lz4-%d" % i, now, HEADERS) for i in range(3)], codec=Codec.LZ4,
                                 producer_id=7, producer_epoch=0, base_sequence=0)),
        message_set(b"m1-a", b"m1-b", codec=Codec.GZIP),
        message_set(b"plain"),
        batch(b"same", codec=COMPRESSION_TYPES[compression_type]),
    ]
    for records in produced:
        assert (await client.produce("coded", 0, records, version=7)).error_code == 0
    served = bytes((await client.fetch("coded", 0, 0, version=10)).records)
    assert [e.codec for e in iter_entries(served)] == [COMPRESSION_TYPES[compression_type]] * 4
    assert [(r.offset, r.value, r.headers) for r in iter_records(served)] == (
        [(i, b"lz4-%d" % i, HEADERS) for i in range(3)]
        + [(3, b"m1-a", ()), (4, b"m1-b", ()), (5, b"plain", ()), (6, b"same", HEADERS)])
    # The producer's sequence survives the rebuild: its retry is still recognised
    assert (await client.produce("coded", 0, produced[0], version=7)).base_offset == 0


async def test_producer_keeps_each_producer_codec(client, message_set):
    await create_topic(client, "kept", compression_type="producer")
    assert (await client.produce("kept", 0, batch(b"a", codec=Codec.SNAPPY), version=7)).error_code == 0
    assert (await client.produce("kept", 0, message_set(b"b", codec=Codec.GZIP), version=7)).error_code == 0
    served = bytes((await client.fetch("kept", 0, 0, version=10)).records)
    assert [e.codec for e in iter_entries(served)] == [Codec.SNAPPY, Codec.GZIP]


async def test_fetch_below_v10_of_a_zstd_topic_is_unsupported_compression_type(client):
    await create_topic(client, "zstd-topic", compression_type="zstd")
    assert (await client.produce("zstd-topic", 0, batch(b"z"), version=7)).error_code == 0
    for version in (3, 4, 9):
        refused = await client.fetch("zstd-topic", 0, 0, version=version)
        assert (refused.error_code, refused.high_watermark) == (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, -1), version
    served = await client.fetch("zstd-topic", 0, 0, version=10)
    assert [r.value for r in iter_records(bytes(served.records))] == [b"z"]


async def test_a_fetch_answer_ends_at_a_whole_batch(client):
    produced = [batch(*[b"value %d" % i for i in range(count)]) for count in (20, 3, 20)]
    for records in produced:
        assert (await client.produce("whole", 0, records, version=3)).error_code == 0
    two = len(produced[0]) + len(produced[1])
    for limits in ({"partition_max_bytes": two + 10}, {"max_bytes": two + 10}):
        answer = await client.fetch("whole", 0, 0, version=4, **limits)
        served = bytes(answer.records)
        assert len(served) == two, limits  # not the 10 bytes of the third batch a consumer drops
        assert [r.value for r in iter_records(served)] == [b"value %d" % i for i in (*range(20), *range(3))]
