"""Message sets of magic 0 and magic 1: reading, building, append-side validation.

A message set is a concatenation of shallow entries, laid out as ``protocol.entries``
describes: plain messages and compressed wrappers, each holding an inner message set.
Assigning offsets to a magic 1 wrapper rewrites eight bytes and never recompresses (KIP-31).

Fetch responses may end in a truncated entry (the broker cuts at ``max_bytes``); the readers
here (``iter_entries``, ``iter_records``, ``down_convert(ed)``, ``validate_given_offsets``) drop
it silently. A produce request's set must be whole: ``validate_and_assign`` refuses a
truncated tail with CORRUPT_MESSAGE.

Every error in a message set raises ``RecordError`` with the Kafka code the partition
answers with.

Where this module departs from Kafka 0.10.2's ``LogValidator`` / ``Log.append``, and why:

* Messages keep the magic they were produced with; Kafka converts them to the topic's
  ``message.format.version``. Consequently a set mixing magic 0 and magic 1 (which no client
  produces) is refused with CORRUPT_MESSAGE rather than converted.
* Each compressed wrapper is handled on its own and updated in place even when the set holds
  other entries. Kafka 0.10.2 counts inner offsets across all wrappers of a set, so any set
  with two wrappers is merged and recompressed there.
* A magic 1 wrapper whose inner offsets are not 0..n-1 is CORRUPT_MESSAGE; Kafka recompresses
  it with new inner offsets. KIP-31 has the broker verify the relative offsets and never
  recompress; every magic 1 producer (the Java client, librdkafka, kafka-python, and our own
  magic 2 conversion) writes 0..n-1, so only a broken producer is refused.
* A truncated last message in a produce request is CORRUPT_MESSAGE; Kafka drops it silently,
  which acknowledges records that were never written.
* An empty produce set is CORRUPT_MESSAGE; Kafka answers NONE with base offset -1. Refusing
  it means the log never sees a zero-record append.
* RECORD_LIST_TOO_LARGE, which Kafka returns for a set larger than a whole segment, is the
  log's check: it knows ``segment.bytes``.
"""

from __future__ import annotations

import functools
import os
import struct
import zlib
from types import MappingProxyType
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple

from minikafka.protocol import entries, record_batch
from minikafka.protocol.compression import Codec, compress, decompress
from minikafka.protocol.entries import (
    ATTRIBUTES_POSITION as _ATTRIBUTES_POSITION,
    CODEC_MASK as _CODEC_MASK,
    CODECS as _CODECS,
    CRC_POSITION as _CRC_POSITION,
    HEAD as _HEAD,
    HEAD_AND_KEY_LENGTH as _HEAD_AND_KEY_LENGTH,
    HEAD_AND_LENGTHS as _HEAD_AND_LENGTHS,
    KEY_POSITION as _KEY_POSITION,
    LOG_OVERHEAD,
    MAGIC_POSITION as _MAGIC_POSITION,
    MIN_ENTRY_SIZE as _MIN_ENTRY_SIZE,
    MIN_MESSAGE_SIZE as _MIN_MESSAGE_SIZE,
    NO_TIMESTAMP,
    TIMESTAMP_POSITION as _TIMESTAMP_POSITION,
    TIMESTAMP_TYPE_BIT as _TIMESTAMP_TYPE_BIT,
    BATCH_CODECS as _BATCH_CODECS,
    BATCH_CRC_START as _BATCH_CRC_START,
    MIN_BATCH_SIZE as _MIN_BATCH_SIZE,
    Entry,
    iter_entries,
)
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import RECORD_BATCH_MAGIC, magic_1_conversion

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "NO_TIMESTAMP",
    "NO_TIMESTAMP_TYPE",
    "LOG_OVERHEAD",
    "Codec",
    "Entry",
    "Record",
    "ValidationConfig",
    "ValidatedSet",
    "iter_entries",
    "iter_records",
    "build_message_set",
    "validate_and_assign",
    "validate_given_offsets",
    "down_convert",
    "down_converted",
]

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP_TYPE = -1  # timestamp type of magic 0 messages, which carry no timestamp
_ATTRIBUTES_TIMESTAMP = struct.Struct(">Bq")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT32 = struct.Struct(">I")
_BATCH_MAX_TIMESTAMP_POSITION = 35
_NO_PRODUCERS: Mapping[int, int] = MappingProxyType({})
# Magic 2, from the CRC on: crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp.
_BATCH_CRC_AND_FIELDS = struct.Struct(">Ihiqq")

_crc32 = zlib.crc32


def _corrupt(message: str) -> RecordError:
    return RecordError(ErrorCode.CORRUPT_MESSAGE, message)


class Record(NamedTuple):
    """One logical message, after deep iteration through compressed wrappers.

    ``offset`` is absolute. ``timestamp_type`` is CREATE_TIME, LOG_APPEND_TIME, or
    NO_TIMESTAMP_TYPE (-1) for magic 0, whose ``timestamp`` is always -1.
    """

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    magic: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


class ValidationConfig(NamedTuple):
    """The topic settings that govern append validation (Kafka's topic-level names:
    ``max.message.bytes``, ``message.timestamp.type``,
    ``message.timestamp.difference.max.ms``, and ``message.format.version`` as the magic it
    writes: 2, or 1 for this broker's magic 0/1 log, which keeps what producers send)."""

    max_message_bytes: int = 1048588
    timestamp_type: int = CREATE_TIME
    max_timestamp_difference_ms: int = 2**63 - 1
    magic: int = RECORD_BATCH_MAGIC
    # ``compression.type``: the codec the log stores records in, None for the producer's
    # (Kafka's "producer").
    codec: Codec | None = None


class ValidatedSet(NamedTuple):
    """A message set ready to append, and what the log needs to know of it.

    ``max_timestamp`` is -1 and ``offset_of_max_timestamp`` -1 when no message has a
    timestamp; for a compressed entry the offset of the max timestamp is the wrapper's (last)
    offset, as Kafka indexes it. ``log_append_time`` is the time stamped into the set under
    LogAppendTime, else -1. ``record_count`` counts logical (inner) messages
    (``validate_given_offsets``: shallow entries, see there). ``first_untimed_offset`` is the
    (last) offset of the first entry without a timestamp, -1 if none, and ``first_timestamp``
    the first entry's timestamp (-1 if it has none), which starts a new segment's roll clock.
    Which entries the log's indexes point at the segment decides (``entries.index_entries``).

    ``buffer`` is bytes, or, for a set converted from magic 2, the bytearray the conversion
    wrote and offsets were assigned in (no one else holds it; copying a megabyte to make it
    bytes costs page faults and a copy per produce), or the view of a request's frame that
    batches were assigned in place in (``in_place``).
    """

    buffer: bytes | bytearray | memoryview
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    record_count: int
    first_timestamp: int
    first_untimed_offset: int
    producer_batches: tuple[record_batch.ProducerBatch, ...] = ()
    # A follower's set: where the leader epochs of its batches start (validate_given_offsets).
    leader_epoch_starts: tuple[tuple[int, int], ...] = ()


# ---------------------------------------------------------------------------------------
# Parsing one message


class _Message(NamedTuple):
    """A parsed message inside some buffer (used off the uncompressed fast path)."""

    offset: int
    position: int
    end: int
    magic: int
    attributes: int
    timestamp: int
    key_position: int
    key_length: int
    value_position: int
    value_length: int


def _parse_message(view: memoryview, position: int, limit: int, *, check_crc: bool = True) -> _Message:
    """Parse and check the entry at ``position`` of ``view``, which must not end before
    ``limit``; the entry must end by ``limit``."""
    offset, size, crc, magic, attributes, timestamp = _HEAD.unpack_from(view, position)
    end = position + LOG_OVERHEAD + size
    if magic != 0 and magic != 1:
        raise _corrupt(f"message at offset {offset} has unknown magic {magic}")
    if size < _MIN_MESSAGE_SIZE[magic]:
        raise _corrupt(f"message at offset {offset} has impossible size {size}")
    if end > limit:
        raise _corrupt(f"message at offset {offset} overruns its buffer")
    if check_crc and _crc32(view[position + _MAGIC_POSITION : end]) != crc:
        raise _corrupt(f"message at offset {offset} fails its CRC check")
    key_position = position + _KEY_POSITION[magic]
    (key_length,) = _INT32.unpack_from(view, key_position)
    value_length_position = key_position + 4 + (key_length if key_length > 0 else 0)
    if key_length < -1 or value_length_position + 4 > end:
        raise _corrupt(f"message at offset {offset} has a bad key length {key_length}")
    (value_length,) = _INT32.unpack_from(view, value_length_position)
    if value_length < -1 or value_length_position + 4 + (value_length if value_length > 0 else 0) != end:
        raise _corrupt(f"message at offset {offset} has a bad value length {value_length}")
    if magic == 0:
        timestamp = NO_TIMESTAMP
    return _Message(
        offset,
        position,
        end,
        magic,
        attributes,
        timestamp,
        key_position + 4,
        key_length,
        value_length_position + 4,
        value_length,
    )


def _whole_entry_end(buf, position: int, length: int) -> int:
    """End of the entry at ``position`` if all of it is in the buffer, else -1.

    Raises CORRUPT_MESSAGE for a size no message can have.
    """
    if length - position < LOG_OVERHEAD:
        return -1
    (size,) = _INT32.unpack_from(buf, position + 8)
    if size < _MIN_MESSAGE_SIZE[0]:
        raise _corrupt(f"message at byte {position} has impossible size {size}")
    end = position + LOG_OVERHEAD + size
    return end if end <= length else -1


def _bytes_or_none(view: memoryview, position: int, length: int) -> bytes | None:
    return None if length < 0 else view[position : position + length].tobytes()


def _decompressed_value(wrapper: _Message, view: memoryview) -> bytes:
    """The inner message set of a compressed wrapper."""
    codec = _CODECS[wrapper.attributes & _CODEC_MASK]
    if codec is None:
        raise _corrupt(
            f"message at offset {wrapper.offset} has unknown codec {wrapper.attributes & _CODEC_MASK}"
        )
    if wrapper.value_length < 0:
        raise _corrupt(f"compressed message at offset {wrapper.offset} has a null value")
    payload = view[wrapper.value_position : wrapper.value_position + wrapper.value_length]
    return decompress(codec, payload, magic=wrapper.magic)


def _inner_messages(wrapper: _Message, view: memoryview) -> tuple[memoryview, list[_Message]]:
    """Decompress a wrapper and parse (and CRC-check) every inner message, for readers.

    Inner messages must be whole, uncompressed and of the wrapper's magic.
    """
    inner = memoryview(_decompressed_value(wrapper, view))
    length = len(inner)
    messages = []
    position = 0
    while position < length:
        end = _whole_entry_end(inner, position, length)
        if end < 0:
            raise _corrupt(f"compressed message at offset {wrapper.offset} has a truncated inner set")
        message = _parse_message(inner, position, end)
        if message.magic != wrapper.magic:
            raise _corrupt(
                f"compressed message at offset {wrapper.offset} (magic {wrapper.magic}) "
                f"holds a magic {message.magic} message"
            )
        if message.attributes & _CODEC_MASK:
            raise _corrupt(f"compressed message at offset {wrapper.offset} nests compression")
        messages.append(message)
        position = end
    if not messages:
        raise _corrupt(f"compressed message at offset {wrapper.offset} holds no messages")
    return inner, messages


# ---------------------------------------------------------------------------------------
# Readers


def iter_records(buf) -> Iterator[Record]:
    """Every logical message of ``buf``, through compressed wrappers, with absolute offsets.

    Every CRC (outer and inner) is checked: CORRUPT_MESSAGE on a mismatch. A truncated last
    entry is skipped. Inner messages of a LogAppendTime wrapper take the wrapper's timestamp.
    """
    view = memoryview(buf)
    length = len(view)
    position = 0
    while True:
        end = _whole_entry_end(view, position, length)
        if end < 0:
            return
        if view[position + _MAGIC_POSITION] == RECORD_BATCH_MAGIC:
            yield from _batch_records(view[position:end], position)
            position = end
            continue
        message = _parse_message(view, position, end)
        position = end
        if not message.attributes & _CODEC_MASK:
            yield _record(view, message, message.offset, message.timestamp, _timestamp_type(message))
            continue
        inner, messages = _inner_messages(message, view)
        if message.magic == 0:
            for item in messages:
                yield _record(inner, item, item.offset, NO_TIMESTAMP, NO_TIMESTAMP_TYPE)
            continue
        base = message.offset - messages[-1].offset
        if message.attributes & _TIMESTAMP_TYPE_BIT:
            for item in messages:
                yield _record(inner, item, base + item.offset, message.timestamp, LOG_APPEND_TIME)
        else:
            for item in messages:
                yield _record(inner, item, base + item.offset, item.timestamp, CREATE_TIME)


def _batch_records(batch_bytes: memoryview, position: int) -> Iterator[Record]:
    """The records of the magic 2 batch ``batch_bytes`` (at ``position`` of its buffer); a
    control batch (a transaction marker) holds none that consumers see, and a batch the
    cleaner emptied none at all."""
    for batch in record_batch.iter_batches(batch_bytes, allow_empty=True):
        if batch.is_control:
            return
        for record in record_batch.batch_records(batch_bytes, batch):
            yield Record(record.offset, record.timestamp, record.timestamp_type, record.key, record.value,
                         RECORD_BATCH_MAGIC, record.headers)


def _timestamp_type(message: _Message) -> int:
    if message.magic == 0:
        return NO_TIMESTAMP_TYPE
    return LOG_APPEND_TIME if message.attributes & _TIMESTAMP_TYPE_BIT else CREATE_TIME


def _record(view: memoryview, message: _Message, offset: int, timestamp: int, timestamp_type: int) -> Record:
    return Record(
        offset,
        timestamp,
        timestamp_type,
        _bytes_or_none(view, message.key_position, message.key_length),
        _bytes_or_none(view, message.value_position, message.value_length),
        message.magic,
    )


# ---------------------------------------------------------------------------------------
# Building


def _append_message(
    out: bytearray,
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key,
    value,
) -> None:
    """Append one entry (log overhead + message) to ``out``, CRC included."""
    start = len(out)
    key_length = -1 if key is None else len(key)
    value_length = -1 if value is None else len(value)
    size = _MIN_MESSAGE_SIZE[magic] + max(key_length, 0) + max(value_length, 0)
    out += _HEAD_AND_KEY_LENGTH[magic].pack(offset, size, 0, magic, attributes, timestamp if magic else b"", key_length)
    if key is not None:
        out += key
    out += _INT32.pack(value_length)
    if value is not None:
        out += value
    crc = _crc32(memoryview(out)[start + _MAGIC_POSITION :])
    _UINT32.pack_into(out, start + _CRC_POSITION, crc)


def build_message_set(
    records: Iterable[tuple[bytes | None, bytes | None, int]],
    *,
    magic: int = 1,
    codec: Codec = Codec.NONE,
    base_offset: int = 0,
    timestamp_type: int = CREATE_TIME,
) -> bytes:
    """Encode ``(key, value, timestamp ms)`` tuples as a message set, the way a producer
    (``base_offset`` 0) or a broker writes one.

    Uncompressed: one message per record at ``base_offset + i``. Compressed: one wrapper
    whose offset is ``base_offset + n - 1``, holding inner offsets 0..n-1 (magic 1) or the
    absolute offsets (magic 0). Magic 0 drops timestamps. A magic 1 wrapper's timestamp is
    the largest inner one; ``LOG_APPEND_TIME`` sets attribute bit 3 on the wrapper (or on
    each uncompressed message). No records make an empty set.
    """
    if magic not in (0, 1):
        raise ValueError(f"magic must be 0 or 1, not {magic}")
    codec = Codec(codec)
    type_bit = _TIMESTAMP_TYPE_BIT if magic == 1 and timestamp_type == LOG_APPEND_TIME else 0
    out = bytearray()
    _append_legacy_set(
        out,
        [(base_offset + index, key, value, timestamp) for index, (key, value, timestamp) in enumerate(records)],
        magic, codec, type_bit, 0,
    )
    return bytes(out)


def _append_legacy_set(out: bytearray, records: list, magic: int, codec: Codec, type_bit: int,
                       inner_type_bit: int) -> None:
    """Append ``(offset, key, value, timestamp)`` records, in offset order, to ``out`` as magic
    0/1 entries: uncompressed, one message each at its offset with ``type_bit`` in its
    attributes; compressed, one wrapper at the last offset with ``codec | type_bit`` and the
    largest inner timestamp, its inner messages (attributes ``inner_type_bit``) at offsets
    relative to the first (magic 1, KIP-31) or absolute (magic 0). No records append nothing.
    """
    if codec == Codec.NONE:
        for offset, key, value, timestamp in records:
            _append_message(out, offset, magic, type_bit, timestamp, key, value)
        return
    if not records:
        return
    first_offset = records[0][0] if magic == 1 else 0
    inner = bytearray()
    max_timestamp = NO_TIMESTAMP
    for offset, key, value, timestamp in records:
        _append_message(inner, offset - first_offset, magic, inner_type_bit, timestamp, key, value)
        if timestamp > max_timestamp:
            max_timestamp = timestamp
    _append_message(
        out,
        records[-1][0],
        magic,
        codec | type_bit,
        max_timestamp,
        None,
        compress(codec, bytes(inner), magic=magic),
    )


# ---------------------------------------------------------------------------------------
# Validation on append


def validate_and_assign(buf, next_offset: int, now_ms: int, config: ValidationConfig,
                        leader_epoch: int = -1, *, inner_sets_out: list | None = None,
                        in_place: bool = False) -> ValidatedSet:
    """Check a produced message set and assign offsets from ``next_offset`` (leader path).

    For a log of magic 2 (``config.magic``) see ``_validate_for_record_batch_log``: batches
    are validated and assigned in place (their partition leader epoch becomes
    ``leader_epoch``), magic 0/1 sets up-converted. The rest of this docstring is the magic
    0/1 log, which keeps today's format bit for bit:

    Refuses the whole set with ``RecordError``:

    * CORRUPT_MESSAGE: empty set, truncated tail, impossible size, bad CRC (of any message,
      inner ones included), unknown magic or codec, magic differing between messages (or
      between a wrapper and its inner messages), nested compression, a compressed message
      with a null value or no inner messages, a magic 1 wrapper whose inner (relative)
      offsets are not 0..n-1, key/value lengths that do not add up.
    * MESSAGE_TOO_LARGE: an entry (12-byte overhead included) over ``max_message_bytes``,
      also checked again after recompression.
    * INVALID_TIMESTAMP: under CreateTime a timestamp (other than -1) further than
      ``max_timestamp_difference_ms`` from ``now_ms``; or a producer that set the
      LogAppendTime attribute itself.

    Offsets: each uncompressed message's offset field is overwritten in place. A magic 1
    wrapper only gets its own offset (the absolute offset of its last inner message) and
    timestamp rewritten, never recompressed (KIP-31). A magic 0 wrapper is recompressed with
    the same codec and absolute inner offsets, as Kafka 0.10.2's LogValidator does. Messages
    keep their magic. A ``config.codec`` (the topic's ``compression.type``) other than the
    producer's rebuilds the set in it (``_legacy_recompressed``).

    Timestamps: under CreateTime a magic 1 wrapper's timestamp becomes its largest inner
    timestamp (the outer CRC is recomputed if that changes it). Under LogAppendTime each
    magic 1 uncompressed message or wrapper gets timestamp ``now_ms`` and attribute bit 3,
    and only its outer CRC is recomputed.

    Magic 2 record batches (a set whose first entry has magic 2 at byte 16) are first
    converted to magic 1, as Kafka converts them to an older log format, then validated as
    above: see ``protocol.record_batch`` for what is refused there and with which code.

    ``inner_sets_out``, for a magic 0/1 set on a log of magic 0/1: a list this appends each
    wrapper's decompressed inner set to, in order (an up-conversion reads them there instead
    of decompressing every wrapper again).

    ``in_place``: ``buf`` is handed over, and record batches for a log of magic 2 may be
    assigned in it (``record_batch.assign_batches``).
    """
    length = len(buf)
    if length == 0:
        raise _corrupt("empty message set")
    if config.magic == RECORD_BATCH_MAGIC:
        return _validate_for_record_batch_log(buf, next_offset, now_ms, config, leader_epoch, in_place)
    fresh = False
    assign_wrapper = _assign_wrapper if inner_sets_out is None else functools.partial(
        _assign_wrapper, inner_sets_out=inner_sets_out)
    if length > _MAGIC_POSITION and buf[_MAGIC_POSITION] == RECORD_BATCH_MAGIC:
        buf, inner_sets = _magic_1_from_record_batches(buf, config.max_message_bytes)
        # The conversion just wrote these messages and their CRCs, and still holds each
        # wrapper's inner set: checking the CRCs again, copying the set, or decompressing what
        # was compressed a moment ago cost the C path over 40% more per record and check nothing.
        fresh = True
        if inner_sets:
            assign_wrapper = functools.partial(_assign_wrapper, inner_sets=inner_sets)
    log_append_time = config.timestamp_type == LOG_APPEND_TIME
    earliest, latest = _accepted_timestamps(now_ms, config)
    out, offset, max_timestamp, offset_of_max_timestamp, first_untimed, replacements = _assign_loop(
        buf, next_offset, now_ms, config.max_message_bytes, log_append_time, earliest, latest,
        assign_wrapper, fresh,
    )
    if replacements:
        out = _splice(out, replacements)
    validated = ValidatedSet(
        buffer=out,
        first_offset=next_offset,
        last_offset=offset - 1,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max_timestamp,
        log_append_time=now_ms if log_append_time else NO_TIMESTAMP,
        record_count=offset - next_offset,
        first_timestamp=_first_timestamp(out),
        first_untimed_offset=first_untimed,
    )
    if config.codec is not None and any(entry.codec != config.codec for entry in iter_entries(out)):
        return _legacy_recompressed(validated, config)
    return validated


def _legacy_recompressed(validated: ValidatedSet, config: ValidationConfig) -> ValidatedSet:
    """A validated magic 0/1 set rebuilt in the topic's ``compression.type``, as Kafka 0.10.2's
    LogValidator does when the producer's codec is not the target codec
    (``validateMessagesAndAssignOffsetsCompressed`` without in-place assignment): the same
    offsets, keys, values and magic, one wrapper (or, uncompressed, one message per record).
    Timestamps are the validated set's: under LogAppendTime the append time, which the rebuilt
    uncompressed messages carry with the LogAppendTime bit as an in-place append writes them
    (Kafka's rebuild copies the producer's messages there, so their own timestamps would
    show). The rebuilt entries are checked against ``max.message.bytes`` again, and the
    timestamps the log indexes are those of the rebuilt entries."""
    if config.codec == Codec.ZSTD:
        # Kafka's MemoryRecordsBuilder cannot write zstd below magic 2 either (it fails the append)
        raise RecordError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                          "compression.type zstd needs message.format.version 2.1 or later")
    magic = validated.buffer[_MAGIC_POSITION]
    type_bit = _TIMESTAMP_TYPE_BIT if magic == 1 and validated.log_append_time != NO_TIMESTAMP else 0
    rebuilt = bytearray()
    _append_legacy_set(rebuilt, [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(validated.buffer)],
                       magic, config.codec, type_bit, 0)
    shallow = validate_given_offsets(rebuilt, validated.first_offset, config)
    return validated._replace(buffer=shallow.buffer, max_timestamp=shallow.max_timestamp,
                              offset_of_max_timestamp=shallow.offset_of_max_timestamp,
                              first_timestamp=shallow.first_timestamp,
                              first_untimed_offset=shallow.first_untimed_offset)


def _accepted_timestamps(now_ms: int, config: ValidationConfig) -> tuple[int, int]:
    """The range CreateTime timestamps must lie in, clamped to int64, where every timestamp
    lies, so the native loops can compare them."""
    return (max(now_ms - config.max_timestamp_difference_ms, _INT64_MIN),
            min(now_ms + config.max_timestamp_difference_ms, _INT64_MAX))


def _validate_for_record_batch_log(buf, next_offset: int, now_ms: int, config: ValidationConfig,
                                   leader_epoch: int, in_place: bool) -> ValidatedSet:
    """``validate_and_assign`` for a log of magic 2: record batches in place
    (``record_batch.assign_batches``), magic 0/1 sets up-converted."""
    log_append_time = config.timestamp_type == LOG_APPEND_TIME
    if len(buf) <= _MAGIC_POSITION or buf[_MAGIC_POSITION] != RECORD_BATCH_MAGIC:
        return _up_converted(buf, next_offset, now_ms, config, leader_epoch)
    earliest, latest = _accepted_timestamps(now_ms, config)
    assigned = record_batch.assign_batches(
        buf, next_offset, now_ms, max_message_bytes=config.max_message_bytes, log_append_time=log_append_time,
        earliest=earliest, latest=latest, leader_epoch=leader_epoch, in_place=in_place,
    )
    buffer = assigned.buffer
    if config.codec is not None and any(entry.codec != config.codec for entry in iter_entries(buffer)):
        buffer = record_batch.recompressed(buffer, config.codec, config.max_message_bytes)
    return ValidatedSet(
        buffer=buffer,
        first_offset=next_offset,
        last_offset=assigned.next_offset - 1,
        max_timestamp=assigned.max_timestamp,
        offset_of_max_timestamp=assigned.offset_of_max_timestamp,
        log_append_time=now_ms if log_append_time else NO_TIMESTAMP,
        record_count=assigned.next_offset - next_offset,
        first_timestamp=assigned.first_timestamp,
        first_untimed_offset=assigned.first_untimed_offset,
        producer_batches=assigned.producer_batches,
    )


def _up_converted(buf, next_offset: int, now_ms: int, config: ValidationConfig, leader_epoch: int) -> ValidatedSet:
    """A magic 0/1 set written as one magic 2 batch, as Kafka 2.8's LogValidator converts an
    old producer's set for a newer log (``convertAndAssignOffsetsNonCompressed``; compressed,
    ``buildRecordsAndAssignOffsets``). The set is checked as a magic 1 log checks it (CRCs,
    sizes, timestamps), then its records are rebuilt (``_magic_2_records``): magic 0 messages
    get no timestamp (-1), and under LogAppendTime every record the append time. The codec is
    the topic's ``compression.type``, or where that is ``producer`` the producer's (the first
    wrapper's; Kafka takes the last's, and no client mixes codecs in a set). An uncompressed
    set is checked and converted in one walk; a set that fails the checks, or holds wrappers,
    is assigned as a magic 1 log assigns it first (which raises the error, if any)."""
    log_append_time = config.timestamp_type == LOG_APPEND_TIME
    append_time = now_ms if log_append_time else NO_TIMESTAMP
    producer_codec = Codec.NONE
    converted = _magic_2_records(buf, append_time, config.max_message_bytes, *_accepted_timestamps(now_ms, config))
    if converted is None:
        inner_sets: list = []
        legacy = validate_and_assign(buf, next_offset, now_ms, config._replace(magic=1, codec=None),
                                     inner_sets_out=inner_sets)
        converted = _magic_2_records(legacy.buffer, append_time)
        if converted is None:  # wrappers: their inner sets are converted
            plain, producer_codec = _unwrapped(legacy.buffer, inner_sets)
            converted = _magic_2_records(plain, append_time)
    section, count, base_timestamp, max_timestamp = converted
    last_offset = next_offset + count - 1
    batch = record_batch.batch_of_section(
        section, count, base_timestamp, max_timestamp, codec=producer_codec if config.codec is None else config.codec,
        base_offset=next_offset, timestamp_type=LOG_APPEND_TIME if log_append_time else CREATE_TIME,
        partition_leader_epoch=leader_epoch,
    )
    if len(batch) > config.max_message_bytes:
        raise _too_large(len(batch), config.max_message_bytes)
    timed = max_timestamp >= 0
    return ValidatedSet(
        buffer=batch,
        first_offset=next_offset,
        last_offset=last_offset,
        max_timestamp=max_timestamp if timed else NO_TIMESTAMP,
        offset_of_max_timestamp=last_offset if timed else -1,
        log_append_time=append_time,
        record_count=count,
        first_timestamp=max_timestamp if timed else NO_TIMESTAMP,
        first_untimed_offset=-1 if timed else last_offset,
    )


def _unwrapped(buf, inner_sets: list) -> tuple[bytes, Codec]:
    """A checked magic 0/1 set with each wrapper replaced by its inner messages (``inner_sets``,
    the wrappers' decompressed inner sets in order), and the first wrapper's codec."""
    view = memoryview(buf)
    pieces = []
    codec = Codec.NONE
    inner = iter(inner_sets)
    for entry in iter_entries(buf):
        if entry.codec:
            codec = codec or entry.codec
            pieces.append(next(inner))
        else:
            pieces.append(view[entry.position : entry.position + entry.size])
    return b"".join(pieces), codec


_INT64_SPAN = 2**64


def _py_magic_2_records(buf, append_time: int, max_message_bytes: int = -1, earliest: int = 0,
                        latest: int = 0) -> tuple[bytearray, int, int, int] | None:
    """The uncompressed records section of the batch that ``buf``, whole and checked
    uncompressed magic 0/1 messages, becomes: offset deltas 0..n-1, no headers, each message's
    timestamp (-1 for magic 0) or ``append_time`` unless that is -1. Returns (section, record
    count, base timestamp, max timestamp), None for a compressed message (a wrapper) or one
    that does not parse. With ``max_message_bytes`` (and the CreateTime range ``earliest`` ..
    ``latest``) ``buf`` may be a set as a producer sent it: None also where a magic 1 log's
    ``_assign_loop`` would refuse it (another magic than the first message's, an entry over
    the limit, a CRC, a producer's LogAppendTime bit, a timestamp out of range), so an
    up-conversion checks and converts in one walk. ``_records.magic_2_records`` is the same
    loop in C: keep them in step (tests/protocol compare them)."""
    checked = max_message_bytes >= 0
    view = memoryview(buf)
    end = len(view)
    section = bytearray()
    count = 0
    base_timestamp = max_timestamp = NO_TIMESTAMP
    position = 0
    while position < end:
        if end - position < _MIN_ENTRY_SIZE:
            return None
        try:
            message = _parse_message(view, position, end, check_crc=checked)
        except RecordError:
            return None
        if message.attributes & _CODEC_MASK:
            return None
        if checked and (message.magic != view[_MAGIC_POSITION] or message.end - position > max_message_bytes
                        or message.magic and (message.attributes & _TIMESTAMP_TYPE_BIT
                                              or append_time == NO_TIMESTAMP and message.timestamp != NO_TIMESTAMP
                                              and not earliest <= message.timestamp <= latest)):
            return None
        timestamp = message.timestamp if append_time == NO_TIMESTAMP else append_time
        if not count:
            base_timestamp = timestamp
        max_timestamp = max(max_timestamp, timestamp)
        # int64 arithmetic, as the C loop's: two timestamps further apart than int64 holds
        # (only a producer's extremes) wrap rather than overflow the varlong
        delta = (timestamp - base_timestamp + _INT64_SPAN // 2) % _INT64_SPAN - _INT64_SPAN // 2
        record_batch.append_record(section, delta, count,
                                   _bytes_or_none(view, message.key_position, message.key_length),
                                   _bytes_or_none(view, message.value_position, message.value_length), ())
        count += 1
        position = message.end
    return (section, count, base_timestamp, max_timestamp) if count else None


def _first_timestamp(out) -> int:
    """The first entry's timestamp as written (magic 1: after LogAppendTime or the wrapper's
    max inner timestamp went in), -1 for magic 0."""
    magic = out[_MAGIC_POSITION]
    if magic == 0:
        return NO_TIMESTAMP
    return _INT64.unpack_from(out, _BATCH_MAX_TIMESTAMP_POSITION if magic == RECORD_BATCH_MAGIC else _TIMESTAMP_POSITION)[0]


def _py_assign_loop(
    buf,
    next_offset: int,
    now_ms: int,
    max_message_bytes: int,
    log_append_time: bool,
    earliest: int,
    latest: int,
    assign_wrapper,
    fresh: bool = False,
) -> tuple[bytes | bytearray, int, int, int, int, dict[int, bytes] | None]:
    """``validate_and_assign``'s per-message loop over ``buf``.

    Returns the set with offsets (and LogAppendTime) written in, the next free offset, the
    max timestamp and its offset, the first untimed offset and the replacement entries by position (recompressed magic 0 wrappers; None if there are none).
    Wrappers go to ``assign_wrapper`` (``_assign_wrapper``). ``fresh``: ``buf`` is a bytearray
    this process has just written (a magic 2 conversion), assigned in place and returned, its
    CRCs not checked again. ``_records.assign_loop`` is the same loop in C: keep them in step.
    """
    out = buf if fresh else bytearray(buf)
    length = len(out)
    view = memoryview(out)
    max_size = max_message_bytes - LOG_OVERHEAD
    unpack_int32 = _INT32.unpack_from
    pack_offset = _INT64.pack_into
    pack_crc = _UINT32.pack_into
    pack_attributes_timestamp = _ATTRIBUTES_TIMESTAMP.pack_into
    crc32 = _crc32
    replacements: dict[int, bytes] | None = None
    offset = next_offset
    max_timestamp = NO_TIMESTAMP
    offset_of_max_timestamp = -1
    first_untimed = -1
    set_magic = out[_MAGIC_POSITION] if length > _MAGIC_POSITION else -1
    if set_magic != 0 and set_magic != 1:
        raise _corrupt(f"message set starts with unknown magic {set_magic} or is truncated")
    value_position = _KEY_POSITION[set_magic] + 4
    min_size = _MIN_MESSAGE_SIZE[set_magic]
    head = _HEAD_AND_LENGTHS[set_magic]
    unpack_head, head_size = head.unpack_from, head.size
    position = 0
    try:
        while position < length:
            if length - position < head_size:
                raise _short_tail(out, position, min_size)
            _, size, crc, magic, attributes, timestamp, key_length, value_length = unpack_head(out, position)
            end = position + LOG_OVERHEAD + size
            if size < min_size or end > length:
                if size < min_size:
                    raise _corrupt(f"message at byte {position} has impossible size {size}")
                raise _corrupt(f"message set ends in a truncated message at byte {position}")
            if size > max_size:
                raise _too_large(size + LOG_OVERHEAD, max_message_bytes)
            if magic != set_magic:
                raise _corrupt(f"message set mixes magic {set_magic} and magic {magic}")
            if not fresh and crc32(view[position + _MAGIC_POSITION : end]) != crc:
                raise _corrupt(f"message at byte {position} fails its CRC check")
            if key_length != -1:
                value_length_position = position + value_position + key_length
                if key_length < -1 or value_length_position + 4 > end:
                    raise _corrupt(f"message at byte {position} has a bad key length {key_length}")
                (value_length,) = unpack_int32(out, value_length_position)
            else:
                value_length_position = position + value_position
            if value_length_position + 4 + (value_length if value_length > 0 else 0) != end or value_length < -1:
                raise _corrupt(f"message at byte {position} has a bad value length {value_length}")

            if attributes & _CODEC_MASK:
                offset, entry_timestamp, replacement = assign_wrapper(
                    out, position, end, offset, now_ms, log_append_time, earliest, latest
                )
                if replacement is not None:
                    if len(replacement) > max_message_bytes:
                        raise _too_large(len(replacement), max_message_bytes)
                    if replacements is None:
                        replacements = {}
                    replacements[position] = replacement
                last_offset = offset - 1
            else:
                if magic == 0:
                    entry_timestamp = NO_TIMESTAMP
                elif attributes & _TIMESTAMP_TYPE_BIT:
                    raise _producer_log_append_time(position)
                elif log_append_time:
                    entry_timestamp = now_ms
                    pack_attributes_timestamp(
                        out, position + _ATTRIBUTES_POSITION, (attributes | _TIMESTAMP_TYPE_BIT) & 0xFF, now_ms
                    )
                    pack_crc(out, position + _CRC_POSITION, crc32(view[position + _MAGIC_POSITION : end]))
                else:
                    entry_timestamp = timestamp
                    if (timestamp < earliest or timestamp > latest) and timestamp != NO_TIMESTAMP:
                        raise _invalid_timestamp(timestamp, now_ms)
                pack_offset(out, position, offset)
                last_offset = offset
                offset += 1
            if entry_timestamp > max_timestamp:
                max_timestamp = entry_timestamp
                offset_of_max_timestamp = last_offset
            elif entry_timestamp < 0 and first_untimed < 0:
                first_untimed = last_offset
            position = end
    finally:
        view.release()
    if not fresh:
        out = bytes(out)
    return out, offset, max_timestamp, offset_of_max_timestamp, first_untimed, replacements


def _magic_1_from_record_batches(buf, max_message_bytes: int) -> tuple[bytearray, dict[int, bytearray]]:
    """Magic 2 record batches as the magic 1 message set Kafka's LogValidator converts them
    to for a log of this format: per batch, plain messages if it is uncompressed, else one
    wrapper with its codec and inner offsets 0..n-1, as ``build_message_set`` writes them.
    The checks and refusals are ``protocol.record_batch.magic_1_conversion``'s.

    Returns the set, a new bytearray that ``_assign_loop`` assigns in place (a set of one
    batch, what librdkafka and aiokafka send per partition, is the one the conversion wrote,
    not joined into another copy), and each wrapper's uncompressed inner set by the wrapper's
    position in it (see ``_assign_wrapper``)."""
    converted = []
    inner_sets = {}
    position = 0
    for codec, timestamp_type, messages, count, max_timestamp in magic_1_conversion(buf, max_message_bytes):
        if codec != Codec.NONE:
            inner_sets[position] = messages
            wrapper = bytearray()
            type_bit = _TIMESTAMP_TYPE_BIT if timestamp_type == LOG_APPEND_TIME else 0
            _append_message(
                wrapper, count - 1, 1, codec | type_bit, max_timestamp, None, compress(codec, messages, magic=1)
            )
            messages = wrapper
        converted.append(messages)
        position += len(messages)
    return converted[0] if len(converted) == 1 else bytearray().join(converted), inner_sets


def _short_tail(out: bytearray, position: int, min_size: int) -> RecordError:
    """The error for the last bytes of a set, from ``position``, too few for a message of its
    magic (a head with both lengths is the smallest message): what the checks of a whole
    head would have said."""
    if len(out) - position >= _MIN_ENTRY_SIZE:
        (size,) = _INT32.unpack_from(out, position + 8)
        if size < min_size:
            return _corrupt(f"message at byte {position} has impossible size {size}")
    return _corrupt(f"message set ends in a truncated message at byte {position}")


def _short_inner_tail(inner: bytes, position: int, wrapper_offset: int) -> RecordError:
    """``_short_tail`` for the inner set of the wrapper at ``wrapper_offset``."""
    if len(inner) - position < _MIN_ENTRY_SIZE:
        return _corrupt(f"compressed message at offset {wrapper_offset} has a truncated inner set")
    (size,) = _INT32.unpack_from(inner, position + 8)
    return _corrupt(f"compressed message at offset {wrapper_offset} has an inner message of bad size {size}")


def _too_large(entry_size: int, max_message_bytes: int) -> RecordError:
    return RecordError(
        ErrorCode.MESSAGE_TOO_LARGE,
        f"message of {entry_size} bytes (log overhead included) exceeds max.message.bytes "
        f"{max_message_bytes}",
    )


def _producer_log_append_time(position: int) -> RecordError:
    return RecordError(
        ErrorCode.INVALID_TIMESTAMP,
        f"message at byte {position} has the LogAppendTime type set; only brokers set it",
    )


def _invalid_timestamp(timestamp: int, now_ms: int) -> RecordError:
    return RecordError(
        ErrorCode.INVALID_TIMESTAMP,
        f"timestamp {timestamp} is out of the accepted range around {now_ms} "
        "(message.timestamp.difference.max.ms)",
    )


def _assign_wrapper(
    out,
    position: int,
    end: int,
    next_offset: int,
    now_ms: int,
    log_append_time: bool,
    earliest: int,
    latest: int,
    *,
    inner_sets: dict[int, bytearray] | None = None,
    inner_sets_out: list | None = None,
) -> tuple[int, int, bytes | None]:
    """Validate the wrapper at ``position`` of ``out`` (a writable buffer: the set being
    assigned; its outer CRC and lengths already checked) and assign its offsets.

    ``inner_sets`` holds, by wrapper position, the inner sets a magic 2 conversion has just
    compressed into the wrappers: those are taken as they are, CRCs not checked again, instead
    of decompressed. ``inner_sets_out`` gets the wrapper's inner set appended (see
    ``validate_and_assign``).

    Returns the next free offset, the entry's max timestamp, and either None (rewritten in
    place in ``out``) or the bytes of a recompressed replacement entry.
    """
    view = memoryview(out)
    wrapper = _parse_message(view, position, end, check_crc=False)
    magic = wrapper.magic
    if magic == 1 and wrapper.attributes & _TIMESTAMP_TYPE_BIT:
        raise _producer_log_append_time(position)
    converted = inner_sets.get(position) if inner_sets else None
    inner = _decompressed_value(wrapper, view) if converted is None else converted
    count, max_timestamp = _scan_inner(
        inner, magic, wrapper.offset, now_ms, None if log_append_time else (earliest, latest), converted is None
    )
    if inner_sets_out is not None:
        inner_sets_out.append(inner)
    last_offset = next_offset + count - 1
    if magic == 0:
        entry = _recompressed_magic_0_wrapper(inner, next_offset, Codec(wrapper.attributes & _CODEC_MASK))
        return last_offset + 1, NO_TIMESTAMP, entry
    wrapper_timestamp = now_ms if log_append_time else max_timestamp
    _INT64.pack_into(out, position, last_offset)
    if log_append_time or wrapper.timestamp != wrapper_timestamp:
        attributes = wrapper.attributes | (_TIMESTAMP_TYPE_BIT if log_append_time else 0)
        _ATTRIBUTES_TIMESTAMP.pack_into(out, position + _ATTRIBUTES_POSITION, attributes & 0xFF, wrapper_timestamp)
        crc = _crc32(memoryview(out)[position + _MAGIC_POSITION : end])
        _UINT32.pack_into(out, position + _CRC_POSITION, crc)
    return last_offset + 1, wrapper_timestamp, None


def _py_scan_inner(
    inner: bytes,
    magic: int,
    wrapper_offset: int,
    now_ms: int,
    accepted: tuple[int, int] | None,
    check_crc: bool = True,
) -> tuple[int, int]:
    """Check every message of a decompressed inner set without building objects.

    Checks what ``validate_and_assign`` checks of a plain message (whole, CRC unless
    ``check_crc`` is False, lengths, magic) plus: not compressed, magic 1 relative offsets
    0..n-1, and, when ``accepted`` is given, timestamps in that range. Returns the message
    count and the max timestamp.

    The per-message checks are written out here and in ``_py_assign_loop`` rather than
    shared through a helper: one more call per message costs about 9% of append throughput.
    ``_records.scan_inner`` is the same loop in C: keep them in step.
    """
    length = len(inner)
    view = memoryview(inner)
    head = _HEAD_AND_LENGTHS[magic]
    unpack_head, head_size = head.unpack_from, head.size
    unpack_int32 = _INT32.unpack_from
    crc32 = _crc32
    min_size = _MIN_MESSAGE_SIZE[magic]
    value_position = _KEY_POSITION[magic] + 4
    earliest, latest = accepted if accepted is not None else (None, None)
    count = 0
    max_timestamp = NO_TIMESTAMP
    position = 0
    while position < length:
        if length - position < head_size:
            raise _short_inner_tail(inner, position, wrapper_offset)
        inner_offset, size, crc, inner_magic, attributes, timestamp, key_length, value_length = unpack_head(
            inner, position
        )
        end = position + LOG_OVERHEAD + size
        if size < min_size or end > length:
            raise _corrupt(
                f"compressed message at offset {wrapper_offset} has an inner message of bad size {size}"
            )
        if inner_magic != magic:
            raise _corrupt(
                f"compressed message at offset {wrapper_offset} (magic {magic}) holds a magic "
                f"{inner_magic} message"
            )
        if attributes & _CODEC_MASK:
            raise _corrupt(f"compressed message at offset {wrapper_offset} nests compression")
        if check_crc and crc32(view[position + _MAGIC_POSITION : end]) != crc:
            raise _corrupt(
                f"inner message {count} of compressed message at offset {wrapper_offset} "
                "fails its CRC check"
            )
        if key_length != -1:
            value_length_position = position + value_position + key_length
            if key_length < -1 or value_length_position + 4 > end:
                raise _corrupt(f"inner message of offset {wrapper_offset} has a bad key length")
            (value_length,) = unpack_int32(inner, value_length_position)
        else:
            value_length_position = position + value_position
        if value_length_position + 4 + (value_length if value_length > 0 else 0) != end or value_length < -1:
            raise _corrupt(f"inner message of offset {wrapper_offset} has a bad value length")
        if magic == 1:
            if inner_offset != count:
                raise _corrupt(
                    f"inner message {count} of compressed message at offset {wrapper_offset} has "
                    f"relative offset {inner_offset}, not {count}"
                )
            if earliest is not None and (timestamp < earliest or timestamp > latest) and timestamp != NO_TIMESTAMP:
                raise _invalid_timestamp(timestamp, now_ms)
            if timestamp > max_timestamp:
                max_timestamp = timestamp
        count += 1
        position = end
    if not count:
        raise _corrupt(f"compressed message at offset {wrapper_offset} holds no messages")
    return count, max_timestamp


def _recompressed_magic_0_wrapper(inner: bytes, first_offset: int, codec: Codec) -> bytes:
    """A new magic 0 wrapper entry holding the (validated) ``inner`` messages, bytes unchanged
    but for their offsets, which become absolute and consecutive from ``first_offset``."""
    rewritten = bytearray(inner)
    position = 0
    inner_offset = first_offset
    while position < len(rewritten):
        _INT64.pack_into(rewritten, position, inner_offset)
        inner_offset += 1
        position += LOG_OVERHEAD + _INT32.unpack_from(rewritten, position + 8)[0]
    out = bytearray()
    _append_message(out, inner_offset - 1, 0, codec, NO_TIMESTAMP, None,
                    compress(codec, bytes(rewritten), magic=0))
    return bytes(out)


def _splice(out: bytes, replacements: dict[int, bytes]) -> bytes:
    """``out`` with the entries at the given positions replaced."""
    spliced = bytearray()
    position = 0
    for start in sorted(replacements):
        spliced += out[position:start]
        position = start + LOG_OVERHEAD + _INT32.unpack_from(out, start + 8)[0]
        spliced += replacements[start]
    spliced += out[position:]
    return bytes(spliced)


def validate_given_offsets(buf, min_offset: int, config: ValidationConfig) -> ValidatedSet:
    """Check a message set fetched from a leader and keep its offsets (follower path).

    As Kafka's follower append, the set is checked shallowly and never decompressed: each
    whole entry's size (MESSAGE_TOO_LARGE over ``max_message_bytes``), magic (0, 1 or 2; 0 and
    1 not mixed, while magic 2 batches may follow or precede either: a topic whose format
    changed), codec, CRC (a wrapper's own, which covers the compressed bytes, not the inner
    messages' CRCs; a batch's CRC-32C) and offsets, which must be strictly increasing across the
    set and ``>= min_offset`` (a batch's base offset after the previous entry's last offset, its
    last offset not before its base); CORRUPT_MESSAGE otherwise. The leader checked the rest
    (records, lengths, timestamps) when it appended the set, and readers check inner CRCs on
    their way out. A batch keeps the partition leader epoch the leader stamped into it.

    A wrapper's offset field is its last inner offset, and what its first one is only
    decompression can tell, so the result counts shallow entries: ``first_offset`` is the
    first entry's offset field (a wrapper's last inner offset, as Kafka 0.10.2's
    ``LogAppendInfo.firstOffset`` for a follower; a batch's base offset) and ``record_count``
    the number of shallow entries. ``last_offset`` is exact. A truncated tail is dropped (fetch
    responses end in one); a set with no whole entry gives ``record_count`` 0, an empty
    ``buffer`` and offsets -1. ``producer_batches`` are the batches with a producer id,
    ``leader_epoch_starts`` where the leader's epochs start in the set's batches.
    """
    end, first_offset, last_offset, count, max_timestamp, offset_of_max, first_untimed, batches = _shallow_loop(
        buf, min_offset, config.max_message_bytes
    )
    view = memoryview(buf)
    buffer = view[:end].tobytes()
    view.release()
    return ValidatedSet(
        buffer=buffer,
        first_offset=first_offset,
        last_offset=last_offset,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max,
        log_append_time=NO_TIMESTAMP,
        record_count=count,
        first_timestamp=_first_timestamp(buffer) if count else NO_TIMESTAMP,
        first_untimed_offset=first_untimed,
        producer_batches=record_batch.producer_batches(buffer, end) if batches else (),
        leader_epoch_starts=record_batch.leader_epoch_starts(buffer, end) if batches else (),
    )


def _py_shallow_loop(buf, min_offset: int, max_message_bytes: int) -> tuple[int, int, int, int, int, int, int, int]:
    """``validate_given_offsets``' loop: returns the end of the last whole entry, first and
    last offset, entry count, max timestamp and its offset, the first untimed offset and the
    number of magic 2 batches. ``_records.shallow_loop`` is the same loop in C: keep them in
    step. The running max bookkeeping is written out as in ``_py_assign_loop`` rather than
    called (a call per message is what these loops cannot afford; the C loops share
    running_max)."""
    view = memoryview(buf)
    length = len(view)
    max_timestamp = NO_TIMESTAMP
    offset_of_max = -1
    first_untimed = -1
    first_offset = -1
    previous = min_offset - 1
    count = 0
    batches = 0
    set_magic = -1
    position = 0
    try:
        while length - position >= LOG_OVERHEAD:
            (size,) = _INT32.unpack_from(view, position + 8)
            if size < _MIN_MESSAGE_SIZE[0]:
                raise _corrupt(f"message at byte {position} has impossible size {size}")
            end = position + LOG_OVERHEAD + size
            if end > length:
                break
            if end - position > max_message_bytes:
                raise RecordError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"message of {end - position} bytes exceeds max.message.bytes {max_message_bytes}",
                )
            offset, _, crc, magic, attributes, timestamp = _HEAD.unpack_from(view, position)
            if magic == RECORD_BATCH_MAGIC:
                if size < _MIN_BATCH_SIZE:
                    raise _corrupt(f"record batch at offset {offset} has impossible size {size}")
                (crc, batch_attributes, last_offset_delta, _, timestamp) = _BATCH_CRC_AND_FIELDS.unpack_from(
                    view, position + _MAGIC_POSITION + 1)
                if _BATCH_CODECS[batch_attributes & _CODEC_MASK] is None:
                    raise _corrupt(f"record batch at offset {offset} has unknown codec {batch_attributes & _CODEC_MASK}")
                if entries.crc32c(view[position + _BATCH_CRC_START : end]) != crc:
                    raise _corrupt(f"record batch at offset {offset} fails its CRC-32C check")
                if offset <= previous or last_offset_delta < 0:
                    raise _corrupt(f"record batch at offset {offset} (last offset delta {last_offset_delta}) does "
                                   f"not follow {previous} (minimum {min_offset})")
                if first_offset < 0:
                    first_offset = offset
                offset += last_offset_delta
                batches += 1
            else:
                if magic != 0 and magic != 1:
                    raise _corrupt(f"message at offset {offset} has unknown magic {magic}")
                if size < _MIN_MESSAGE_SIZE[magic]:
                    raise _corrupt(f"message at offset {offset} has impossible size {size}")
                if _CODECS[attributes & _CODEC_MASK] is None:
                    raise _corrupt(f"message at offset {offset} has unknown codec {attributes & _CODEC_MASK}")
                if _crc32(view[position + _MAGIC_POSITION : end]) != crc:
                    raise _corrupt(f"message at offset {offset} fails its CRC check")
                if set_magic == -1:
                    set_magic = magic
                elif magic != set_magic:
                    raise _corrupt(f"message set mixes magic {set_magic} and magic {magic}")
                if offset <= previous:
                    raise _corrupt(f"offset {offset} does not follow {previous} (minimum {min_offset})")
                if first_offset < 0:
                    first_offset = offset
                if magic == 0:
                    timestamp = NO_TIMESTAMP
            previous = offset
            count += 1
            if timestamp > max_timestamp:
                max_timestamp = timestamp
                offset_of_max = offset
            elif timestamp < 0 and first_untimed < 0:
                first_untimed = offset
            position = end
    finally:
        view.release()
    return (position, first_offset, previous if count else -1, count, max_timestamp, offset_of_max, first_untimed,
            batches)


# ---------------------------------------------------------------------------------------
# Down-conversion


def down_convert(buf, magic: int = 0, first_offset: int = 0) -> bytes:
    """The whole entries of ``buf`` as an old consumer reads them: ``down_converted`` at
    once, for a buffer already in memory."""
    return b"".join(down_converted((buf,), magic, first_offset))


def down_converted(chunks: Iterable, magic: int, first_offset: int) -> Iterator[bytes | bytearray]:
    """Stored entries, read as consecutive ``chunks`` of bytes cut anywhere, converted to
    ``magic`` (0 for Fetch v0/v1, 1 for v2/v3) one entry at a time: Kafka 2.8's
    ``RecordsUtil.downConvert``, lazily. Yields each entry's conversion that is not empty.

    Entries of ``magic`` or lower are copied as they are. A magic 1
    message loses its timestamp and timestamp-type bit to magic 0; a magic 1 wrapper becomes a
    magic 0 wrapper with the same codec and offset, its inner messages given absolute offsets
    (lz4 with the legacy header checksum). A magic 2 batch (CRC-32C checked) becomes messages
    of ``magic``, headers dropped as Kafka drops them: uncompressed, one message per record,
    leaving out records before ``first_offset`` (the fetch offset; librdkafka relies on it);
    compressed, one wrapper of every record recompressed with the batch's codec. Timestamps
    and their type carry over to magic 1 (LogAppendTime: the batch's on every message, type
    bit on wrapper and inner messages alike, as Kafka's MemoryRecordsBuilder writes them).
    Control batches and empty ones convert to nothing; transactional batches are kept, as a
    read_uncommitted consumer sees them (consumers of Fetch v0-v3 have no isolation level).
    A zstd batch raises UNSUPPORTED_COMPRESSION_TYPE: magic 0/1 cannot carry it.

    A truncated last entry is dropped; but when not even the first entry is whole (a message
    larger than the fetch limit, which Fetch before v3 cuts short), the bytes are yielded as
    they are, as Kafka 0.10.2 does: an old consumer then sees a partial message and reports it
    too large, where an empty answer would leave it fetching the same offset forever.

    Memory: one chunk and one entry (plus its conversion) at a time; an entry longer than a
    chunk is gathered from as many chunks as it spans.
    """
    held: list = []  # chunks not yet converted: the tail of an entry and what follows it
    held_length = 0
    needed = LOG_OVERHEAD  # bytes the first held entry needs before it can be converted
    any_whole = False
    for chunk in chunks:
        held.append(chunk)
        held_length += len(chunk)
        if held_length < needed:
            continue
        buf = held[0] if len(held) == 1 else b"".join(held)
        held = []
        view = memoryview(buf)
        position = 0
        while (end := _whole_entry_end(view, position, held_length)) >= 0:
            any_whole = True
            converted = _down_converted_entry(view, position, end, magic, first_offset)
            if converted:
                yield converted
            position = end
        tail = view[position:].tobytes() if position else buf
        view.release()
        held = [tail] if tail else []
        held_length = len(tail)
        needed = LOG_OVERHEAD if held_length < LOG_OVERHEAD else LOG_OVERHEAD + _INT32.unpack_from(tail, 8)[0]
    if held and not any_whole:
        yield b"".join(held)


def _down_converted_entry(view: memoryview, position: int, end: int, magic: int,
                          first_offset: int) -> bytes | bytearray:
    """The whole entry at ``view[position:end]`` as ``down_converted`` converts it."""
    entry_magic = view[position + _MAGIC_POSITION]
    if entry_magic <= magic:
        # As Kafka copies a batch the consumer can read: its CRC is the consumer's to check.
        return view[position:end].tobytes()
    if entry_magic == RECORD_BATCH_MAGIC:
        return _down_converted_batch(view[position:end], magic, first_offset)
    message = _parse_message(view, position, end)
    out = bytearray()
    if not message.attributes & _CODEC_MASK:
        records = [_untimed(view, message, message.offset)]
    else:
        inner, messages = _inner_messages(message, view)
        base = message.offset - messages[-1].offset
        records = [_untimed(inner, item, base + item.offset) for item in messages]
    _append_legacy_set(out, records, 0, Codec(message.attributes & _CODEC_MASK), 0, 0)
    return out


def _untimed(view: memoryview, message: _Message, offset: int) -> tuple:
    """``message`` as a magic 0 record: ``(offset, key, value, no timestamp)``."""
    key = None if message.key_length < 0 else view[message.key_position : message.key_position + message.key_length]
    value = (
        None
        if message.value_length < 0
        else view[message.value_position : message.value_position + message.value_length]
    )
    return offset, key, value, NO_TIMESTAMP


def _down_converted_batch(entry: memoryview, magic: int, first_offset: int) -> bytearray:
    """One magic 2 batch (``entry``, whole) as magic 0/1 entries."""
    out = bytearray()
    (batch,) = record_batch.iter_batches(entry, allow_empty=True)
    if batch.is_control or not batch.record_count:  # a marker, or a batch the cleaner emptied
        return out
    if batch.codec == Codec.ZSTD:
        raise RecordError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"zstd batch at offset {batch.base_offset} cannot be down-converted to magic {magic}",
        )
    codec = Codec(batch.codec)
    records = [
        (record.offset, record.key, record.value, record.timestamp)
        for record in record_batch.batch_records(entry, batch)
        if codec != Codec.NONE or record.offset >= first_offset
    ]
    type_bit = _TIMESTAMP_TYPE_BIT if magic == 1 and batch.timestamp_type == LOG_APPEND_TIME else 0
    _append_legacy_set(out, records, magic, codec, type_bit, type_bit)
    return out


# ---------------------------------------------------------------------------------------
# Compaction


def retained_entry(entry, keep: Callable[[Record], bool],
                   last_offsets_of_producers: Mapping[int, int] = _NO_PRODUCERS, *, discard: bool = False,
                   marker_epochs_of_producers: Mapping[int, int] = _NO_PRODUCERS) -> bytes | memoryview | None:
    """One whole shallow ``entry`` with only the records ``keep`` accepts (the log cleaner's
    per-entry work): ``entry`` itself when every record is kept, None when none is (a magic 2
    batch may stay empty: see ``_retained_batch`` and ``last_offsets_of_producers``). A
    compressed magic 0/1 wrapper that loses some is rebuilt around the survivors with its
    codec, magic and timestamp type, as Kafka 0.10.2's ``LogCleaner.compressMessages`` does:
    inner messages keep their bytes (an inner CRC does not cover the offset field), a
    magic 1 wrapper's relative inner offsets count from the first survivor and its own
    offset is the last survivor's, so every record keeps its absolute offset; the wrapper's
    timestamp is its largest surviving one, or stays as it was under LogAppendTime.

    ``discard`` drops a magic 2 batch whole (an aborted transaction's, or a transaction
    marker no longer needed: the log cleaner's transactions say), as Kafka's
    BatchRetention.DELETE, but for the last batch of a producer, which stays emptied: its last
    data batch (``last_offsets_of_producers``), or a marker of the epoch
    ``marker_epochs_of_producers`` holds for a producer whose last entry is one.
    """
    view = memoryview(entry)
    if view[_MAGIC_POSITION] == RECORD_BATCH_MAGIC:
        return _retained_batch(view, _none if discard else keep, last_offsets_of_producers, discard,
                               marker_epochs_of_producers)
    message = _parse_message(view, 0, len(view))
    if not message.attributes & _CODEC_MASK:
        kept = keep(_record(view, message, message.offset, message.timestamp, _timestamp_type(message)))
        return entry if kept else None
    records = list(iter_records(view))  # one per inner message, in order
    kept = [keep(record) for record in records]
    if all(kept):
        return entry
    if not any(kept):
        return None
    inner, messages = _inner_messages(message, view)
    survivors = [item for item, wanted in zip(messages, kept) if wanted]
    magic = message.magic
    rebuilt = bytearray()
    max_timestamp = NO_TIMESTAMP
    for item in survivors:
        start = len(rebuilt)
        rebuilt += inner[item.position:item.end]
        if magic == 1:
            _INT64.pack_into(rebuilt, start, item.offset - survivors[0].offset)
            max_timestamp = max(max_timestamp, item.timestamp)
    if magic == 1 and message.attributes & _TIMESTAMP_TYPE_BIT:
        max_timestamp = message.timestamp
    codec = Codec(message.attributes & _CODEC_MASK)
    out = bytearray()
    last_offset = message.offset - messages[-1].offset + survivors[-1].offset if magic == 1 else survivors[-1].offset
    _append_message(out, last_offset, magic, message.attributes, max_timestamp, None,
                    compress(codec, bytes(rebuilt), magic=magic))
    return bytes(out)


def _none(record: Record) -> bool:
    return False


def _retained_batch(view: memoryview, keep: Callable[[Record], bool], last_offsets_of_producers: Mapping[int, int],
                    discard: bool, marker_epochs_of_producers: Mapping[int, int]) -> memoryview | bytes | None:
    """``retained_entry`` for a magic 2 batch, as Kafka 2.8's ``MemoryRecords.filterTo`` with
    the cleaner's ``checkBatchRetention``: the batch as it is when every record stays, else a
    batch of the survivors with the original's base offset, last offset delta, codec,
    timestamp type, leader epoch and producer fields, each survivor at its own offset delta.
    With no survivor it goes, unless it holds its producer's last data offset
    (``last_offsets_of_producers``: producer id -> that offset, for the producers the log's
    state still holds): then it stays as ``record_batch.empty_batch`` (BatchRetention.RETAIN_EMPTY),
    so the producer's last sequence outlives its records. A control batch (a transaction
    marker) is kept unless discarded; then one of the epoch ``marker_epochs_of_producers``
    holds for its producer, whose last entry is a marker, stays emptied."""
    [batch] = record_batch.iter_batches(view, allow_empty=True)
    if batch.is_control:
        if not discard:
            return view
        if marker_epochs_of_producers.get(batch.producer_id) == batch.producer_epoch:
            return view if not batch.record_count else bytes(record_batch.empty_batch(batch))
        return None
    records = list(_batch_records(view, 0))
    kept = [record for record in records if keep(record)]
    if not kept:
        if last_offsets_of_producers.get(batch.producer_id) == batch.base_offset + batch.last_offset_delta:
            return view if not records else bytes(record_batch.empty_batch(batch))
        return None
    if len(kept) == len(records):
        return view
    return bytes(record_batch.build_record_batch(
        [(r.key, r.value, r.timestamp, r.headers) for r in kept], codec=batch.codec, base_offset=batch.base_offset,
        timestamp_type=batch.timestamp_type, partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
        transactional=batch.is_transactional, offset_deltas=[r.offset - batch.base_offset for r in kept],
        last_offset_delta=batch.last_offset_delta))


# ---------------------------------------------------------------------------------------
# The native accelerator

try:
    from minikafka.protocol import _records as _native
except ImportError:  # built without a compiler: the pure-Python loops serve
    _native = None


def use_native(enabled: bool) -> bool:
    """Run the per-message loops in the C accelerator (``minikafka.protocol._records``) when
    ``enabled`` and built, else in Python; returns whether C is now in use. This covers
    ``protocol.record_batch``'s magic 2 conversion and CRC-32C, and ``entries.index_entries``. Both give the
    same results and the same errors. At import C is chosen unless the environment sets
    ``MINIKAFKA_PURE_PYTHON=1``."""
    global _assign_loop, _scan_inner, _shallow_loop, _magic_2_records
    if enabled and _native is not None:
        _assign_loop, _scan_inner, _shallow_loop = _native.assign_loop, _native.scan_inner, _native.shallow_loop
        _magic_2_records = _native.magic_2_records
        record_batch._use_native(_native)
        entries._use_native(_native)
        return True
    _assign_loop, _scan_inner, _shallow_loop = _py_assign_loop, _py_scan_inner, _py_shallow_loop
    _magic_2_records = _py_magic_2_records
    record_batch._use_native(None)
    entries._use_native(None)
    return False


def native_in_use() -> bool:
    return _assign_loop is not _py_assign_loop


def use_native_as_the_environment_says() -> bool:
    """C unless ``MINIKAFKA_PURE_PYTHON=1``: at import, and in a broker forked after its
    environment was set (minikafka.testing.warm)."""
    return use_native(os.environ.get("MINIKAFKA_PURE_PYTHON", "") in ("", "0"))


use_native_as_the_environment_says()
