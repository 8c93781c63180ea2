"""Keys and values of the ``__consumer_offsets`` events, in Kafka's own byte layouts.

Every event is one message whose key says what it is about and whose value is the new state
of that thing (a null value, a tombstone, says it is gone). These are the layouts Kafka's
``GroupMetadataManager`` writes, so Kafka's tools (``kafka-console-consumer`` with the
``OffsetsMessageFormatter`` / ``GroupMetadataMessageFormatter``) can read our log. All integers
are big-endian; ``string`` is an int16 length then UTF-8 bytes; ``nullable string`` uses
length -1 for null; ``bytes`` is an int32 length then the bytes.

Offset commit key (key version 0 or 1; we write 1)::

    int16 version | string group | string topic | int32 partition

Offset commit value (versions 0-3 read; 1 written, 3 for a commit with a leader epoch)::

    v0: int16 version=0 | int64 offset | string metadata | int64 timestamp
    v1: int16 version=1 | int64 offset | string metadata | int64 commit_timestamp
        | int64 expire_timestamp
    v2: int16 version=2 | int64 offset | string metadata | int64 commit_timestamp
    v3: int16 version=3 | int64 offset | int32 leader_epoch | string metadata
        | int64 commit_timestamp

Group metadata key (key version 2)::

    int16 version=2 | string group

Group metadata value (versions 0-3 read; 1 written, 3 for a group with static members)::

    int16 version | string protocol_type | int32 generation | nullable string protocol
    | nullable string leader | [v2+: int64 current_state_timestamp] | int32 member count
    | members...
    member v0: string member_id | string client_id | string client_host
               | int32 session_timeout | bytes subscription | bytes assignment
    member v1, v2: string member_id | string client_id | string client_host
               | int32 rebalance_timeout | int32 session_timeout | bytes subscription
               | bytes assignment
    member v3: string member_id | nullable string group_instance_id | then as v1

The group's partition of ``__consumer_offsets`` is ``abs(groupId.hashCode()) % partitions``
with Java's ``String.hashCode`` and Kafka's ``Utils.abs`` (which maps Integer.MIN_VALUE to 0),
so a group lands on the same partition number as it would in Kafka.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 1
# Kafka 2.1's layout, with the committed leader epoch (KIP-320) and no expire timestamp: written
# only for commits that carry an epoch (OffsetCommit v6+, which has no retention time of its
# own, so the loader's commit timestamp + offsets.retention.minutes is their expiry anyway).
EPOCH_OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 1
# Kafka 2.3's layout, with each member's group.instance.id (KIP-345): written only for groups
# with static members, so that a log without any stays readable by older readers.
STATIC_GROUP_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
_TWO_INT16 = struct.Struct(">hh")
_INT32 = struct.Struct(">i")
_OFFSET_VALUE_V1_HEAD = struct.Struct(">hqh")   # version, offset, metadata length
_TWO_INT64 = struct.Struct(">qq")
_INT64 = struct.Struct(">q")


class GroupRecordError(ValueError):
    """An event key or value that does not decode as any known version."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(units), 2):
        value = (31 * value + ((units[index] << 8) | units[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@functools.lru_cache(maxsize=1 << 16)
def partition_for(group_id: str, partition_count: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id`` (or ``__transaction_state``'s of a
    transactional id), as Kafka computes it. Java's String.hashCode is a Python loop, and
    every request of a group or transaction needs it: answers are kept."""
    code = java_string_hash(group_id)
    return (0 if code == -(1 << 31) else abs(code)) % partition_count


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset: what OffsetFetch returns, plus when it was committed and expires."""

    offset: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    leader_epoch: int = -1   # of the record before the offset (KIP-320); -1: unknown


@dataclass(frozen=True, slots=True)
class StoredMember:
    """One member as written in a group metadata value."""

    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class StoredGroup:
    """A group metadata value: the group as of its last completed rebalance."""

    protocol_type: str
    generation_id: int
    protocol: str | None
    leader_id: str | None
    members: tuple[StoredMember, ...]


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """Decoded offset commit key."""

    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    """Decoded group metadata key."""

    group_id: str


# ---------------------------------------------------------------------------- encoding


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0x7FFF:
        raise GroupRecordError(f"string of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


def _nullable_string(text: str | None) -> bytes:
    return _INT16.pack(-1) if text is None else _string(text)


def _bytes(data: bytes) -> bytes:
    return _INT32.pack(len(data)) + bytes(data)


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return (_INT16.pack(OFFSET_KEY_VERSION) + _string(group_id) + _string(topic)
            + _INT32.pack(partition))


def group_key(group_id: str) -> bytes:
    return _INT16.pack(GROUP_KEY_VERSION) + _string(group_id)


def offset_value(committed: OffsetAndMetadata) -> bytes:
    if committed.leader_epoch != -1:
        return (_INT16.pack(EPOCH_OFFSET_VALUE_VERSION) + _INT64.pack(committed.offset)
                + _INT32.pack(committed.leader_epoch) + _string(committed.metadata)
                + _INT64.pack(committed.commit_timestamp))
    metadata = committed.metadata.encode("utf-8")
    return (_OFFSET_VALUE_V1_HEAD.pack(OFFSET_VALUE_VERSION, committed.offset, len(metadata))
            + metadata + _TWO_INT64.pack(committed.commit_timestamp, committed.expire_timestamp))


def group_value(group: StoredGroup) -> bytes:
    static = any(member.group_instance_id is not None for member in group.members)
    parts = [_INT16.pack(STATIC_GROUP_VALUE_VERSION if static else GROUP_VALUE_VERSION),
             _string(group.protocol_type), _INT32.pack(group.generation_id),
             _nullable_string(group.protocol), _nullable_string(group.leader_id)]
    if static:
        parts.append(_INT64.pack(-1))   # current_state_timestamp: not kept here, -1 is Kafka's "none"
    parts.append(_INT32.pack(len(group.members)))
    for member in group.members:
        parts.append(_string(member.member_id))
        if static:
            parts.append(_nullable_string(member.group_instance_id))
        parts += [_string(member.client_id),
                  _string(member.client_host), _INT32.pack(member.rebalance_timeout_ms),
                  _INT32.pack(member.session_timeout_ms), _bytes(member.subscription),
                  _bytes(member.assignment)]
    return b"".join(parts)


# ---------------------------------------------------------------------------- decoding


class _Reader:
    """Cursor over one key or value; every read checks bounds."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise GroupRecordError("truncated group coordinator record")
        chunk = self.data[self.pos:end]
        self.pos = end
        return bytes(chunk)

    def int16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _INT64.unpack(self._take(8))[0]

    def string(self) -> str:
        size = self.int16()
        if size < 0:
            raise GroupRecordError("null where a string is required")
        return self._decode(self._take(size))

    def nullable_string(self) -> str | None:
        size = self.int16()
        return None if size == -1 else self._decode(self._take(size))

    def bytes_(self) -> bytes:
        size = self.int32()
        if size < 0:
            raise GroupRecordError("null where bytes are required")
        return self._take(size)

    @staticmethod
    def _decode(raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GroupRecordError(f"string is not UTF-8: {exc}") from None

    def finish(self) -> None:
        if self.pos != len(self.data):
            raise GroupRecordError(f"{len(self.data) - self.pos} trailing bytes in record")


def _fast_offset_key(key: bytes) -> OffsetKey | None:
    """The common case without a cursor object (start-up replays millions of these); None
    for anything unusual, which the careful path then decodes or refuses."""
    try:
        version, group_size = _TWO_INT16.unpack_from(key, 0)
        if version not in (0, 1) or group_size < 0:
            return None
        group_end = 4 + group_size
        topic_size = _INT16.unpack_from(key, group_end)[0]
        topic_end = group_end + 2 + topic_size
        if topic_size < 0 or topic_end + 4 != len(key):
            return None
        return OffsetKey(key[4:group_end].decode("utf-8"), key[group_end + 2:topic_end].decode("utf-8"),
                         _INT32.unpack_from(key, topic_end)[0])
    except (struct.error, UnicodeDecodeError):
        return None


def decode_key(key: bytes) -> OffsetKey | GroupKey:
    """Decode an event key; raises GroupRecordError for unknown versions or bad bytes."""
    fast = _fast_offset_key(key)
    if fast is not None:
        return fast
    reader = _Reader(key)
    version = reader.int16()
    if version in (0, 1):
        decoded: OffsetKey | GroupKey = OffsetKey(reader.string(), reader.string(), reader.int32())
    elif version == 2:
        decoded = GroupKey(reader.string())
    else:
        raise GroupRecordError(f"unknown key version {version}")
    reader.finish()
    return decoded


def decode_offset_value(value: bytes) -> OffsetAndMetadata:
    """Decode an offset commit value (v0-v3). v0, v2 and v3 values carry no expire timestamp:
    they decode with ``expire_timestamp`` -1 and the loader applies the default retention."""
    try:
        version, offset, metadata_size = _OFFSET_VALUE_V1_HEAD.unpack_from(value, 0)
        metadata_end = 12 + metadata_size
        if version == 1 and metadata_size >= 0 and metadata_end + 16 == len(value):
            commit_timestamp, expire_timestamp = _TWO_INT64.unpack_from(value, metadata_end)
            return OffsetAndMetadata(offset, value[12:metadata_end].decode("utf-8"),
                                     commit_timestamp, expire_timestamp)
    except (struct.error, UnicodeDecodeError):
        pass
    reader = _Reader(value)
    version = reader.int16()
    if version == 0:
        offset, metadata, timestamp = reader.int64(), reader.string(), reader.int64()
        reader.finish()
        return OffsetAndMetadata(offset, metadata, timestamp, -1)
    if version == 1:
        decoded = OffsetAndMetadata(reader.int64(), reader.string(), reader.int64(), reader.int64())
    elif version == 2:
        decoded = OffsetAndMetadata(reader.int64(), reader.string(), reader.int64(), -1)
    elif version == 3:
        offset, leader_epoch = reader.int64(), reader.int32()
        decoded = OffsetAndMetadata(offset, reader.string(), reader.int64(), -1, leader_epoch)
    else:
        raise GroupRecordError(f"unknown offset value version {version}")
    reader.finish()
    return decoded


def decode_group_value(value: bytes) -> StoredGroup:
    """Decode a group metadata value (v0-v3; v0 members' rebalance timeout is their
    session timeout)."""
    reader = _Reader(value)
    version = reader.int16()
    if version not in (0, 1, 2, 3):
        raise GroupRecordError(f"unknown group metadata value version {version}")
    protocol_type = reader.string()
    generation_id = reader.int32()
    protocol = reader.nullable_string()
    leader_id = reader.nullable_string()
    if version >= 2:
        reader.int64()   # current_state_timestamp
    count = reader.int32()
    if count < 0:
        raise GroupRecordError("negative member count")
    members = []
    for _ in range(count):
        member_id = reader.string()
        group_instance_id = reader.nullable_string() if version >= 3 else None
        client_id, client_host = reader.string(), reader.string()
        if version == 0:
            session_timeout = reader.int32()
            rebalance_timeout = session_timeout
        else:
            rebalance_timeout = reader.int32()
            session_timeout = reader.int32()
        members.append(StoredMember(member_id, client_id, client_host, rebalance_timeout,
                                    session_timeout, reader.bytes_(), reader.bytes_(), group_instance_id))
    reader.finish()
    return StoredGroup(protocol_type, generation_id, protocol, leader_id, tuple(members))
