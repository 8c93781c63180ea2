"""The __consumer_offsets key/value layouts (Kafka's) and the group -> partition mapping."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from minikafka.broker.groups.records import (GroupKey, GroupRecordError, OffsetAndMetadata, OffsetKey,
                                   StoredGroup, StoredMember, decode_group_value, decode_key,
                                   decode_offset_value, group_key, group_value, java_string_hash,
                                   offset_key, offset_value, partition_for)


def test_java_string_hash_matches_java():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    # Non-BMP characters count as two UTF-16 code units, as in Java.
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00
    # Famous Integer.MIN_VALUE hash: Kafka's Utils.abs maps it to 0, not to a negative number.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0


def test_partition_for_is_abs_hash_mod_count():
    assert partition_for("hello", 50) == 99162322 % 50
    negative = "zzzzzzzzzz"
    assert java_string_hash(negative) < 0
    assert partition_for(negative, 7) == abs(java_string_hash(negative)) % 7


def test_offset_key_bytes_are_kafkas_layout():
    key = offset_key("g", "t", 3)
    assert key == struct.pack(">hh1sh1si", 1, 1, b"g", 1, b"t", 3)
    assert decode_key(key) == OffsetKey("g", "t", 3)
    # Key version 0 has the same layout.
    assert decode_key(b"\x00\x00" + key[2:]) == OffsetKey("g", "t", 3)


def test_group_key_and_offset_value_round_trip():
    assert decode_key(group_key("group-1")) == GroupKey("group-1")
    committed = OffsetAndMetadata(42, "meta", 1000, 2000)
    value = offset_value(committed)
    assert value == struct.pack(">hqh4sqq", 1, 42, 4, b"meta", 1000, 2000)
    assert decode_offset_value(value) == committed


def test_offset_value_v3_holds_the_committed_leader_epoch():
    # Kafka 2.1+'s layout (KIP-320): the epoch before the metadata, no expire timestamp.
    committed = OffsetAndMetadata(42, "meta", 1000, -1, leader_epoch=5)
    value = offset_value(committed)
    assert value == struct.pack(">hqih4sq", 3, 42, 5, 4, b"meta", 1000)
    assert decode_offset_value(value) == committed
    # v2 (Kafka 2.0): v1 without the expire timestamp.
    assert decode_offset_value(struct.pack(">hqh0sq", 2, 7, 0, b"", 1234)) == OffsetAndMetadata(7, "", 1234, -1)


def test_offset_value_v0_has_no_expiry():
    v0 = struct.pack(">hqh0sq", 0, 7, 0, b"", 1234)
    assert decode_offset_value(v0) == OffsetAndMetadata(7, "", 1234, -1)


def test_group_value_round_trip_and_v0_members():
    stored = StoredGroup("consumer", 5, "range", "m-1", (
        StoredMember("m-1", "c", "/127.0.0.1", 30000, 10000, b"sub", b"assign"),
        StoredMember("m-2", "c", "/127.0.0.1", 30000, 10000, b"", b""),
    ))
    assert decode_group_value(group_value(stored)) == stored
    empty = StoredGroup("consumer", 6, None, None, ())
    assert decode_group_value(group_value(empty)) == empty
    v0 = (struct.pack(">hh8sih5sh3si", 0, 8, b"consumer", 1, 5, b"range", 3, b"m-1", 1)
          + struct.pack(">h3sh1sh0si", 3, b"m-1", 1, b"c", 0, b"", 6000)
          + struct.pack(">i1si1s", 1, b"s", 1, b"a"))
    assert decode_group_value(v0) == StoredGroup("consumer", 1, "range", "m-1", (
        StoredMember("m-1", "c", "", 6000, 6000, b"s", b"a"),))


def test_group_value_v3_holds_static_members_instance_ids():
    """Kafka 2.3+'s layout (GroupMetadataManager's GROUP_METADATA_VALUE_SCHEMA_V3): a
    current-state timestamp after the leader, each member's group.instance.id after its id."""
    stored = StoredGroup("consumer", 2, "range", "m-1", (
        StoredMember("m-1", "c", "/h", 300, 100, b"s", b"a", group_instance_id="i"),
        StoredMember("m-2", "c", "/h", 300, 100, b"", b""),
    ))
    encoded = group_value(stored)
    assert encoded == (struct.pack(">hh8sih5sh3sqi", 3, 8, b"consumer", 2, 5, b"range", 3, b"m-1", -1, 2)
                       + struct.pack(">h3sh1sh1sh2siii1si1s", 3, b"m-1", 1, b"i", 1, b"c", 2, b"/h", 300, 100,
                                     1, b"s", 1, b"a")
                       + struct.pack(">h3shh1sh2siiii", 3, b"m-2", -1, 1, b"c", 2, b"/h", 300, 100, 0, 0))
    assert decode_group_value(encoded) == stored


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x05abc", b"\x00\x01\x00\x01g\x00\x01t\x00",
                                  b"\x00\x02\x00\x01g\x00", b"\x00\x02\xff\xffg"])
def test_bad_keys_raise_group_record_error(data):
    with pytest.raises(GroupRecordError):
        decode_key(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_only_ever_raises_group_record_error(data):
    for decode in (decode_key, decode_offset_value, decode_group_value):
        try:
            decode(data)
        except GroupRecordError:
            pass


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=20), st.text(max_size=20), st.integers(0, 2**31 - 1),
       st.integers(-1, 2**62), st.text(max_size=50))
def test_offset_round_trip(group, topic, partition, offset, metadata):
    assert decode_key(offset_key(group, topic, partition)) == OffsetKey(group, topic, partition)
    committed = OffsetAndMetadata(offset, metadata, 1, 2)
    assert decode_offset_value(offset_value(committed)) == committed
