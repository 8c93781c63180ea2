"""Produce v3-v7 and Fetch v4-v6 on topics of magic 2 (the default): batches stored and
served as produced, zstd from Produce v7 only, the log start offset in v5 answers."""

from __future__ import annotations

import time

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
