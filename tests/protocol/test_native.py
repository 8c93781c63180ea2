"""The C accelerator (``minikafka.protocol._records``) and the pure-Python loops agree: same
ValidatedSet, or the same RecordError (code and message), for valid, damaged and fuzzed sets,
on the leader path (``validate_and_assign``, magic 2 batches' conversion included) and the
follower path (``validate_given_offsets``), and on which entries a segment indexes
(``entries.index_entries``).
"""

import os
import struct
import subprocess
import sys
import zlib

import crcmod.predefined
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.protocol import entries, record_batch, records
from minikafka.protocol.compression import MESSAGE_SET_CODECS, Codec, compress
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.records import (
    LOG_APPEND_TIME,
    ValidationConfig,
    build_message_set,
    iter_entries,
    validate_and_assign,
    validate_given_offsets,
)

NOW = 1_700_000_000_000
RECORDS = [(b"k%d" % i if i % 2 else None, b"v" * (i * 7), NOW - 500 + i * 50) for i in range(12)]
CREATE = ValidationConfig(magic=1)


@pytest.fixture(autouse=True)
def _native_built():
    if records._native is None:
        if os.environ.get("MINIKAFKA_REQUIRE_NATIVE") == "1":
            pytest.fail("minikafka.protocol._records is not built")
        pytest.skip("the C accelerator is not built")


def outcome(function, *args, **kwargs):
    try:
        return tuple(function(*args, **kwargs))
    except RecordError as error:
        return ErrorCode(error.code), str(error)


def agree(function, *args, **kwargs):
    """Run ``function`` with the C loops and with the Python ones; both outcomes must match."""
    before = records.native_in_use()
    try:
        assert records.use_native(True)
        native = outcome(function, *args, **kwargs)
        records.use_native(False)
        python = outcome(function, *args, **kwargs)
    finally:
        records.use_native(before)
    assert native == python
    return native


@given(data=st.binary(max_size=2000), start=st.integers(0, 7))
@settings(max_examples=300, deadline=None)
def test_the_native_crc_is_zlibs(data, start):
    # Inputs of 64 bytes or more are folded with PCLMULQDQ where the CPU has it, their tail
    # and shorter ones go through the table loop; without PCLMULQDQ long ones take zlib's: all
    # must be zlib's CRC-32, at any alignment.
    expected = zlib.crc32(data[start:])
    assert records._native.crc32(memoryview(data)[start:]) == expected
    assert records._native.crc32_portable(memoryview(data)[start:]) == expected


def fix_crc(data: bytearray, position: int = 0) -> bytearray:
    """Recompute the CRC of the entry at ``position`` (from its size field, clamped to the buffer)."""
    (size,) = struct.unpack_from(">i", data, position + 8)
    end = min(len(data), position + 12 + max(size, 4))
    struct.pack_into(">I", data, position + 12, zlib.crc32(data[position + 16 : end]))
    return data


def wrapper_around(inner: bytes, *, magic=1, codec=Codec.GZIP, offset=0, timestamp=NOW) -> bytes:
    data = bytearray(build_message_set([(None, compress(codec, inner, magic=magic), timestamp)], magic=magic,
                                       base_offset=offset))
    data[17] = codec
    return bytes(fix_crc(data))


def patched(data: bytes, position: int, fmt: str, value, *, entry: int = 0) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, position, value)
    return bytes(fix_crc(out, entry))


PLAIN_1 = build_message_set(RECORDS, magic=1)
PLAIN_0 = build_message_set(RECORDS, magic=0)
ONE = build_message_set([(b"key", b"value", NOW)], magic=1)

LEADER_CASES = {
    "unknown magic": patched(ONE, 16, ">b", 5),
    "short tail, impossible size": PLAIN_1 + struct.pack(">qi", 0, 3) + b"\0" * 16,
    "short tail, truncated": PLAIN_1 + b"\0" * 20,
    "impossible size": patched(ONE, 8, ">i", 13),
    "truncated": PLAIN_1[:-1],
    "too large": PLAIN_1,  # with a small max.message.bytes below
    "mixed magic": PLAIN_1 + build_message_set(RECORDS[5:], magic=0),
    "crc": bytes(PLAIN_1[:-1]) + bytes([PLAIN_1[-1] ^ 1]),
    "bad key length": patched(ONE, 26, ">i", 100),
    "negative key length": patched(ONE, 26, ">i", -7),
    "bad value length": patched(ONE, 33, ">i", 2),
    "producer log append time": patched(ONE, 17, ">b", 8),
    "timestamp out of range": patched(ONE, 18, ">q", NOW + 10**7),
    "inner truncated": wrapper_around(PLAIN_1[:-3]),
    "inner short": wrapper_around(PLAIN_1 + b"\0" * 5),
    "inner bad size": wrapper_around(PLAIN_1 + b"\0" * 30),
    "inner magic": wrapper_around(build_message_set(RECORDS[5:], magic=0)),
    "inner nested": wrapper_around(build_message_set(RECORDS, magic=1, codec=Codec.LZ4)),
    "inner crc": wrapper_around(PLAIN_1[:-1] + bytes([PLAIN_1[-1] ^ 1])),
    "inner bad key length": wrapper_around(patched(ONE, 26, ">i", 100)),
    "inner bad value length": wrapper_around(patched(ONE, 33, ">i", 2)),
    "inner relative offset": wrapper_around(build_message_set(RECORDS, magic=1, base_offset=3)),
    "inner timestamp": wrapper_around(patched(ONE, 18, ">q", NOW - 10**7)),
    "inner empty": wrapper_around(b""),
    "magic 0 recompressed": wrapper_around(PLAIN_0, magic=0, codec=Codec.SNAPPY) + build_message_set(
        RECORDS, magic=0, base_offset=12),
    "valid mix": PLAIN_1 + wrapper_around(PLAIN_1, codec=Codec.LZ4) + build_message_set(RECORDS, magic=1, codec=Codec.SNAPPY),
}


@pytest.mark.parametrize("case", sorted(LEADER_CASES))
@pytest.mark.parametrize("timestamp_type", [0, LOG_APPEND_TIME])
def test_leader_cases_agree(case, timestamp_type):
    config = ValidationConfig(magic=1, timestamp_type=timestamp_type, max_timestamp_difference_ms=10**6,
                              max_message_bytes=60 if case == "too large" else 1048588)
    result = agree(validate_and_assign, LEADER_CASES[case], 1000, NOW, config)
    accepted = {"valid mix", "magic 0 recompressed"}
    if timestamp_type == LOG_APPEND_TIME:
        accepted |= {"timestamp out of range", "inner timestamp"}  # not judged: the broker's time goes in
    assert isinstance(result[0], ErrorCode) == (case not in accepted), result


def test_every_refusal_code_is_reached_by_both():
    codes = set()
    for case, data in LEADER_CASES.items():
        config = ValidationConfig(magic=1, max_timestamp_difference_ms=10**6, max_message_bytes=60 if case == "too large" else 1048588)
        result = agree(validate_and_assign, data, 0, NOW, config)
        if isinstance(result[0], ErrorCode):
            codes.add(result[0])
    assert codes == {ErrorCode.CORRUPT_MESSAGE, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.INVALID_TIMESTAMP}


PLAIN_1_AT_100 = build_message_set(RECORDS, magic=1, base_offset=100)
FOLLOWER_CASES = {
    "valid": build_message_set(RECORDS, magic=1, base_offset=100) + wrapper_around(PLAIN_1, offset=200),
    "impossible size": patched(ONE, 8, ">i", 10),
    "impossible size for magic 1": patched(build_message_set([(None, None, NOW)], magic=1), 8, ">i", 14),
    "truncated tail": build_message_set(RECORDS, magic=1, base_offset=100)[:-4],
    "nothing whole": PLAIN_1[:20],
    "too large": build_message_set(RECORDS, magic=1, base_offset=100),
    "unknown magic": patched(ONE, 16, ">b", 3),
    "unknown codec": patched(ONE, 17, ">b", 6),
    "crc": PLAIN_1_AT_100[:-1] + bytes([PLAIN_1_AT_100[-1] ^ 1]),
    "mixed magic": build_message_set(RECORDS, magic=1, base_offset=100) + build_message_set(RECORDS, magic=0, base_offset=200),
    "offsets going back": build_message_set(RECORDS, magic=1, base_offset=100) + build_message_set(RECORDS, magic=1, base_offset=105),
    "below minimum": build_message_set(RECORDS, magic=1, base_offset=10),
    "inner crc (not checked)": wrapper_around(PLAIN_1[:-1] + bytes([PLAIN_1[-1] ^ 1]), offset=100),
}


@pytest.mark.parametrize("case", sorted(FOLLOWER_CASES))
def test_follower_cases_agree(case):
    config = ValidationConfig(magic=1, max_message_bytes=60 if case == "too large" else 1048588)
    agree(validate_given_offsets, FOLLOWER_CASES[case], 50, config)


record_lists = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=120),
        st.integers(min_value=NOW - 2000, max_value=NOW + 2000) | st.just(-1),
    ),
    min_size=1,
    max_size=8,
)
batches = st.lists(st.tuples(record_lists, st.sampled_from(MESSAGE_SET_CODECS)), min_size=1, max_size=4)
configs = st.builds(
    ValidationConfig,
    max_message_bytes=st.sampled_from([40, 200, 1048588]),
    timestamp_type=st.sampled_from([0, LOG_APPEND_TIME]),
    max_timestamp_difference_ms=st.sampled_from([0, 1000, 2**63 - 1]),
)
# A field of one entry set to some value, with the entry's CRC made right again, so the checks
# behind the CRC get fuzzed too; or raw bit flips.
edits = st.lists(
    st.tuples(st.sampled_from(["field", "flip"]), st.integers(0, 10**6),
              st.sampled_from([(0, ">q"), (8, ">i"), (16, ">b"), (17, ">b"), (18, ">q"), (18, ">i"), (22, ">i"),
                               (26, ">i"), (30, ">i")]),
              st.integers(-(2**31), 2**31 - 1)),
    max_size=2,
)


def _edited(data: bytes, edit_list) -> bytes:
    out = bytearray(data)
    starts = [e.position for e in iter_entries(data)] or [0]
    for kind, where, (field, fmt), value in edit_list:
        if kind == "flip":
            out[where % len(out)] ^= (value & 0xFF) or 1
            continue
        start = starts[where % len(starts)]
        width = struct.calcsize(fmt)
        if start + field + width > len(out):
            continue
        bits = width * 8
        value = ((value + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))
        struct.pack_into(fmt, out, start + field, value)
        if field >= 16:
            fix_crc(out, start)
    return bytes(out)


@given(batch_list=batches, magic=st.sampled_from([0, 1]), config=configs, edit_list=edits,
       next_offset=st.integers(0, 2**40))
@settings(max_examples=300, deadline=None)
def test_fuzzed_leader_sets_agree(batch_list, magic, config, edit_list, next_offset):
    data = b"".join(build_message_set(r, magic=magic, codec=codec) for r, codec in batch_list)
    agree(validate_and_assign, _edited(data, edit_list), next_offset, NOW, config)


@given(batch_list=batches, magic=st.sampled_from([0, 1]), edit_list=edits, log_append_time=st.booleans())
@settings(max_examples=200, deadline=None)
def test_assign_loops_agree_without_crc_checks(batch_list, magic, edit_list, log_append_time):
    # How validate_and_assign runs a set its magic 2 conversion has just written: damaged CRCs
    # pass unseen in both loops, and everything else is still judged alike.
    data = _edited(b"".join(build_message_set(r, magic=magic, codec=codec) for r, codec in batch_list), edit_list)

    def assign(loop):
        try:
            return loop(data, 5, NOW, 1048588, log_append_time, NOW - 1000, NOW + 1000, records._assign_wrapper,
                        False)
        except RecordError as error:
            return ErrorCode(error.code), str(error)

    assert assign(records._native.assign_loop) == assign(records._py_assign_loop)


@given(batch_list=batches, magic=st.sampled_from([0, 1]), config=configs, edit_list=edits,
       min_offset=st.integers(0, 30), cut=st.integers(0, 40))
@settings(max_examples=300, deadline=None)
def test_fuzzed_follower_sets_agree(batch_list, magic, config, edit_list, min_offset, cut):
    leader = outcome(validate_and_assign, b"".join(build_message_set(r, magic=magic, codec=codec)
                                                   for r, codec in batch_list), 10, NOW, ValidationConfig(magic=1))
    data = _edited(leader[0], edit_list)
    agree(validate_given_offsets, data[: len(data) - cut], min_offset, config)


@given(batch_list=batches, magic=st.sampled_from([0, 1]), base=st.integers(0, 2**40),
       anchor=st.integers(-600, 2**40), interval=st.integers(0, 400),
       segment_max=st.sampled_from([(-1, 0), (NOW, 3), (NOW + 10**6, 2)]),
       untimed_times=st.lists(st.tuples(st.integers(NOW - 3000, NOW + 3000), st.integers(0, 40)), min_size=1,
                              max_size=4).map(lambda times: sorted(times, key=lambda t: t[1])))
@settings(max_examples=300, deadline=None)
def test_index_entries_agree(batch_list, magic, base, anchor, interval, segment_max, untimed_times):
    # What a segment appends: a validated set, at any position, after any earlier index entry.
    data = outcome(validate_and_assign, b"".join(build_message_set(r, magic=magic, codec=codec)
                                                 for r, codec in batch_list), 10, NOW, ValidationConfig(magic=1))[0]
    args = (data, base, min(anchor, base), interval, *segment_max, untimed_times)
    assert records._native.index_entries(*args) == entries._py_index_entries(*args)


@given(inner=record_lists, magic=st.sampled_from([0, 1]), edit_list=edits,
       accepted=st.none() | st.tuples(st.integers(NOW - 3000, NOW), st.integers(NOW, NOW + 3000)),
       check_crc=st.booleans())
@settings(max_examples=200, deadline=None)
def test_fuzzed_inner_sets_agree(inner, magic, edit_list, accepted, check_crc):
    data = _edited(build_message_set(inner, magic=magic), edit_list)

    def scan(scanner):
        try:
            return scanner(data, magic, 77, NOW, accepted, check_crc)
        except RecordError as error:
            return ErrorCode(error.code), str(error)

    assert scan(records._native.scan_inner) == scan(records._py_scan_inner)


# ---------------------------------------------------------------------------------------
# Magic 2 batches: the C conversion loop (``_records.magic_1_messages``) and CRC-32C against
# record_batch's Python ones, on batches this module encodes itself so every field can be
# steered (varint widths, timestamp deltas up to 10-byte varlongs, forged counts, headers).

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def test_use_native_switches_the_magic_2_loops_too():
    before = records.native_in_use()
    try:
        records.use_native(True)
        assert record_batch._magic_1_messages is records._native.magic_1_messages
        assert entries._crc32c is records._native.crc32c
        records.use_native(False)
        assert record_batch._magic_1_messages is record_batch._py_magic_1_messages
        assert entries._crc32c is entries._py_crc32c
    finally:
        records.use_native(before)


def test_pure_python_environment_leaves_no_c_loop():
    code = ("from minikafka.protocol import entries, records, record_batch as b; "
            "print(records.native_in_use(), b._magic_1_messages is b._py_magic_1_messages, entries._crc32c is entries._py_crc32c)")
    env = {**os.environ, "MINIKAFKA_PURE_PYTHON": "1"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["False", "True", "True"], result.stderr


@given(data=st.binary(max_size=300) | st.binary(min_size=3000, max_size=10_000), start=st.integers(0, 7))
@settings(max_examples=300, deadline=None)
def test_the_native_crc32c_is_crcmods(data, start):
    # Both C paths (the SSE4.2 instruction where the CPU has it, and the table loop every CPU
    # gets) at any length and alignment: three chains over 3 KiB rounds, then the word loop,
    # the 4-byte step and the byte tail.
    expected = crc32c(data[start:])
    assert records._native.crc32c(memoryview(data)[start:]) == expected
    assert records._native.crc32c_portable(memoryview(data)[start:]) == expected
    assert records._native.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_the_native_crc32c_of_a_whole_batch_is_crcmods():
    data = bytes(range(256)) * 4099 + b"tail"  # a megabyte: many rounds of three chains, and a tail
    assert records._native.crc32c(data) == crc32c(data) == records._native.crc32c_portable(data)


def zigzag(value: int) -> int:
    return 2 * value if value >= 0 else -2 * value - 1


def varint(raw: int, pad: int = 0, limit: int = 5) -> bytes:
    """Base-128 groups of the unsigned ``raw``, made up to ``pad`` bytes longer with zero
    groups (legal, if wasteful: how a 1-byte value takes 2..5 bytes) but no longer than
    ``limit`` bytes (5 for a varint, 10 for a varlong)."""
    out = bytearray()
    while True:
        out.append(raw & 0x7F)
        raw >>= 7
        if not raw:
            break
        out[-1] |= 0x80
    pad = min(pad, limit - len(out))
    if pad > 0:
        out[-1] |= 0x80
        out += b"\x80" * (pad - 1) + b"\x00"
    return bytes(out)


def encode_record(key, value, timestamp_raw, *, offset_delta=0, headers=(), pads=(0,) * 6) -> bytes:
    """One record; ``timestamp_raw`` is the zigzagged delta (any 70-bit value a varlong holds)."""
    body = bytearray(b"\x00")
    body += varint(timestamp_raw, pads[1], 10) + varint(zigzag(offset_delta), pads[2])
    # A null key's -1 is never padded: the reader (``batch_records``) takes only the one-byte
    # form as null, as every producer writes it, and refuses the rest as a negative length.
    body += varint(zigzag(-1 if key is None else len(key)), 0 if key is None else pads[3]) + (key or b"")
    body += varint(zigzag(-1 if value is None else len(value)), pads[4]) + (value or b"")
    body += varint(zigzag(len(headers)), pads[5])
    for header_key, header_value in headers:
        body += varint(zigzag(len(header_key))) + header_key
        body += varint(zigzag(-1 if header_value is None else len(header_value))) + (header_value or b"")
    return varint(zigzag(len(body)), pads[0]) + body


def encode_batch(section: bytes, count: int, *, codec=Codec.NONE, log_append_time=False,
                 base_timestamp=NOW, max_timestamp=NOW) -> bytes:
    payload = section if codec == Codec.NONE else compress(codec, section, magic=1)
    attributes = int(codec) | (0x08 if log_append_time else 0)
    header = bytearray(struct.pack(">qiibIhiqqqhii", 0, 49 + len(payload), -1, 2, 0, attributes, max(count - 1, 0),
                                   base_timestamp, max_timestamp, -1, -1, -1, count))
    data = header + payload
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def converted_by_both(section: bytes, count: int, codec: int, timestamp_type: int, base: int, maximum: int):
    """The C and Python conversion loops on one section: they must agree byte for byte."""
    native = records._native.magic_1_messages(section, count, codec, timestamp_type, base, maximum)
    python = record_batch._py_magic_1_messages(memoryview(section), count, codec, timestamp_type, base, maximum)
    assert native == python
    return native


keys_and_values = (st.none() | st.just(b"") | st.binary(max_size=40)
                   | st.integers(100, 20_000).map(lambda n: bytes(range(256)) * (n // 256) + b"x" * (n % 256)))
timestamp_raws = (st.integers(0, 4000) | st.integers(0, 2**64) | st.integers(0, 2**70 - 1)
                  | st.sampled_from([2**64 - 2, 2**64 - 1, 2**64, 2**64 + 1, 2**65 - 1, 2**65]))
int64s = st.integers(INT64_MIN, INT64_MAX) | st.sampled_from([INT64_MIN, INT64_MAX, -1, 0, NOW])
generated_records = st.lists(
    st.tuples(keys_and_values, keys_and_values, timestamp_raws, st.integers(-3, 2**31 - 1),
              st.tuples(*[st.integers(0, 4)] * 6)),
    min_size=1, max_size=12,
)


@given(record_list=generated_records, codec=st.sampled_from(MESSAGE_SET_CODECS), log_append_time=st.booleans(),
       base=int64s, maximum=int64s)
@settings(max_examples=300, deadline=None)
def test_generated_sections_convert_alike(record_list, codec, log_append_time, base, maximum):
    section = b"".join(encode_record(k, v, t, offset_delta=o, pads=p) for k, v, t, o, p in record_list)
    result = converted_by_both(section, len(record_list), int(codec), int(log_append_time), base, maximum)
    # Converted exactly when every timestamp fits int64 (or LogAppendTime ignores them all);
    # the messages then read back as the records, with offsets 0..n-1.
    timestamps = [base + ((t >> 1) ^ -(t & 1)) for _, _, t, _, _ in record_list]
    fits = log_append_time or all(INT64_MIN <= t <= INT64_MAX for t in timestamps)
    assert (result is not None) == fits
    if result is not None:
        messages, max_timestamp = result
        expected_timestamps = [maximum] * len(record_list) if log_append_time else timestamps
        read = list(records.iter_records(bytes(messages)))
        assert [(r.offset, r.key, r.value, r.timestamp) for r in read] == [
            (i, k, v, t) for i, ((k, v, *_), t) in enumerate(zip(record_list, expected_timestamps))
        ]
        assert max_timestamp == max(expected_timestamps + [-1])


@given(record_list=generated_records, codec=st.sampled_from(MESSAGE_SET_CODECS), log_append_time=st.booleans(),
       base=st.integers(NOW - 10**6, NOW), timestamp_type=st.sampled_from([0, LOG_APPEND_TIME]),
       next_offset=st.integers(0, 2**40))
@settings(max_examples=200, deadline=None)
def test_generated_batches_validate_alike(record_list, codec, log_append_time, base, timestamp_type, next_offset):
    section = b"".join(encode_record(k, v, t % 5000, offset_delta=o, pads=p) for k, v, t, o, p in record_list)
    data = encode_batch(section, len(record_list), codec=codec, log_append_time=log_append_time,
                        base_timestamp=base)
    config = ValidationConfig(magic=1, timestamp_type=timestamp_type, max_message_bytes=1 << 20)
    agree(validate_and_assign, data, next_offset, NOW, config)


ONE_OF_EACH = [(None, b"v" * 100, 0), (b"", b"", 14), (b"key", None, 3), (b"k" * 300, b"v" * 5000, 2**40)]
GOOD_SECTION = b"".join(encode_record(k, v, t, pads=(i % 5,) * 6) for i, (k, v, t) in enumerate(ONE_OF_EACH))
MALFORMED_SECTIONS = {
    "count one too high": (GOOD_SECTION, 5),
    "count one too low": (GOOD_SECTION, 3),
    "count forged huge": (GOOD_SECTION, 2**31 - 1),
    "headers": (GOOD_SECTION + encode_record(None, b"v", 0, headers=[(b"h", b"x")]), 5),
    "null header value": (GOOD_SECTION + encode_record(None, b"v", 0, headers=[(b"h", None)]), 5),
    "6-byte varint length": (b"\x80" * 5 + b"\x00" + GOOD_SECTION, 5),
    "11-byte varlong delta": (b"\x18\x00" + b"\x81" * 10 + b"\x00" + b"\x00\x01\x01\x00" * 2, 1),
    "negative record length": (varint(zigzag(-3)) + GOOD_SECTION, 5),
    "record length past the end": (GOOD_SECTION[:-1] + b"\x00" + varint(zigzag(50)) + b"\x00", 5),
    "negative key length": (encode_record(b"kk", b"v", 0).replace(b"\x04kk", b"\x03kk"), 1),
    "key length -2": (encode_record(b"kk", b"v", 0).replace(b"\x04kk", b"\x03\x00"), 1),
    "value length -2": (encode_record(None, b"v", 0)[:-3] + b"\x03\x00\x00", 1),
    "key past the record": (varint(zigzag(5)) + b"\x00\x00\x00\x7e\x00", 1),
    "trailing bytes": (GOOD_SECTION + b"\x00", 4),
    "timestamp beyond int64": (encode_record(None, b"v", zigzag(2**63)), 1),
    "empty": (b"", 1),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_SECTIONS))
def test_malformed_sections_are_refused_alike(case):
    section, count = MALFORMED_SECTIONS[case]
    assert converted_by_both(section, count, 0, 0, NOW, NOW) is None
    for codec in MESSAGE_SET_CODECS:
        data = encode_batch(section, count, codec=codec)
        result = agree(validate_and_assign, data, 0, NOW, CREATE)
        assert isinstance(result[0], ErrorCode), case


def test_good_section_converts():
    messages, max_timestamp = converted_by_both(GOOD_SECTION, 4, 0, 0, NOW, NOW)
    assert max_timestamp == NOW + 2**39
    assert len(list(records.iter_entries(bytes(messages)))) == 4


@pytest.mark.parametrize("codec", MESSAGE_SET_CODECS, ids=lambda c: c.name.lower())
def test_every_truncation_is_refused_alike(codec):
    for cut in range(len(GOOD_SECTION)):
        assert converted_by_both(GOOD_SECTION[:cut], 4, int(codec), 0, NOW, NOW) is None
    data = encode_batch(GOOD_SECTION, 4, codec=codec)
    for cut in range(1, len(data)):
        assert isinstance(agree(validate_and_assign, data[:cut], 0, NOW, CREATE)[0], ErrorCode)
    # Cut inside the records but with the header and CRC-32C made right again: the loops see it.
    for cut in range(0, len(GOOD_SECTION), 7 if codec == Codec.NONE else 97):
        truncated = encode_batch(GOOD_SECTION[:cut], 4, codec=codec)
        assert isinstance(agree(validate_and_assign, truncated, 0, NOW, CREATE)[0], ErrorCode)


@given(section=st.binary(max_size=300), count=st.integers(-2, 60), codec=st.integers(0, 4),
       timestamp_type=st.integers(0, 1), base=int64s, maximum=int64s)
@settings(max_examples=500, deadline=None)
def test_fuzzed_sections_convert_alike(section, count, codec, timestamp_type, base, maximum):
    converted_by_both(section, count, codec, timestamp_type, base, maximum)


@given(mutations=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=5),
       count=st.integers(1, 6), timestamp_type=st.integers(0, 1))
@settings(max_examples=500, deadline=None)
def test_mutated_sections_convert_alike(mutations, count, timestamp_type):
    section = bytearray(GOOD_SECTION)
    for position, byte in mutations:
        section[position % len(section)] = byte
    converted_by_both(bytes(section), count, 0, timestamp_type, NOW, NOW)
    data = encode_batch(bytes(section), count)
    agree(validate_and_assign, data, 0, NOW, CREATE)


# --- a log of magic 2: the C check of a batch's records (check_records) -------------------


def checked_by_both(section: bytes, count: int, base: int, check_timestamps: bool, earliest: int, latest: int):
    """The C check of a batch's records and the Python one (``_records_max_timestamp``): the
    same largest timestamp, and None from C exactly where Python refuses."""
    native = records._native.check_records(section, count, base, check_timestamps, earliest, latest)
    if count < 1:  # no batch has that (iter_batches refuses it first)
        assert native is None
        return native
    batch = next(record_batch.iter_batches(encode_batch(section, count, base_timestamp=base)))
    try:
        python = record_batch._records_max_timestamp(memoryview(section), batch, check_timestamps, earliest,
                                                     latest, NOW)
    except RecordError:
        python = None
    assert native == python
    return native


@given(record_list=generated_records, in_order=st.booleans(), base=int64s, check_timestamps=st.booleans(),
       earliest=int64s, latest=int64s, headers=st.lists(st.tuples(st.binary(max_size=5), st.none() | st.binary(max_size=5)),
                                                        max_size=3))
@settings(max_examples=400, deadline=None)
def test_generated_sections_are_checked_alike(record_list, in_order, base, check_timestamps, earliest, latest, headers):
    section = b"".join(encode_record(k, v, t, offset_delta=i if in_order else o, pads=p, headers=headers)
                       for i, (k, v, t, o, p) in enumerate(record_list))
    checked_by_both(section, len(record_list), base, check_timestamps, earliest, latest)


@pytest.mark.parametrize("case", sorted(MALFORMED_SECTIONS))
def test_malformed_sections_are_checked_alike(case):
    section, count = MALFORMED_SECTIONS[case]
    checked_by_both(section, count, 0, True, NOW - 10**12, NOW + 10**12)


@given(mutations=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=5),
       count=st.integers(-1, 6))
@settings(max_examples=500, deadline=None)
def test_mutated_sections_are_checked_alike(mutations, count):
    section = bytearray(GOOD_SECTION)
    for position, byte in mutations:
        section[position % len(section)] = byte
    checked_by_both(bytes(section), count, NOW, True, NOW - 10**12, NOW + 10**12)


def test_good_section_is_checked_with_its_largest_timestamp():
    in_order = b"".join(encode_record(k, v, t, offset_delta=i, pads=(i % 5,) * 6, headers=[(b"h", None)] * i)
                        for i, (k, v, t) in enumerate(ONE_OF_EACH))
    assert checked_by_both(in_order, 4, 0, False, 0, 0) == 2**39
    assert checked_by_both(GOOD_SECTION, 4, 0, False, 0, 0) is None  # every offset delta is 0


@given(record_list=generated_records, codec=st.sampled_from(list(Codec)), log_append_time=st.booleans(),
       next_offset=st.integers(0, 2**40))
@settings(max_examples=200, deadline=None)
def test_generated_batches_validate_alike_for_a_magic_2_log(record_list, codec, log_append_time, next_offset):
    section = b"".join(encode_record(k, v, t % 5000, offset_delta=i, pads=p) for i, (k, v, t, _, p) in enumerate(record_list))
    data = encode_batch(section, len(record_list), codec=codec)
    config = ValidationConfig(timestamp_type=LOG_APPEND_TIME if log_append_time else 0, max_message_bytes=1 << 20,
                              max_timestamp_difference_ms=10**6)
    agree(validate_and_assign, data, next_offset, NOW, config, 3)


# --- reading a stored batch's records (batch_records) ---------------------------------------


def read_by_both(section: bytes, count: int, base_offset: int, base: int, timestamp_type: int, maximum: int):
    """The C reader of a batch's records and the Python one (``_py_batch_records``): the same
    BatchRecords, and None from C exactly where Python refuses."""
    native = records._native.batch_records(section, count, base_offset, base, timestamp_type, maximum,
                                           record_batch.BatchRecord)
    if count < 0:  # no batch has that (iter_batches refuses it first)
        assert native is None
        return native
    batch = record_batch.RecordBatch(base_offset, 0, 0, -1, 0x08 if timestamp_type else 0, max(count - 1, 0), base,
                                     maximum, -1, -1, -1, count)
    try:
        python = record_batch._py_batch_records(memoryview(section), batch)
    except RecordError:
        python = None
    assert native == python
    assert native is None or all(type(record) is record_batch.BatchRecord for record in native)
    return native


utf8_or_not = st.binary(max_size=5) | st.text(max_size=3).map(str.encode)


@given(record_list=generated_records, base_offset=int64s, base=int64s, timestamp_type=st.integers(0, 1),
       maximum=int64s,
       headers=st.lists(st.tuples(utf8_or_not, st.none() | st.binary(max_size=5)), max_size=3))
@settings(max_examples=400, deadline=None)
def test_generated_sections_are_read_alike(record_list, base_offset, base, timestamp_type, maximum, headers):
    section = b"".join(encode_record(k, v, t, offset_delta=o, pads=p, headers=headers)
                       for k, v, t, o, p in record_list)
    read_by_both(section, len(record_list), base_offset, base, timestamp_type, maximum)


@pytest.mark.parametrize("case", sorted(MALFORMED_SECTIONS))
def test_malformed_sections_are_read_alike(case):
    section, count = MALFORMED_SECTIONS[case]
    read_by_both(section, count, 0, NOW, 0, NOW)


@given(mutations=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=5),
       count=st.integers(-1, 6), timestamp_type=st.integers(0, 1))
@settings(max_examples=500, deadline=None)
def test_mutated_sections_are_read_alike(mutations, count, timestamp_type):
    section = bytearray(GOOD_SECTION)
    for position, byte in mutations:
        section[position % len(section)] = byte
    read_by_both(bytes(section), count, 2**40, NOW, timestamp_type, NOW)


@given(section=st.binary(max_size=300), count=st.integers(-2, 60), base_offset=int64s, base=int64s,
       timestamp_type=st.integers(0, 1), maximum=int64s)
@settings(max_examples=500, deadline=None)
def test_fuzzed_sections_are_read_alike(section, count, base_offset, base, timestamp_type, maximum):
    read_by_both(section, count, base_offset, base, timestamp_type, maximum)


def test_good_section_is_read_with_offsets_beyond_int64_as_python_adds_them():
    read = read_by_both(GOOD_SECTION, 4, 2**63 - 1, 0, 0, 0)
    assert [record.offset for record in read] == [2**63 - 1] * 4  # every offset delta is 0
    headed = encode_record(b"k", None, zigzag(-5), offset_delta=3, headers=[(b"h", None), (b"\xc3\xa9", b"x")])
    [record] = read_by_both(headed, 1, 2**63 - 2, NOW, 0, 0)
    assert record == (2**63 + 1, NOW - 5, 0, b"k", None, (("h", None), ("é", b"x")))
    assert read_by_both(b"", 0, 0, NOW, 0, NOW) == []  # a batch the cleaner emptied


@given(batch_list=batches, magic=st.sampled_from([0, 1]), edit_list=edits,
       append_time=st.just(-1) | st.integers(0, 2**41))
@settings(max_examples=300, deadline=None)
def test_up_conversion_loops_agree(batch_list, magic, edit_list, append_time):
    # magic 0/1 messages to the records section of a batch (protocol.records._up_converted)
    data = _edited(b"".join(build_message_set(r, magic=magic, codec=codec) for r, codec in batch_list), edit_list)
    native = records._native.magic_2_records(data, append_time)
    assert native == records._py_magic_2_records(data, append_time)
    if native is not None and not any(codec for _, codec in batch_list) and data == b"".join(
            build_message_set(r, magic=magic) for r, _ in batch_list):
        section, count, base, maximum = native
        batch = record_batch.batch_of_section(section, count, base, maximum)
        expected = [(k, v, -1 if magic == 0 else t) if append_time < 0 else (k, v, append_time)
                    for r, _ in batch_list for k, v, t in r]
        assert [(r.key, r.value, r.timestamp) for r in records.iter_records(bytes(batch))] == expected


@given(record_list=st.lists(record_lists, min_size=1, max_size=4), magic=st.sampled_from([0, 1]), config=configs,
       edit_list=edits)
@settings(max_examples=300, deadline=None)
def test_one_checked_up_conversion_walk_agrees_with_assigning_first(record_list, magic, config, edit_list):
    # _up_converted checks and converts an uncompressed set in one walk: it must accept exactly
    # what a magic 1 log's assignment accepts, and convert it as it converts the assigned set.
    data = _edited(b"".join(build_message_set(r, magic=magic) for r in record_list), edit_list)
    append_time = NOW if config.timestamp_type == LOG_APPEND_TIME else -1
    checks = (config.max_message_bytes, *records._accepted_timestamps(NOW, config))
    one_walk = records._native.magic_2_records(data, append_time, *checks)
    assert one_walk == records._py_magic_2_records(data, append_time, *checks)
    assigned = outcome(validate_and_assign, data, 0, NOW, config._replace(magic=1, codec=None))
    if isinstance(assigned[0], ErrorCode):
        assert one_walk is None
    else:
        assert one_walk == records._py_magic_2_records(assigned[0], append_time)
