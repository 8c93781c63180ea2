"""The C accelerator (``minikafka.protocol._records``) and the pure-Python loops agree: same
ValidatedSet, or the same RecordError (code and message), for valid, damaged and fuzzed sets,
on the leader path (``validate_and_assign``) and the follower path (``validate_given_offsets``).
"""

import os
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.protocol import records
from minikafka.protocol.compression import Codec, compress
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
CREATE = ValidationConfig()


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
    # Short inputs take the accelerator's own table loop, long ones zlib's: both must be zlib's
    # CRC-32, at any alignment.
    assert records._native.crc32(memoryview(data)[start:]) == zlib.crc32(data[start:])


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
    config = ValidationConfig(timestamp_type=timestamp_type, max_timestamp_difference_ms=10**6,
                              max_message_bytes=60 if case == "too large" else 1048588, index_interval_bytes=50)
    result = agree(validate_and_assign, LEADER_CASES[case], 1000, NOW, config, 20)
    accepted = {"valid mix", "magic 0 recompressed"}
    if timestamp_type == LOG_APPEND_TIME:
        accepted |= {"timestamp out of range", "inner timestamp"}  # not judged: the broker's time goes in
    assert isinstance(result[0], ErrorCode) == (case not in accepted), result


def test_every_refusal_code_is_reached_by_both():
    codes = set()
    for case, data in LEADER_CASES.items():
        config = ValidationConfig(max_timestamp_difference_ms=10**6, max_message_bytes=60 if case == "too large" else 1048588)
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
    config = ValidationConfig(max_message_bytes=60 if case == "too large" else 1048588, index_interval_bytes=40)
    agree(validate_given_offsets, FOLLOWER_CASES[case], 50, config, -1)


record_lists = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=120),
        st.integers(min_value=NOW - 2000, max_value=NOW + 2000) | st.just(-1),
    ),
    min_size=1,
    max_size=8,
)
batches = st.lists(st.tuples(record_lists, st.sampled_from(list(Codec))), min_size=1, max_size=4)
configs = st.builds(
    ValidationConfig,
    max_message_bytes=st.sampled_from([40, 200, 1048588]),
    timestamp_type=st.sampled_from([0, LOG_APPEND_TIME]),
    max_timestamp_difference_ms=st.sampled_from([0, 1000, 2**63 - 1]),
    index_interval_bytes=st.integers(0, 400),
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
       next_offset=st.integers(0, 2**40), index_after=st.integers(-50, 600))
@settings(max_examples=300, deadline=None)
def test_fuzzed_leader_sets_agree(batch_list, magic, config, edit_list, next_offset, index_after):
    data = b"".join(build_message_set(r, magic=magic, codec=codec) for r, codec in batch_list)
    agree(validate_and_assign, _edited(data, edit_list), next_offset, NOW, config, index_after)


@given(batch_list=batches, magic=st.sampled_from([0, 1]), config=configs, edit_list=edits,
       min_offset=st.integers(0, 30), index_after=st.integers(-50, 600), cut=st.integers(0, 40))
@settings(max_examples=300, deadline=None)
def test_fuzzed_follower_sets_agree(batch_list, magic, config, edit_list, min_offset, index_after, cut):
    leader = outcome(validate_and_assign, b"".join(build_message_set(r, magic=magic, codec=codec)
                                                   for r, codec in batch_list), 10, NOW, ValidationConfig())
    data = _edited(leader[0], edit_list)
    agree(validate_given_offsets, data[: len(data) - cut], min_offset, config, index_after)


@given(inner=record_lists, magic=st.sampled_from([0, 1]), edit_list=edits,
       accepted=st.none() | st.tuples(st.integers(NOW - 3000, NOW), st.integers(NOW, NOW + 3000)))
@settings(max_examples=200, deadline=None)
def test_fuzzed_inner_sets_agree(inner, magic, edit_list, accepted):
    data = _edited(build_message_set(inner, magic=magic), edit_list)

    def scan(scanner):
        try:
            return scanner(data, magic, 77, NOW, accepted)
        except RecordError as error:
            return ErrorCode(error.code), str(error)

    assert scan(records._native.scan_inner) == scan(records._py_scan_inner)
