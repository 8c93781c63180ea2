"""Down-conversion of magic 2 batches (and mixed sets) for consumers of Fetch v0-v3, with
batches built by kafka-python's DefaultRecordBatchBuilder and the output read back by
kafka-python's legacy record reader (both implementations that are not ours)."""

import struct
import tracemalloc

import crcmod.predefined
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from minikafka.protocol.compression import MESSAGE_SET_CODECS, Codec
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.records import (
    LOG_APPEND_TIME,
    build_message_set,
    down_convert,
    down_converted,
    iter_entries,
)

NOW = 1_700_000_000_000
RECORDS = [(b"key-%d" % i if i % 3 else None, b"value %d " % i * (i + 4), NOW + i * 7) for i in range(12)]
RECORDS[4] = (b"", None, NOW - 1000)
HEADERS = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), ("empty", None)]
crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def batch(records=RECORDS, *, base_offset=0, codec=Codec.NONE, headers=HEADERS, transactional=False,
          producer_id=-1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=int(transactional), producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1, base_sequence=0 if producer_id >= 0 else -1,
        batch_size=1 << 24,
    )
    for delta, (key, value, timestamp) in enumerate(records):
        assert builder.append(delta, timestamp=timestamp, key=key, value=value, headers=headers) is not None
    data = bytearray(builder.build())
    assert data[16] == 2 and struct.unpack_from(">h", data, 21)[0] & 7 == codec
    struct.pack_into(">q", data, 0, base_offset)  # outside the CRC, as the broker assigns it
    return bytes(data)


def patched(data: bytes, position: int, fmt: str, value) -> bytes:
    """``data`` (one batch) with a header field overwritten and its CRC-32C fixed."""
    out = bytearray(data)
    struct.pack_into(fmt, out, position, value)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def with_attributes(data: bytes, bits: int) -> bytes:
    return patched(data, 21, ">h", struct.unpack_from(">h", data, 21)[0] | bits)


def expected(records, base_offset, magic):
    """What kafka-python's reader gives for ``records`` converted to ``magic``."""
    return [(base_offset + i, ts if magic else None, (0 if magic else None), key, value)
            for i, (key, value, ts) in enumerate(records)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", MESSAGE_SET_CODECS)
def test_v2_batches_with_headers_are_read_by_kafka_pythons_legacy_reader(codec, magic, kafka_python_records):
    data = batch(RECORDS[:7], base_offset=100, codec=codec) + batch(RECORDS[7:], base_offset=107, codec=codec)
    converted = down_convert(data, magic)
    entries = list(iter_entries(converted))
    assert {e.magic for e in entries} == {magic}
    assert {e.codec for e in entries} == {codec}
    if codec != Codec.NONE:  # one wrapper per batch, at its last offset
        assert [e.offset for e in entries] == [106, 111]
    assert kafka_python_records.read(converted) == expected(RECORDS, 100, magic)


@pytest.mark.parametrize("magic", [0, 1])
def test_an_uncompressed_batch_loses_the_records_before_the_fetch_offset_a_compressed_one_none(
        magic, kafka_python_records):
    plain = batch(base_offset=50)
    assert [r[0] for r in kafka_python_records.read(down_convert(plain, magic, 55))] == list(range(55, 62))
    compressed = batch(base_offset=50, codec=Codec.GZIP)
    assert [r[0] for r in kafka_python_records.read(down_convert(compressed, magic, 55))] == list(range(50, 62))


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.SNAPPY])
def test_log_append_time_carries_the_batch_time_and_type_to_magic_1(codec, kafka_python_records):
    data = with_attributes(batch(codec=codec), 0x08)  # LogAppendTime: every record takes maxTimestamp
    max_timestamp = struct.unpack_from(">q", data, 35)[0]
    converted = down_convert(data, 1)
    assert {(ts, kind) for _, ts, kind, _, _ in kafka_python_records.read(converted)} == {(max_timestamp, LOG_APPEND_TIME)}
    for entry in iter_entries(converted):
        assert entry.attributes & 0x08 and entry.timestamp == max_timestamp
    if codec != Codec.NONE:  # the inner messages carry the type bit too, as Kafka's builder writes them
        (wrapper,) = iter_entries(converted)
        inner = build_message_set([(k, v, max_timestamp) for k, v, _ in RECORDS], magic=1, codec=Codec.NONE,
                                  timestamp_type=LOG_APPEND_TIME)
        assert [e.attributes for e in iter_entries(inner)] == [0x08] * len(RECORDS)
    assert {e.attributes for e in iter_entries(down_convert(data, 0))} == {int(codec)}


def test_control_and_empty_batches_convert_to_nothing_transactional_ones_are_kept(kafka_python_records):
    control = with_attributes(batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", NOW)], base_offset=3,
                                    headers=[], transactional=True, producer_id=9), 0x20)
    empty = patched(batch([(None, b"x", NOW)], base_offset=4, headers=[])[:61], 8, ">i", 49)
    empty = patched(empty, 57, ">i", 0)
    transactional = batch(RECORDS[:3], base_offset=0, transactional=True, producer_id=9)
    plain = batch(RECORDS[3:5], base_offset=5)
    converted = down_convert(transactional + control + empty + plain, 1)
    assert [r[0] for r in kafka_python_records.read(converted)] == [0, 1, 2, 5, 6]
    assert down_convert(control + empty, 0) == b""


def test_a_zstd_batch_is_refused_after_what_came_before_it_was_converted():
    zstd = patched(batch(RECORDS[2:], base_offset=2), 21, ">h", 4)  # refused before decompression
    converted = down_converted([batch(RECORDS[:2]) + zstd], 1, 0)
    first = next(converted)
    assert [e.offset for e in iter_entries(first)] == [0, 1]
    with pytest.raises(RecordError) as refused:
        list(converted)
    assert refused.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(RecordError) as refused:
        down_convert(zstd, 0)
    assert refused.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_a_mixed_set_keeps_magic_1_entries_bytes_for_magic_1_and_converts_all_for_magic_0(kafka_python_records):
    old = build_message_set(RECORDS[:4], magic=1, codec=Codec.LZ4) + build_message_set(
        RECORDS[4:6], magic=1, base_offset=4)
    new = batch(RECORDS[6:], base_offset=6, codec=Codec.LZ4)
    to_magic_1 = down_convert(old + new, 1)
    assert to_magic_1.startswith(old)
    assert kafka_python_records.read(to_magic_1) == expected(RECORDS, 0, 1)
    to_magic_0 = down_convert(old + new, 0)
    assert {e.magic for e in iter_entries(to_magic_0)} == {0}
    assert kafka_python_records.read(to_magic_0) == expected(RECORDS, 0, 0)


# Golden bytes: a v2 batch of two records, one with a header, at offsets 7 and 8.
GOLDEN_RECORDS = [(b"k", b"v1", 1000), (None, b"v2", 1005)]
GOLDEN_MAGIC_1 = bytes.fromhex(
    "0000000000000007" "00000019" "43a94d68" "01" "00" "00000000000003e8" "00000001" "6b" "00000002" "7631"
    "0000000000000008" "00000018" "5fce508c" "01" "00" "00000000000003ed" "ffffffff" "00000002" "7632"
)
GOLDEN_MAGIC_0 = bytes.fromhex(
    "0000000000000007" "00000011" "61505427" "00" "00" "00000001" "6b" "00000002" "7631"
    "0000000000000008" "00000010" "d5960a78" "00" "00" "ffffffff" "00000002" "7632"
)


def test_golden_bytes_of_a_converted_batch(kafka_python_records):
    source = batch(GOLDEN_RECORDS[:1], base_offset=7, headers=[("h", b"x")]) + batch(
        GOLDEN_RECORDS[1:], base_offset=8, headers=[])
    assert down_convert(source, 1) == GOLDEN_MAGIC_1
    assert down_convert(source, 0) == GOLDEN_MAGIC_0
    # and the same bytes as kafka-python's own legacy builder writes
    assert GOLDEN_MAGIC_1 == kafka_python_records.build(1, 0, GOLDEN_RECORDS, offsets=[7, 8])
    assert GOLDEN_MAGIC_0 == kafka_python_records.build(0, 0, GOLDEN_RECORDS, offsets=[7, 8])


@given(cuts=st.lists(st.integers(min_value=1, max_value=3000), max_size=12), magic=st.sampled_from([0, 1]),
       end=st.integers(min_value=0, max_value=40))
@settings(max_examples=120, deadline=None)
def test_any_cutting_into_chunks_converts_as_the_whole(cuts, magic, end):
    data = (batch(RECORDS[:5], codec=Codec.SNAPPY) + build_message_set(RECORDS[5:7], magic=1, base_offset=5)
            + batch(RECORDS[7:], base_offset=7))
    data = data[: len(data) - end]  # a truncated tail, as a fetch limit leaves one
    chunks, position = [], 0
    for size in cuts:
        chunks.append(data[position : position + size])
        position += size
    chunks.append(data[position:])
    assert b"".join(down_converted(chunks, magic, 0)) == down_convert(data, magic)


def _converted_peak(partition_bytes: int, one: bytes, chunk: int) -> int:
    """Bytes ``down_converted`` allocates at most while it converts a partition of copies of
    the batch ``one`` (offsets renumbered), fed in ``chunk``-byte pieces as from a file."""
    count = partition_bytes // len(one)

    def chunks():
        buffer = bytearray()
        for index in range(count):
            buffer += one
            struct.pack_into(">q", buffer, len(buffer) - len(one), index * 64)
            while len(buffer) >= chunk:
                yield bytes(buffer[:chunk])
                del buffer[:chunk]
        yield bytes(buffer)

    tracemalloc.start()
    try:
        converted = 0
        for piece in down_converted(chunks(), 1, 0):
            converted += len(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert converted > count * len(one)  # magic 1 messages are larger than v2 records
    return peak


def test_conversion_holds_one_chunk_and_one_batch_whatever_the_partition_size():
    """Partitions of 2 and 12 MiB in 64 KiB batches, read in 128 KiB chunks: the peak is
    the same, and a few chunks' worth, not the partition's size."""
    one = batch([(b"key", bytes(range(256)) * 4, NOW)] * 64, headers=[("h", b"v")])
    small = _converted_peak(2 << 20, one, 128 * 1024)
    large = _converted_peak(12 << 20, one, 128 * 1024)
    assert large < 1 << 20, f"peak {large} bytes"
    assert large < small * 1.25, f"peak {large} bytes for 12 MiB, {small} for 2 MiB"


@given(data=st.binary(min_size=26, max_size=300), size=st.integers(14, 400))
@settings(max_examples=200, deadline=None)
def test_garbage_marked_magic_2_only_ever_raises_record_error(data, size):
    entry = bytearray(data)
    struct.pack_into(">i", entry, 8, size)
    entry[16] = 2
    for magic in (0, 1):
        try:
            down_convert(bytes(entry), magic)
        except RecordError as error:
            assert error.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
