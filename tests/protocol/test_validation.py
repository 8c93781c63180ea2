"""Append-side validation and offset assignment (leader and follower paths), checked with
message sets built, and results read, by kafka-python's own legacy record code."""

import random
import struct
import zlib

import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.protocol import entries
from minikafka.protocol.compression import MESSAGE_SET_CODECS, Codec, compress
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.records import (
    LOG_APPEND_TIME,
    ValidationConfig,
    build_message_set,
    iter_entries,
    iter_records,
    validate_and_assign,
    validate_given_offsets,
)

NOW = 1_700_000_000_000
RECORDS = [(b"key-%d" % i if i % 3 else None, b"value %d " % i * (i + 1), NOW - 1000 + (i * 37) % 500) for i in range(20)]
MAX_TIMESTAMP = max(ts for _, _, ts in RECORDS)
CREATE = ValidationConfig(magic=1)
APPEND_TIME = ValidationConfig(magic=1, timestamp_type=LOG_APPEND_TIME)
ALL_FORMATS = [(magic, codec) for magic in (0, 1) for codec in MESSAGE_SET_CODECS]


def index_points(buf, anchor=-1, interval=0, untimed_at=-1):
    """``(position, last offset, max timestamp so far, its offset)`` of each entry a segment
    indexes when ``buf`` is appended at its start (by default every entry, messages without a
    timestamp not counted), from ``entries.index_entries``."""
    offset_entries, time_entries, *_ = entries.index_entries(buf, 0, anchor, interval, -1, -1, [(untimed_at, 0)])
    return [(position, offset, *time) for (offset, position), time in zip(offset_entries, time_entries)]


def expected_points(buf, anchor, interval, untimed_at):
    """``index_points``, derived from a validated set's shallow entries as written (a
    wrapper's timestamp is its entry's)."""
    points, max_ts, max_offset = [], -1, -1
    for entry in iter_entries(buf):
        timestamp = entry.timestamp if entry.timestamp >= 0 else untimed_at
        if timestamp > max_ts:
            max_ts, max_offset = timestamp, entry.offset
        if entry.position - anchor > interval:
            points.append((entry.position, entry.offset, max_ts, max_offset))
            anchor = entry.position
    return points


def refused(code, function, *args):
    with pytest.raises(RecordError) as error:
        function(*args)
    assert error.value.code == code, str(error.value)
    return str(error.value)


def wrapper_around(inner: bytes, *, magic=1, codec=Codec.GZIP, offset=0, timestamp=NOW, compressed=None):
    """A wrapper entry with a valid outer CRC around ``inner``, whatever ``inner`` holds."""
    value = compress(codec, inner, magic=magic) if compressed is None else compressed
    data = bytearray(build_message_set([(None, value, timestamp)], magic=magic, base_offset=offset))
    data[17] = codec
    struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    return bytes(data)


def payload_of(entry_bytes: bytes, magic: int) -> bytes:
    """Everything after the timestamp (key and value) of a single entry."""
    return entry_bytes[26 if magic else 18 :]


# --- happy paths, all formats ---------------------------------------------------------------


@pytest.mark.parametrize("magic,codec", ALL_FORMATS)
def test_kafka_python_sets_validate_get_offsets_and_read_back_deep(magic, codec, kafka_python_records):
    data = kafka_python_records.build(magic, codec, RECORDS)
    result = validate_and_assign(data, 1000, NOW, CREATE)
    assert (result.first_offset, result.last_offset, result.record_count) == (1000, 1019, 20)
    assert result.log_append_time == -1
    expected = [
        (1000 + i, ts if magic else None, 0 if magic else None, k, v) for i, (k, v, ts) in enumerate(RECORDS)
    ]
    assert kafka_python_records.read(result.buffer) == expected
    # Our deep reader agrees, magic 0's missing timestamp being -1 (type -1) here.
    assert [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in iter_records(result.buffer)] == [
        (o, -1 if ts is None else ts, -1 if tt is None else tt, k, v) for o, ts, tt, k, v in expected
    ]
    shallow = list(iter_entries(result.buffer))
    if magic == 0:
        assert (result.max_timestamp, result.offset_of_max_timestamp) == (-1, -1)
        assert (result.first_timestamp, result.first_untimed_offset) == (-1, shallow[0].offset)
        assert [point[2:] for point in index_points(result.buffer)] == [(-1, -1)] * len(shallow)
    elif codec == Codec.NONE:
        index = [ts for _, _, ts in RECORDS].index(MAX_TIMESTAMP)
        assert (result.max_timestamp, result.offset_of_max_timestamp) == (MAX_TIMESTAMP, 1000 + index)
        assert (result.first_timestamp, result.first_untimed_offset) == (RECORDS[0][2], -1)
        assert [point[2] for point in index_points(result.buffer)] == [
            max(ts for _, _, ts in RECORDS[: i + 1]) for i in range(20)
        ]
    else:
        assert (result.max_timestamp, result.offset_of_max_timestamp) == (MAX_TIMESTAMP, 1019)
        assert shallow[0].timestamp == MAX_TIMESTAMP  # Kafka sets the wrapper's CreateTime
        assert (result.first_timestamp, result.first_untimed_offset) == (MAX_TIMESTAMP, -1)
    assert [(p, o) for p, o, *_ in index_points(result.buffer)] == [(e.position, e.offset) for e in shallow]


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_magic_1_wrapper_is_never_recompressed(codec, kafka_python_records):
    data = kafka_python_records.build(1, codec, RECORDS)
    result = validate_and_assign(data, 77, NOW, CREATE)
    assert len(result.buffer) == len(data)
    assert payload_of(result.buffer, 1) == payload_of(data, 1)
    offset, _, _, _, _, timestamp = struct.unpack_from(">qiIbbq", result.buffer)
    assert (offset, timestamp) == (96, MAX_TIMESTAMP)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_magic_0_wrapper_is_recompressed_with_absolute_inner_offsets(codec, kafka_python_records):
    data = kafka_python_records.build(0, codec, RECORDS)
    result = validate_and_assign(data, 5000, NOW, CREATE)
    (entry,) = iter_entries(result.buffer)
    assert (entry.offset, entry.magic, entry.codec) == (5019, 0, codec)
    # kafka-python reads magic 0 inner offsets as they are: absolute.
    assert [o for o, *_ in kafka_python_records.read(result.buffer)] == list(range(5000, 5020))
    assert index_points(validate_and_assign(data, 5000, NOW, CREATE).buffer) == [(0, 5019, -1, -1)]


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("offsets", [[10 * i for i in range(20)], list(range(1, 21)), [0, 1, 2, 4] + list(range(5, 21))])
def test_magic_1_wrapper_with_other_inner_offsets_is_corrupt(codec, offsets, kafka_python_records):
    # KIP-31: the broker verifies the relative offsets instead of recompressing around them.
    data = kafka_python_records.build(1, codec, RECORDS, offsets=offsets)
    message = refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, data, 300, NOW, CREATE)
    first_wrong = next(i for i, offset in enumerate(offsets) if offset != i)
    assert f"inner message {first_wrong} " in message and f"relative offset {offsets[first_wrong]}," in message
    # Refused whatever else the set holds: a good wrapper before it does not get written.
    good = kafka_python_records.build(1, codec, RECORDS[:3])
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, good + data, 300, NOW, APPEND_TIME)


def test_input_buffer_is_not_modified(kafka_python_records):
    data = kafka_python_records.build(1, Codec.NONE, RECORDS)
    as_bytearray = bytearray(data)
    validate_and_assign(as_bytearray, 9, NOW, APPEND_TIME)
    validate_and_assign(memoryview(as_bytearray), 9, NOW, APPEND_TIME)
    assert as_bytearray == data


def test_several_entries_of_every_kind_get_consecutive_offsets_and_true_positions(kafka_python_records):
    data = (
        kafka_python_records.build(1, Codec.LZ4, RECORDS[:4])
        + kafka_python_records.build(1, Codec.NONE, RECORDS[4:7])
        + kafka_python_records.build(1, Codec.GZIP, RECORDS[7:9])
        + kafka_python_records.build(1, Codec.SNAPPY, RECORDS[9:])
    )
    result = validate_and_assign(data, 0, NOW, CREATE)
    assert [o for o, *_ in kafka_python_records.read(result.buffer)] == list(range(20))
    shallow = list(iter_entries(result.buffer))
    assert [(e.position, e.offset) for e in shallow] == [(p, o) for p, o, *_ in index_points(result.buffer)]
    assert [o for _, o, *_ in index_points(result.buffer)] == [3, 4, 5, 6, 8, 19]
    assert result.record_count == 20


# --- compression.type on a magic 0/1 log ------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("source,target", [(Codec.GZIP, Codec.LZ4), (Codec.NONE, Codec.SNAPPY), (Codec.LZ4, Codec.NONE)])
def test_the_topic_codec_rebuilds_a_set_of_another(magic, source, target, kafka_python_records):
    data = kafka_python_records.build(magic, source, RECORDS[:4]) + kafka_python_records.build(magic, Codec.NONE, RECORDS[4:])
    result = validate_and_assign(data, 300, NOW, ValidationConfig(magic=1, codec=target))
    shallow = list(iter_entries(result.buffer))
    assert {(e.magic, e.codec) for e in shallow} == {(magic, target)}
    assert len(shallow) == (20 if target == Codec.NONE else 1)
    theirs = kafka_python_records.read(result.buffer)  # magic 0 inner offsets absolute, magic 1 relative
    assert [(o, k, v) for o, _, _, k, v in theirs] == [(300 + i, k, v) for i, (k, v, _) in enumerate(RECORDS)]
    assert result.record_count == 20
    timed = magic == 1
    assert result.max_timestamp == (MAX_TIMESTAMP if timed else -1)
    maximum = 300 + next(i for i, (_, _, ts) in enumerate(RECORDS) if ts == MAX_TIMESTAMP)
    assert result.offset_of_max_timestamp == (-1 if not timed else maximum if target == Codec.NONE else 319)
    assert result.first_timestamp == (-1 if not timed else RECORDS[0][2] if target == Codec.NONE else MAX_TIMESTAMP)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_the_topic_codec_keeps_log_append_time(codec, kafka_python_records):
    data = kafka_python_records.build(1, codec, RECORDS)
    result = validate_and_assign(data, 0, NOW, APPEND_TIME._replace(codec=Codec.LZ4))
    assert [(e.codec, e.timestamp, e.attributes & 0x08) for e in iter_entries(result.buffer)] == [(Codec.LZ4, NOW, 0x08)]
    assert [(o, ts, tt) for o, ts, tt, _, _ in kafka_python_records.read(result.buffer)] == [(i, NOW, 1) for i in range(20)]
    assert (result.log_append_time, result.max_timestamp, result.offset_of_max_timestamp) == (NOW, NOW, 19)


def test_the_topic_codec_rebuild_is_checked_against_the_limit():
    noise = random.Random(25)
    values = [(None, noise.randbytes(500), NOW) for _ in range(4)]  # incompressible: one wrapper holds all four
    data = build_message_set(values, magic=1)
    largest = max(e.size for e in iter_entries(data))
    config = ValidationConfig(magic=1, codec=Codec.GZIP, max_message_bytes=largest)
    refused(ErrorCode.MESSAGE_TOO_LARGE, validate_and_assign, data, 0, NOW, config)
    assert validate_and_assign(data, 0, NOW, config._replace(codec=None)).record_count == 4


def test_zstd_is_refused_on_a_magic_1_log():
    data = build_message_set(RECORDS, magic=1, codec=Codec.GZIP)
    refused(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, validate_and_assign, data, 0, NOW, CREATE._replace(codec=Codec.ZSTD))


# --- LogAppendTime ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", MESSAGE_SET_CODECS)
def test_log_append_time_rewrites_timestamps_and_outer_crc_only(codec, kafka_python_records):
    data = kafka_python_records.build(1, codec, RECORDS)
    result = validate_and_assign(data, 40, NOW, APPEND_TIME)
    assert result.log_append_time == NOW
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (NOW, 40 if codec == Codec.NONE else 59)
    theirs = kafka_python_records.read(result.buffer)  # asserts every CRC, outer and inner
    assert [(o, ts, tt) for o, ts, tt, _, _ in theirs] == [(40 + i, NOW, 1) for i in range(20)]
    assert [(k, v) for *_, k, v in theirs] == [(k, v) for k, v, _ in RECORDS]
    before = list(iter_entries(data))
    after = list(iter_entries(result.buffer))
    assert len(result.buffer) == len(data)
    for old, new in zip(before, after):
        assert new.attributes == old.attributes | 0x08
        old_bytes = data[old.position : old.position + old.size]
        new_bytes = result.buffer[new.position : new.position + new.size]
        assert payload_of(new_bytes, 1) == payload_of(old_bytes, 1)
    assert [point[2] for point in index_points(result.buffer)] == [NOW] * len(after)


def test_log_append_time_leaves_magic_0_messages_alone(kafka_python_records):
    data = kafka_python_records.build(0, Codec.NONE, RECORDS)
    result = validate_and_assign(data, 0, NOW, APPEND_TIME)
    assert result.log_append_time == NOW
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (-1, -1)
    for old, new in zip(iter_entries(data), iter_entries(result.buffer)):
        assert data[old.position + 8 : old.position + old.size] == result.buffer[new.position + 8 : new.position + new.size]


def test_log_append_time_ignores_timestamp_difference(kafka_python_records):
    config = ValidationConfig(magic=1, timestamp_type=LOG_APPEND_TIME, max_timestamp_difference_ms=0)
    for codec in (Codec.NONE, Codec.LZ4):
        assert validate_and_assign(kafka_python_records.build(1, codec, RECORDS), 0, NOW, config).record_count == 20


@pytest.mark.parametrize("codec", MESSAGE_SET_CODECS)
def test_producer_setting_log_append_time_is_invalid_timestamp(codec):
    data = build_message_set(RECORDS, magic=1, codec=codec, timestamp_type=LOG_APPEND_TIME)
    for config in (CREATE, APPEND_TIME):
        refused(ErrorCode.INVALID_TIMESTAMP, validate_and_assign, data, 0, NOW, config)


# --- CreateTime bounds -------------------------------------------------------------------------


@pytest.mark.parametrize("codec", MESSAGE_SET_CODECS)
def test_timestamp_difference_refuses_the_whole_set(codec):
    config = ValidationConfig(magic=1, max_timestamp_difference_ms=1000)
    good = [(None, b"a", NOW - 1000), (None, b"b", NOW + 1000), (None, b"c", -1)]
    assert validate_and_assign(build_message_set(good, magic=1, codec=codec), 0, NOW, config).record_count == 3
    for late in (NOW - 1001, NOW + 1001, 0):
        data = build_message_set(good + [(None, b"d", late)], magic=1, codec=codec)
        refused(ErrorCode.INVALID_TIMESTAMP, validate_and_assign, data, 0, NOW, config)


def test_magic_0_has_no_timestamp_to_refuse():
    config = ValidationConfig(magic=1, max_timestamp_difference_ms=0)
    for codec in MESSAGE_SET_CODECS:
        assert validate_and_assign(build_message_set(RECORDS, magic=0, codec=codec), 0, NOW, config).record_count == 20


# --- corruption ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", MESSAGE_SET_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_outer_crc_mismatch_is_corrupt_message(magic, codec, kafka_python_records):
    data = bytearray(kafka_python_records.build(magic, codec, RECORDS))
    for position in (12, len(data) - 1):  # the CRC field itself, and the last payload byte
        corrupted = bytearray(data)
        corrupted[position] ^= 0x40
        assert "CRC" in refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, bytes(corrupted), 0, NOW, CREATE)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_inner_crc_mismatch_is_corrupt_message(magic, codec):
    inner = bytearray(build_message_set(RECORDS, magic=magic))
    last = list(iter_entries(inner))[-1]
    inner[last.position + last.size - 1] ^= 0x01
    data = wrapper_around(bytes(inner), magic=magic, codec=codec)
    assert "CRC" in refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, data, 0, NOW, CREATE)


def test_mixed_magic_in_one_set_is_corrupt_message():
    data = build_message_set(RECORDS[:2], magic=1) + build_message_set(RECORDS[2:4], magic=0, base_offset=2)
    assert "magic" in refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, data, 0, NOW, CREATE)
    data = build_message_set(RECORDS[:2], magic=0) + build_message_set(RECORDS[2:4], magic=1, base_offset=2)
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, data, 0, NOW, CREATE)


def test_wrapper_holding_another_magic_is_corrupt_message():
    data = wrapper_around(build_message_set(RECORDS, magic=0), magic=1)
    assert "magic" in refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, data, 0, NOW, CREATE)


def test_nested_compression_is_corrupt_message():
    data = wrapper_around(build_message_set(RECORDS, magic=1, codec=Codec.SNAPPY), magic=1, codec=Codec.LZ4)
    assert "nest" in refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, data, 0, NOW, CREATE)


@pytest.mark.parametrize(
    "inner_case",
    ["empty", "truncated", "garbage"],
)
def test_bad_inner_sets_are_corrupt_message(inner_case):
    inner = build_message_set(RECORDS, magic=1)
    inner = {"empty": b"", "truncated": inner[:-5], "garbage": b"\x00" * 40}[inner_case]
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, wrapper_around(inner), 0, NOW, CREATE)


def test_undecodable_payload_null_value_and_unknown_codec_are_corrupt_message():
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, wrapper_around(b"", compressed=b"junk" * 10), 0, NOW, CREATE)
    null_value = bytearray(build_message_set([(None, None, NOW)], magic=1))
    null_value[17] = Codec.GZIP
    struct.pack_into(">I", null_value, 12, zlib.crc32(null_value[16:]))
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, bytes(null_value), 0, NOW, CREATE)
    zstd = bytearray(wrapper_around(build_message_set(RECORDS, magic=1)))
    zstd[17] = 4
    struct.pack_into(">I", zstd, 12, zlib.crc32(zstd[16:]))
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, bytes(zstd), 0, NOW, CREATE)


@pytest.mark.parametrize("key_length", [-2, 1000, 5])
def test_inconsistent_key_length_with_a_valid_crc_is_corrupt_message(key_length):
    data = bytearray(build_message_set([(b"key", b"value", NOW)], magic=1))
    struct.pack_into(">i", data, 26, key_length)
    struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, bytes(data), 0, NOW, CREATE)
    refused(ErrorCode.CORRUPT_MESSAGE, lambda b: list(iter_records(b)), bytes(data))


def test_truncated_or_empty_produce_sets_are_corrupt_message():
    data = build_message_set(RECORDS, magic=1)
    for cut in (len(data) - 1, len(data) - 30, 11, 5):
        refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, data[:cut], 0, NOW, CREATE)
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, b"", 0, NOW, CREATE)


@pytest.mark.parametrize("size", [-5, 0, 13, 21])
def test_impossible_sizes_are_corrupt_message(size):
    data = bytearray(build_message_set(RECORDS, magic=1))
    struct.pack_into(">i", data, 8, size)
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, bytes(data), 0, NOW, CREATE)


# --- sizes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", MESSAGE_SET_CODECS)
def test_message_size_limit_counts_the_log_overhead(codec):
    data = build_message_set(RECORDS, magic=1, codec=codec)
    largest = max(e.size for e in iter_entries(data))
    assert validate_and_assign(data, 0, NOW, ValidationConfig(magic=1, max_message_bytes=largest)).record_count == 20
    refused(ErrorCode.MESSAGE_TOO_LARGE, validate_and_assign, data, 0, NOW, ValidationConfig(magic=1, max_message_bytes=largest - 1))


def test_recompressed_wrapper_is_checked_against_the_limit_again():
    inner = build_message_set([(None, bytes(range(256)) * 8 + b"tail %d" % i, -1) for i in range(50)], magic=0)
    tight = lz4.frame.compress(
        inner, compression_level=lz4.frame.COMPRESSIONLEVEL_MAX, block_linked=False, store_size=False
    )
    data = wrapper_around(b"", magic=0, codec=Codec.LZ4, compressed=tight)
    recompressed = validate_and_assign(data, 0, NOW, ValidationConfig(magic=1)).buffer
    assert len(recompressed) > len(data), "the fast lz4 level must compress worse than HC for this test"
    refused(ErrorCode.MESSAGE_TOO_LARGE, validate_and_assign, data, 0, NOW, ValidationConfig(magic=1, max_message_bytes=len(data)))


# --- follower path --------------------------------------------------------------------------------


@pytest.mark.parametrize("magic,codec", ALL_FORMATS)
def test_follower_keeps_leader_offsets_and_bytes(magic, codec, kafka_python_records):
    leader = validate_and_assign(kafka_python_records.build(magic, codec, RECORDS), 200, NOW, CREATE)
    follower = validate_given_offsets(leader.buffer, 200, CREATE)
    shallow = list(iter_entries(leader.buffer))
    assert follower.buffer == leader.buffer
    # Shallow: a wrapper counts once, at its offset (its last inner one).
    assert (follower.first_offset, follower.last_offset, follower.record_count) == (shallow[0].offset, 219, len(shallow))
    assert (follower.max_timestamp, follower.offset_of_max_timestamp, follower.first_timestamp,
            follower.first_untimed_offset) == (leader.max_timestamp, leader.offset_of_max_timestamp,
                                               leader.first_timestamp, leader.first_untimed_offset)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_follower_checks_wrappers_shallowly(magic, codec):
    """Kafka 0.10.2's follower path: the wrapper's own CRC covers its compressed bytes and is
    checked; inner messages are not looked at (the leader checked them), so a damaged inner
    message under a good wrapper CRC goes through, and nothing is decompressed."""
    inner = bytearray(build_message_set(RECORDS, magic=magic, base_offset=0 if magic else 30))
    last = list(iter_entries(inner))[-1]
    inner[last.position + last.size - 1] ^= 0x01
    data = wrapper_around(bytes(inner), magic=magic, codec=codec, offset=49)
    refused(ErrorCode.CORRUPT_MESSAGE, validate_and_assign, data, 30, NOW, CREATE)
    accepted = validate_given_offsets(data, 30, CREATE)
    assert (accepted.buffer, accepted.first_offset, accepted.last_offset, accepted.record_count) == (data, 49, 49, 1)
    # Not even a payload that does not decompress is noticed; its wrapper CRC is.
    junk = wrapper_around(b"", magic=magic, codec=codec, offset=49, compressed=b"junk" * 10)
    assert validate_given_offsets(junk, 30, CREATE).record_count == 1
    for position in (12, len(data) - 1):  # the wrapper's CRC field, and its last compressed byte
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        assert "CRC" in refused(ErrorCode.CORRUPT_MESSAGE, validate_given_offsets, bytes(damaged), 30, CREATE)
    # A wrapper's offset is its last inner offset: one below the follower's log end is refused.
    assert "does not follow" in refused(ErrorCode.CORRUPT_MESSAGE, validate_given_offsets, data, 50, CREATE)
    before = build_message_set(RECORDS[:2], magic=magic, base_offset=60)
    refused(ErrorCode.CORRUPT_MESSAGE, validate_given_offsets, before + data, 30, CREATE)


def test_follower_refuses_offsets_below_minimum_or_not_increasing():
    data = build_message_set(RECORDS, magic=1, codec=Codec.LZ4, base_offset=100)  # one wrapper at 119
    refused(ErrorCode.CORRUPT_MESSAGE, validate_given_offsets, data, 120, CREATE)
    # Its inner offsets 100..118 are not seen without decompressing (Kafka 0.10.2 neither).
    assert validate_given_offsets(data, 101, CREATE).last_offset == 119
    twice = build_message_set(RECORDS[:3], magic=1, base_offset=5) + build_message_set(RECORDS[:3], magic=1, base_offset=7)
    refused(ErrorCode.CORRUPT_MESSAGE, validate_given_offsets, twice, 0, CREATE)
    gap = build_message_set(RECORDS[:3], magic=1, base_offset=5) + build_message_set(RECORDS[:3], magic=1, base_offset=9)
    assert validate_given_offsets(gap, 0, CREATE).last_offset == 11


def test_follower_drops_a_truncated_tail_and_accepts_nothing_at_all():
    data = build_message_set(RECORDS, magic=1, base_offset=10)
    result = validate_given_offsets(data[:-1], 10, CREATE)
    assert (result.first_offset, result.last_offset, result.record_count) == (10, 28, 19)
    assert result.buffer == data[: list(iter_entries(data))[-1].position]
    empty = validate_given_offsets(data[:20], 10, CREATE)
    assert (empty.buffer, empty.record_count, empty.first_offset, empty.last_offset) == (b"", 0, -1, -1)


def test_follower_checks_crc_and_size():
    data = bytearray(build_message_set(RECORDS, magic=1))
    data[-1] ^= 1
    refused(ErrorCode.CORRUPT_MESSAGE, validate_given_offsets, bytes(data), 0, CREATE)
    data[-1] ^= 1
    refused(ErrorCode.MESSAGE_TOO_LARGE, validate_given_offsets, bytes(data), 0, ValidationConfig(magic=1, max_message_bytes=40))
    for position, value in ((16, 2), (17, 5)):  # magic, codec
        bad = bytearray(data)
        bad[position] = value
        struct.pack_into(">I", bad, 12, zlib.crc32(bad[16:list(iter_entries(data))[1].position]))
        refused(ErrorCode.CORRUPT_MESSAGE, validate_given_offsets, bytes(bad), 0, CREATE)
    mixed = build_message_set(RECORDS[:2], magic=1) + build_message_set(RECORDS[2:4], magic=0, base_offset=2)
    assert "mixes" in refused(ErrorCode.CORRUPT_MESSAGE, validate_given_offsets, mixed, 0, CREATE)


# --- properties ---------------------------------------------------------------------------------

record_lists = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=30),
        st.none() | st.binary(max_size=200),
        st.integers(min_value=NOW - 10**6, max_value=NOW + 10**6) | st.just(-1),
    ),
    min_size=1,
    max_size=20,
)


@given(
    batches=st.lists(st.tuples(record_lists, st.sampled_from(MESSAGE_SET_CODECS)), min_size=1, max_size=4),
    magic=st.sampled_from([0, 1]),
    next_offset=st.integers(min_value=0, max_value=2**62),
    timestamp_type=st.sampled_from([0, 1]),
)
@settings(max_examples=100, deadline=None)
def test_validated_sets_read_back_with_consecutive_offsets(batches, magic, next_offset, timestamp_type, kafka_python_records):
    data = b"".join(build_message_set(records, magic=magic, codec=codec) for records, codec in batches)
    flat = [record for records, _ in batches for record in records]
    config = ValidationConfig(magic=1, timestamp_type=timestamp_type)
    result = validate_and_assign(data, next_offset, NOW, config)
    assert (result.first_offset, result.last_offset) == (next_offset, next_offset + len(flat) - 1)
    got = list(iter_records(result.buffer))
    assert [(r.offset, r.key, r.value) for r in got] == [(next_offset + i, k, v) for i, (k, v, _) in enumerate(flat)]
    if magic == 1:
        expected = [NOW] * len(flat) if timestamp_type == LOG_APPEND_TIME else [ts for _, _, ts in flat]
        assert [r.timestamp for r in got] == expected
        assert result.max_timestamp == max(expected)
    assert [(o, k, v) for o, _, _, k, v in kafka_python_records.read(result.buffer)] == [
        (r.offset, r.key, r.value) for r in got
    ]
    follower = validate_given_offsets(result.buffer, next_offset, config)
    assert (follower.buffer, follower.last_offset) == (result.buffer, result.last_offset)
    assert follower.record_count == len(list(iter_entries(result.buffer)))


@given(
    batches=st.lists(st.tuples(record_lists, st.sampled_from(MESSAGE_SET_CODECS)), min_size=1, max_size=6),
    magic=st.sampled_from([0, 1]),
    timestamp_type=st.sampled_from([0, 1]),
    anchor=st.integers(min_value=-3000, max_value=100),
    interval=st.integers(min_value=0, max_value=1000),
    untimed_at=st.sampled_from([-1, NOW - 10**6, NOW, NOW + 10**6]),
)
@settings(max_examples=100, deadline=None)
def test_index_points_are_every_entry_past_the_interval(batches, magic, timestamp_type, anchor, interval, untimed_at):
    data = b"".join(build_message_set(records, magic=magic, codec=codec) for records, codec in batches)
    config = ValidationConfig(magic=1, timestamp_type=timestamp_type)
    result = validate_and_assign(data, 7, NOW, config)
    assert index_points(result.buffer, anchor, interval, untimed_at) == expected_points(
        result.buffer, anchor, interval, untimed_at)
    shallow = list(iter_entries(result.buffer))
    untimed = [e.offset for e in shallow if e.timestamp < 0]
    assert result.first_untimed_offset == (untimed[0] if untimed else -1)
    assert result.first_timestamp == shallow[0].timestamp
    follower = validate_given_offsets(result.buffer, 7, config)
    assert (follower.first_untimed_offset, follower.first_timestamp) == (result.first_untimed_offset,
                                                                         result.first_timestamp)


@given(
    records=record_lists,
    codec=st.sampled_from(MESSAGE_SET_CODECS),
    magic=st.sampled_from([0, 1]),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=3),
)
@settings(max_examples=200, deadline=None)
def test_mutated_sets_are_refused_with_record_error_or_stay_readable(records, codec, magic, flips):
    data = bytearray(build_message_set(records, magic=magic, codec=codec))
    for position, mask in flips:
        data[position % len(data)] ^= mask
    for validate in (
        lambda b: validate_and_assign(b, 0, NOW, CREATE),
        lambda b: validate_given_offsets(b, 0, CREATE),
    ):
        try:
            result = validate(bytes(data))
        except RecordError:
            continue
        assert len(list(iter_entries(result.buffer))) <= result.record_count


def test_inner_set_inflating_past_the_cap_is_message_too_large(monkeypatch):
    import minikafka.protocol.compression

    monkeypatch.setattr(minikafka.protocol.compression, "MAX_DECOMPRESSED_BYTES", 4096)
    data = build_message_set([(None, b"z" * 1000, NOW)] * 10, magic=1, codec=Codec.GZIP)
    assert len(data) < 4096
    refused(ErrorCode.MESSAGE_TOO_LARGE, validate_and_assign, data, 0, NOW, CREATE)


# --- aiokafka's (Cython) legacy record code: a third implementation --------------------------

AIOKAFKA_FORMATS = [(0, Codec.NONE), (0, Codec.GZIP), (0, Codec.SNAPPY)] + [(1, codec) for codec in MESSAGE_SET_CODECS]


@pytest.mark.parametrize("magic,codec", AIOKAFKA_FORMATS)
def test_aiokafka_sets_validate_and_our_output_reads_in_aiokafka(magic, codec):
    from aiokafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for index, (key, value, timestamp) in enumerate(RECORDS):
        assert builder.append(index, timestamp if magic else None, key, value) is not None
    result = validate_and_assign(bytes(builder.build()), 60, NOW, APPEND_TIME if magic else CREATE)
    read = []
    for entry in iter_entries(result.buffer):
        batch = LegacyRecordBatch(result.buffer[entry.position : entry.position + entry.size], magic)
        assert batch.validate_crc()
        read.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)
    assert read == [(60 + i, NOW if magic else None, k, v) for i, (k, v, _) in enumerate(RECORDS)]
