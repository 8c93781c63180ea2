"""Reading, building and down-converting magic 0/1 message sets, cross-checked with
kafka-python's own legacy record builder and reader."""

import struct
import zlib

import kafka.codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.protocol.compression import MESSAGE_SET_CODECS, Codec
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP_TYPE,
    Entry,
    Record,
    build_message_set,
    down_convert,
    iter_entries,
    iter_records,
)

NOW = 1_700_000_000_000
RECORDS = [(b"key-%d" % i if i % 3 else None, b"value %d " % i * (i + 1), NOW + i * 7) for i in range(20)]
RECORDS[5] = (b"", None, NOW - 1)  # empty key, null value


def ours(buf):
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in iter_records(buf)]


ALL_FORMATS = [(magic, codec) for magic in (0, 1) for codec in MESSAGE_SET_CODECS]


# --- iter_entries -------------------------------------------------------------------------


def test_iter_entries_shallow_uncompressed():
    data = build_message_set(RECORDS, magic=1, base_offset=40)
    entries = list(iter_entries(data))
    assert [e.offset for e in entries] == list(range(40, 60))
    assert entries[0].position == 0
    for before, after in zip(entries, entries[1:]):
        assert after.position == before.position + before.size
    assert entries[-1].position + entries[-1].size == len(data)
    assert all(e.magic == 1 and e.codec == Codec.NONE and e.attributes == 0 for e in entries)
    assert [e.timestamp for e in entries] == [ts for _, _, ts in RECORDS]


@pytest.mark.parametrize("magic", [0, 1])
def test_iter_entries_sees_a_wrapper_as_one_entry(magic):
    data = build_message_set(RECORDS, magic=magic, codec=Codec.GZIP, base_offset=100)
    (entry,) = iter_entries(data)
    assert entry == Entry(
        offset=119,
        position=0,
        size=len(data),
        magic=magic,
        attributes=Codec.GZIP,
        timestamp=max(ts for _, _, ts in RECORDS) if magic else -1,
        codec=Codec.GZIP,
    )


def test_iter_entries_stops_silently_at_a_truncated_tail():
    data = build_message_set(RECORDS, magic=1)
    sizes = [e.size for e in iter_entries(data)]
    whole = sum(sizes[:-1])
    for cut in (len(data) - 1, whole + 11, whole + 12, whole + 30, whole):
        assert len(list(iter_entries(data[:cut]))) == len(sizes) - 1
    assert list(iter_entries(b"")) == []
    assert list(iter_entries(data[:5])) == []


@pytest.mark.parametrize("magic,size", [(0, -1), (0, 0), (0, 13), (1, 13), (1, 21)])
def test_iter_entries_refuses_impossible_sizes(magic, size):
    data = bytearray(build_message_set(RECORDS[:2], magic=magic))
    struct.pack_into(">i", data, 8, size)
    with pytest.raises(RecordError) as error:
        list(iter_entries(data))
    assert error.value.code == ErrorCode.CORRUPT_MESSAGE


def test_iter_entries_refuses_unknown_magic_and_codec():
    data = bytearray(build_message_set(RECORDS[:1], magic=1))
    data[16] = 2
    with pytest.raises(RecordError):
        list(iter_entries(data))
    data[16] = 1
    data[17] = 5
    with pytest.raises(RecordError):
        list(iter_entries(data))


def test_iter_entries_accepts_memoryview_without_copying():
    data = bytearray(build_message_set(RECORDS, magic=1))
    assert len(list(iter_entries(memoryview(data)))) == len(RECORDS)


# --- iter_records and build_message_set against kafka-python -----------------------------


@pytest.mark.parametrize("magic,codec", ALL_FORMATS)
def test_sets_built_by_kafka_python_read_back_deep(magic, codec, kafka_python_records):
    data = kafka_python_records.build(magic, codec, RECORDS)
    records = list(iter_records(data))
    assert [(r.key, r.value) for r in records] == [(k, v) for k, v, _ in RECORDS]
    assert all(r.magic == magic for r in records)
    if magic == 1:
        assert [r.timestamp for r in records] == [ts for _, _, ts in RECORDS]
        assert {r.timestamp_type for r in records} == {CREATE_TIME}
        # kafka-python's wrapper sits at offset 0, so inner relative offsets go negative.
        expected_offsets = list(range(20)) if codec == Codec.NONE else list(range(-19, 1))
    else:
        assert {(r.timestamp, r.timestamp_type) for r in records} == {(-1, NO_TIMESTAMP_TYPE)}
        expected_offsets = list(range(20))
    assert [r.offset for r in records] == expected_offsets


@pytest.mark.parametrize("magic,codec", ALL_FORMATS)
def test_sets_we_build_read_back_in_kafka_python(magic, codec, kafka_python_records):
    data = build_message_set(RECORDS, magic=magic, codec=codec, base_offset=1000)
    theirs = kafka_python_records.read(data)
    assert [(o, k, v) for o, _, _, k, v in theirs] == [(1000 + i, k, v) for i, (k, v, _) in enumerate(RECORDS)]
    if magic == 1:
        assert [(ts, tt) for _, ts, tt, _, _ in theirs] == [(ts, 0) for _, _, ts in RECORDS]
    assert ours(data) == [
        (1000 + i, ts if magic else -1, 0 if magic else -1, k, v) for i, (k, v, ts) in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("codec", MESSAGE_SET_CODECS)
def test_log_append_time_sets_take_the_wrapper_timestamp(codec, kafka_python_records):
    data = build_message_set(RECORDS, magic=1, codec=codec, timestamp_type=LOG_APPEND_TIME)
    theirs = kafka_python_records.read(data)
    assert {tt for _, _, tt, _, _ in theirs} == {LOG_APPEND_TIME}
    assert ours(data) == [(o, ts, tt, k, v) for o, ts, tt, k, v in theirs]


def test_magic_1_wrapper_offsets_are_relative_and_the_wrapper_holds_the_last():
    data = build_message_set(RECORDS[:3], magic=1, codec=Codec.GZIP, base_offset=7)
    (entry,) = iter_entries(data)
    assert entry.offset == 9
    value_length_at = entry.position + 12 + 14 + 4  # crc magic attributes timestamp, null key
    (value_length,) = struct.unpack_from(">i", data, value_length_at)
    inner = kafka.codec.gzip_decode(bytes(data[value_length_at + 4 : value_length_at + 4 + value_length]))
    assert [o for o, *_ in _shallow(inner)] == [0, 1, 2]


def test_magic_0_wrapper_offsets_are_absolute():
    data = build_message_set(RECORDS[:3], magic=0, codec=Codec.GZIP, base_offset=7)
    (entry,) = iter_entries(data)
    value_length_at = entry.position + 12 + 6 + 4  # crc magic attributes, null key
    (value_length,) = struct.unpack_from(">i", data, value_length_at)
    inner = kafka.codec.gzip_decode(bytes(data[value_length_at + 4 : value_length_at + 4 + value_length]))
    assert [o for o, *_ in _shallow(inner)] == [7, 8, 9]


def _shallow(buf):
    return [(e.offset, e.magic) for e in iter_entries(buf)]


def test_empty_input_builds_an_empty_set():
    assert build_message_set([], magic=1) == b""
    assert build_message_set([], magic=1, codec=Codec.LZ4) == b""


def test_iter_records_skips_a_truncated_tail_but_refuses_bad_crc():
    data = build_message_set(RECORDS, magic=1)
    assert len(list(iter_records(data[:-3]))) == len(RECORDS) - 1
    corrupted = bytearray(data)
    corrupted[40] ^= 0x01
    with pytest.raises(RecordError) as error:
        list(iter_records(corrupted))
    assert error.value.code == ErrorCode.CORRUPT_MESSAGE


def test_iter_records_refuses_a_corrupt_inner_message():
    inner = bytearray(build_message_set(RECORDS[:3], magic=1))
    inner[-1] ^= 0xFF  # inner CRC now wrong; the wrapper's CRC is computed over it afresh
    from minikafka.protocol.compression import compress

    wrapper = bytearray(build_message_set([(None, compress(Codec.GZIP, bytes(inner), magic=1), NOW)], magic=1))
    wrapper[17] = Codec.GZIP
    struct.pack_into(">I", wrapper, 12, zlib.crc32(wrapper[16:]))
    with pytest.raises(RecordError) as error:
        list(iter_records(wrapper))
    assert "CRC" in str(error.value)


def test_records_are_values():
    (record,) = iter_records(build_message_set([(b"k", b"v", 5)], magic=1, base_offset=3))
    assert record == Record(offset=3, timestamp=5, timestamp_type=CREATE_TIME, key=b"k", value=b"v", magic=1)


# --- down-conversion ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", MESSAGE_SET_CODECS)
def test_down_convert_is_read_by_kafka_pythons_magic_0_reader(codec, kafka_python_records):
    data = build_message_set(RECORDS, magic=1, codec=codec, base_offset=500)
    converted = down_convert(data)
    assert {e.magic for e in iter_entries(converted)} == {0}
    assert [e.codec for e in iter_entries(converted)] == [e.codec for e in iter_entries(data)]
    assert kafka_python_records.read(converted) == [
        (500 + i, None, None, k, v) for i, (k, v, _) in enumerate(RECORDS)
    ]
    assert [(r.offset, r.key, r.value) for r in iter_records(converted)] == [
        (r.offset, r.key, r.value) for r in iter_records(data)
    ]


def test_down_convert_keeps_offsets_across_several_entries_and_drops_a_truncated_tail(kafka_python_records):
    first = build_message_set(RECORDS[:5], magic=1, codec=Codec.LZ4, base_offset=10)
    second = build_message_set(RECORDS[5:8], magic=1, base_offset=15)
    third = build_message_set(RECORDS[8:], magic=1, codec=Codec.SNAPPY, base_offset=18)
    data = first + second + third
    converted = down_convert(data + third[:20])
    assert [o for o, *_ in kafka_python_records.read(converted)] == list(range(10, 30))
    assert [e.offset for e in iter_entries(converted)] == [14, 15, 16, 17, 29]
    # Nothing whole at all: the cut bytes go out as they are, for the client to report.
    assert down_convert(third[:20]) == third[:20]


def test_down_convert_copies_magic_0_bytes_unchanged():
    data = build_message_set(RECORDS, magic=0, codec=Codec.SNAPPY, base_offset=3) + build_message_set(
        RECORDS[:2], magic=0, base_offset=23
    )
    assert down_convert(data) == data


def test_down_convert_of_log_append_time_drops_the_timestamp_type_bit():
    data = build_message_set(RECORDS[:4], magic=1, timestamp_type=LOG_APPEND_TIME)
    assert {e.attributes for e in iter_entries(down_convert(data))} == {0}


# --- property-based round trips ---------------------------------------------------------

record_lists = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        st.integers(min_value=-1, max_value=2**62),
    ),
    min_size=1,
    max_size=25,
)


@given(records=record_lists, magic=st.sampled_from([0, 1]), codec=st.sampled_from(MESSAGE_SET_CODECS),
       base_offset=st.integers(min_value=0, max_value=2**62))
@settings(max_examples=120, deadline=None)
def test_build_then_read_round_trips(records, magic, codec, base_offset, kafka_python_records):
    data = build_message_set(records, magic=magic, codec=codec, base_offset=base_offset)
    got = list(iter_records(data))
    assert [(r.offset, r.key, r.value) for r in got] == [
        (base_offset + i, k, v) for i, (k, v, _) in enumerate(records)
    ]
    assert [r.timestamp for r in got] == ([ts for _, _, ts in records] if magic else [-1] * len(records))
    assert [(o, k, v) for o, _, _, k, v in kafka_python_records.read(data)] == [
        (base_offset + i, k, v) for i, (k, v, _) in enumerate(records)
    ]
    converted = down_convert(data)
    assert [(r.offset, r.key, r.value, r.magic) for r in iter_records(converted)] == [
        (r.offset, r.key, r.value, 0) for r in got
    ]


@given(records=record_lists, cut=st.integers(min_value=0, max_value=10_000))
@settings(max_examples=80, deadline=None)
def test_any_prefix_reads_as_the_whole_entries_it_holds(records, cut):
    data = build_message_set(records, magic=1)
    prefix = data[: min(cut, len(data))]
    whole = [e for e in iter_entries(data) if e.position + e.size <= len(prefix)]
    assert list(iter_entries(prefix)) == whole
    assert [r.offset for r in iter_records(prefix)] == [e.offset for e in whole]
    assert [e.offset for e in iter_entries(down_convert(prefix))] == [e.offset for e in whole]


@given(data=st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_readers_only_ever_raise_record_error_on_garbage(data):
    for reader in (lambda b: list(iter_entries(b)), lambda b: list(iter_records(b)), down_convert):
        try:
            reader(data)
        except RecordError as error:
            assert error.code == ErrorCode.CORRUPT_MESSAGE


@given(records=record_lists, codec=st.sampled_from(MESSAGE_SET_CODECS), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=3))
@settings(max_examples=150, deadline=None)
def test_readers_only_ever_raise_record_error_on_mutated_sets(records, codec, flips):
    data = bytearray(build_message_set(records, magic=1, codec=codec))
    for position, mask in flips:
        data[position % len(data)] ^= mask
    for reader in (lambda b: list(iter_entries(b)), lambda b: list(iter_records(b)), down_convert):
        try:
            reader(bytes(data))
        except RecordError as error:
            assert error.code == ErrorCode.CORRUPT_MESSAGE
