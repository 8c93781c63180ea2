"""The lazily converted records of a Fetch v0-v3 response (broker.down_conversion): the size
they promise, and bytes that old consumers read as whole entries then a partial one, from a
real segment-like file of v2 batches."""

import struct

import crcmod.predefined
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from minikafka.broker.down_conversion import CHUNK, DownConvertedRecords
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.records import iter_entries
from minikafka.storage.types import FileSlice

NOW = 1_700_000_000_000
crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def v2_set(batches: int, records: int, *, value: bytes = b"v", headers=(), base_offset: int = 0,
           codec: int = 0) -> bytes:
    out = bytearray()
    offset = base_offset
    for _ in range(batches):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
        for delta in range(records):
            builder.append(delta, timestamp=NOW + delta, key=None, value=value, headers=list(headers))
        batch = bytearray(builder.build())
        struct.pack_into(">q", batch, 0, offset)
        out += batch
        offset += records
    return bytes(out)


def zstd(data: bytes) -> bytes:
    """A one-batch set marked zstd (the conversion refuses it before decompressing)."""
    out = bytearray(data)
    struct.pack_into(">h", out, 21, 4)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@pytest.fixture
def slice_of(tmp_path):
    files = []

    def make(data: bytes, length: int | None = None) -> FileSlice:
        path = tmp_path / f"{len(files):020d}.log"
        path.write_bytes(data)
        files.append(open(path, "rb", buffering=0))
        return FileSlice(files[-1], 0, len(data) if length is None else length)

    yield make
    for file in files:
        file.close()


def read_offsets(data: bytes) -> list[int]:
    """Offsets of the records kafka-python reads; the bytes after them must be a partial entry."""
    records = MemoryRecords(data)
    offsets = []
    while records.has_next():
        offsets += [record.offset for record in records.next_batch()]
    return offsets


def test_a_conversion_smaller_than_the_slice_is_filled_up_with_an_overflow_entry(slice_of):
    # Headers dropped: the magic 1 messages are far smaller than the batches they come from.
    data = v2_set(20, 50, headers=[("traceparent", b"x" * 200)])
    records = DownConvertedRecords(slice_of(data), 1, 0)
    assert records.length == len(data)
    sent = records.read_bytes()
    assert len(sent) == len(data)
    assert read_offsets(sent) == list(range(1000))
    tail = sent[sum(e.size for e in iter_entries(sent)):]
    assert struct.unpack_from(">qi", tail) == (-1, len(tail) + 1)
    assert not tail[12:].strip(b"\0")


def test_a_conversion_larger_than_the_slice_is_cut_to_its_size(slice_of):
    # Tiny records: each magic 1 message (34 bytes of overhead) outgrows its v2 record.
    data = v2_set(3 * CHUNK // 2000, 200)
    records = DownConvertedRecords(slice_of(data), 0, 0)
    assert records.length == len(data)
    sent = records.read_bytes()
    assert len(sent) == len(data)
    offsets = read_offsets(sent)
    assert offsets == list(range(len(offsets))) and 0 < len(offsets) < 200 * (3 * CHUNK // 2000)


def test_the_first_converted_entry_is_sent_whole_even_when_it_outgrows_the_slice(slice_of):
    data = v2_set(1, 300, base_offset=40, codec=1)
    records = DownConvertedRecords(slice_of(data), 1, 40)
    assert records.length > len(data)
    assert read_offsets(records.read_bytes()) == list(range(40, 340))


def test_a_slice_with_nothing_to_convert_promises_nothing(slice_of):
    data = v2_set(1, 5)
    assert DownConvertedRecords(slice_of(data), 1, 5).length == 0  # every record before the fetch offset


def test_a_first_entry_cut_short_goes_out_as_it_is(slice_of):
    data = v2_set(1, 5)
    records = DownConvertedRecords(slice_of(data, length=30), 0, 0)
    assert records.read_bytes() == data[:30]


def test_zstd_refuses_the_partition_when_first_and_ends_the_conversion_when_later(slice_of):
    with pytest.raises(RecordError) as refused:
        DownConvertedRecords(slice_of(zstd(v2_set(1, 3))), 1, 0)
    assert refused.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    data = v2_set(2, 3) + zstd(v2_set(1, 3, base_offset=6)) + v2_set(1, 3, base_offset=9)
    records = DownConvertedRecords(slice_of(data), 1, 0)
    sent = records.read_bytes()
    assert len(sent) == len(data)
    assert read_offsets(sent) == list(range(6))  # the consumer fetches 6 next, and gets the error


async def test_fetch_below_v4_reads_a_v2_topic_in_the_magic_it_knows_v4_as_stored(broker, client):
    """A record batch with headers on a topic of the default format (v2): Fetch v0/v1 get it
    as magic 0, v2/v3 as magic 1 (headers dropped), v4 the stored batch by sendfile."""
    from minikafka.protocol.records import iter_records

    data = v2_set(1, 5, headers=[("h", b"x")], codec=1, value=b"v" * 100)
    assert data[22] & 7 == 1
    assert (await client.produce("v2", 0, data, version=3)).error_code == ErrorCode.NONE
    stored = broker.log_manager.get_log("v2", 0).read(0, 1 << 20).read_bytes()
    for version, magic in ((0, 0), (1, 0), (2, 1), (3, 1), (4, 2)):
        fetched = await client.fetch("v2", 0, 2, version=version)
        assert fetched.error_code == ErrorCode.NONE
        records = bytes(fetched.records)
        assert {e.magic for e in iter_entries(records)} == {magic}
        assert [(r.offset, r.value) for r in iter_records(records)] == [(o, b"v" * 100) for o in range(5)]
        if magic == 2:
            assert records == stored
        else:
            assert read_offsets(records) == list(range(5))  # compressed: from the batch's start, as Kafka


async def test_fetch_below_v4_of_a_zstd_batch_is_unsupported_compression_type(client):
    data = v2_set(1, 3, codec=4, value=b"compressible " * 50)
    assert data[22] & 7 == 4
    assert (await client.produce("z", 0, data, version=7)).error_code == ErrorCode.NONE
    for version in (0, 3):
        fetched = await client.fetch("z", 0, 0, version=version)
        assert (fetched.error_code, fetched.high_watermark, bytes(fetched.records)) == (
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, -1, b"")
