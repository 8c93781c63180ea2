"""Shallow entries of a log or message set: the one definition of their byte layouts.

A log segment, a produce request's records and a fetch response's records are all
*entries* back to back, with no count and no framing around them. Every entry starts with
the same 12 bytes, Kafka's *log overhead*, and has its magic byte at position 16, so a
reader can tell the layout of an entry from its first 17 bytes::

    entry     offset      int64    magic 0/1: the message's offset (a compressed wrapper's:
                                   its last inner message's); magic 2: the batch's first
              size        int32    byte length of what follows
    magic 0/1 crc         uint32   CRC-32 (zlib's, IEEE) of every byte from magic to the end
              magic       int8     0 or 1
              attributes  int8     bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4),
                                   bit 3 timestamp type (magic 1: 1 = LogAppendTime)
              timestamp   int64    magic 1 only, milliseconds since the epoch, -1 if unknown
                                   (a magic 1 wrapper's: its largest inner timestamp)
              key         int32 length (-1 = null) + bytes
              value       int32 length (-1 = null) + bytes
    magic 2   partitionLeaderEpoch int32
              magic       int8     2
              crc         uint32   CRC-32C (Castagnoli) from attributes to the end
              attributes  int16    bits 0-2 codec (also 4 zstd), bit 3 timestamp type,
                                   bit 4 transactional, bit 5 control
              lastOffsetDelta      int32
              baseTimestamp        int64
              maxTimestamp         int64
              producerId  int64, producerEpoch int16, baseSequence int32, recordCount int32
              records     (see protocol.record_batch)

An entry's size as Kafka limits it (``max.message.bytes``) includes the log overhead. A
compressed magic 0/1 *wrapper* has a null key and, as its value, a whole inner message set
compressed with its codec; inner messages are never compressed themselves. In a magic 1
wrapper the inner offsets are relative (0..n-1) and the wrapper's offset is the absolute
offset of the last one (KIP-31); in a magic 0 wrapper they are absolute. What is inside a
wrapper, and everything about the records of a magic 2 batch, is ``protocol.records``' and
``protocol.record_batch``'s business; this module reads and checks entries as wholes.

The log holds all three magics, in any mix (a topic's ``message.format.version`` decides
what is written, and it may change with data in the log): ``iter_entries`` dispatches on the
magic byte; for a magic 2 batch an Entry's offset is baseOffset + lastOffsetDelta (its last
offset, as a wrapper's), its timestamp maxTimestamp, its attributes the int16. ``crc_ok``
checks CRC-32C from the attributes on, and ``index_entries`` reads the same two fields.
"""

from __future__ import annotations

import functools
import struct
import zlib
from typing import Generator, NamedTuple

from minikafka.protocol.compression import MESSAGE_SET_CODECS, Codec
from minikafka.protocol.errors import ErrorCode, RecordError

__all__ = [
    "LOG_OVERHEAD",
    "Entry",
    "iter_entries",
    "crc_ok",
    "index_entries",
    "crc32c",
]

LOG_OVERHEAD = 12  # offset int64 + size int32
CRC_POSITION = 12
MAGIC_POSITION = 16  # in every magic
ATTRIBUTES_POSITION = 17
TIMESTAMP_POSITION = 18
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
# Magic 2 attributes only: a transaction's batch, and a control batch (a transaction marker).
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
NO_TIMESTAMP = -1

# Magic 0/1: smallest message (crc .. value length, null key and value) per magic.
MIN_MESSAGE_SIZE = (14, 22)
# Magic 0/1: position of the key length field, relative to the entry start, per magic.
KEY_POSITION = (LOG_OVERHEAD + 6, LOG_OVERHEAD + 14)
# Magic 0/1: offset, size, crc, magic, attributes, and (magic 1) the timestamp. An entry of
# either magic is at least 26 bytes long, so unpacking all six fields never reads past a
# whole entry; for magic 0 the sixth field is key/value length bytes and is ignored.
HEAD = struct.Struct(">qiIbbq")
# Magic 0/1: a message's head and both length fields (the value length is right only for a
# null key) in one unpack, per magic: the validation loops read every message this way (one
# call per message instead of two). Magic 0 has no timestamp: an empty
# string ("0s") holds its place so both give the same eight fields.
HEAD_AND_LENGTHS = (struct.Struct(">qiIbb0sii"), struct.Struct(">qiIbbqii"))
# Magic 0/1: a message's head and its key length, per magic (a writer packs this, then the
# key; the export reader reads it, then the value length after the key).
HEAD_AND_KEY_LENGTH = (struct.Struct(">qiIbb0si"), struct.Struct(">qiIbbqi"))
MIN_ENTRY_SIZE = HEAD.size  # the smallest whole entry: a magic 0 message, null key and value
# Magic 2: the batch header, everything before the records.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_MAGIC = 2
BATCH_CRC_START = 21  # attributes: the CRC-32C covers the batch from here to its end
# Magic 2: the smallest batchLength (a header and no records) and the fields an Entry needs:
# attributes, lastOffsetDelta, baseTimestamp and maxTimestamp, at byte 21.
MIN_BATCH_SIZE = BATCH_HEADER.size - LOG_OVERHEAD
BATCH_ENTRY_FIELDS = struct.Struct(">hiqq")
BATCH_ENTRY_HEAD = BATCH_CRC_START + BATCH_ENTRY_FIELDS.size

CODECS: tuple[Codec | None, ...] = MESSAGE_SET_CODECS + (None,) * 4
# Magic 2 adds zstd (KIP-110).
BATCH_CODECS: tuple[Codec | None, ...] = MESSAGE_SET_CODECS + (Codec.ZSTD,) + (None,) * 3

_SIZE = struct.Struct(">i")
_CRC = struct.Struct(">I")
_crc32 = zlib.crc32
_unpack_batch_fields = BATCH_ENTRY_FIELDS.unpack_from


def _corrupt(message: str) -> RecordError:
    return RecordError(ErrorCode.CORRUPT_MESSAGE, message)


class Entry(NamedTuple):
    """One shallow entry: a plain message, or a compressed wrapper.

    ``offset`` is its last offset (a wrapper's offset field), which is what offset indexes
    point at. ``position`` is where its 8-byte offset field starts in the stream it was read
    from and ``size`` its total length including the 12-byte log overhead. ``timestamp`` is
    its largest timestamp, -1 for magic 0. Payload bytes are not copied: slice the buffer
    with ``position`` and ``size``.
    """

    offset: int
    position: int
    size: int
    magic: int
    attributes: int
    timestamp: int
    codec: Codec


def iter_entries(buf, end: int | None = None, *, base: int = 0) -> Generator[Entry, None, int]:
    """Shallow entries of ``buf`` (plain messages and wrappers), without copying payloads.

    ``buf`` holds the bytes from position ``base`` of a stream that ends at ``end`` (by
    default where ``buf`` does); positions are the stream's. An entry is read when it ends
    by ``end`` and its head is in ``buf`` (a file read in windows: the rest of the entry
    need not be). Stops silently at a truncated last entry (legal at the end of a fetch);
    raises CORRUPT_MESSAGE for an impossible size, magic or codec. CRCs are not checked
    here: see ``crc_ok``. Returns (``yield from`` gives it) the position it stopped at.
    """
    length = len(buf)
    stop = length if end is None else end - base
    unpack_head = HEAD.unpack_from
    # Entry's own __new__ is one more Python call per entry; every fetch's offset lookup
    # pays it on its scan from the index entry.
    make_entry = tuple.__new__
    position = 0
    while True:
        if length - position >= MIN_ENTRY_SIZE:
            offset, size, _crc, magic, attributes, timestamp = unpack_head(buf, position)
        elif length - position >= LOG_OVERHEAD:
            (size,) = _SIZE.unpack_from(buf, position + 8)
            magic = -1  # the head is not all in buf: it is read if the entry may end by `stop`
        else:
            return base + position
        if size < MIN_MESSAGE_SIZE[0]:
            raise _corrupt(f"message at byte {base + position} has impossible size {size}")
        entry_end = position + LOG_OVERHEAD + size
        if entry_end > stop or magic == -1:
            return base + position
        if magic == 0:
            timestamp = NO_TIMESTAMP
            codec = CODECS[attributes & CODEC_MASK]
        elif magic == 1:
            if size < MIN_MESSAGE_SIZE[1]:
                raise _corrupt(f"message at offset {offset} has impossible size {size}")
            codec = CODECS[attributes & CODEC_MASK]
        elif magic == BATCH_MAGIC:
            if size < MIN_BATCH_SIZE:
                raise _corrupt(f"record batch at offset {offset} has impossible size {size}")
            if length - position < BATCH_ENTRY_HEAD:
                return base + position  # its head is not all in buf
            attributes, last_offset_delta, _, timestamp = _unpack_batch_fields(buf, position + BATCH_CRC_START)
            offset += last_offset_delta
            codec = BATCH_CODECS[attributes & CODEC_MASK]
        else:
            raise _corrupt(f"message at offset {offset} has unknown magic {magic}")
        if codec is None:
            raise _corrupt(f"message at offset {offset} has unknown codec {attributes & CODEC_MASK}")
        yield make_entry(Entry, (offset, base + position, LOG_OVERHEAD + size, magic, attributes, timestamp, codec))
        position = entry_end


def crc_ok(buf, entry: Entry, base: int = 0) -> bool:
    """Whether ``entry``'s checksum matches its bytes in ``buf`` (which starts at position
    ``base`` of the stream ``entry`` was read from)."""
    start = entry.position - base
    if entry.magic == BATCH_MAGIC:
        (stored,) = _CRC.unpack_from(buf, start + MAGIC_POSITION + 1)
        return _crc32c(memoryview(buf)[start + BATCH_CRC_START : start + entry.size]) == stored
    (stored,) = _CRC.unpack_from(buf, start + CRC_POSITION)
    return _crc32(memoryview(buf)[start + MAGIC_POSITION : start + entry.size]) == stored


def _py_index_entries(
    buf, base: int, anchor: int, interval: int, max_timestamp: int, offset_of_max: int,
    untimed_times: list[tuple[int, int]],
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int, int, int]:
    """The sparse index entries for ``buf``, whole entries already checked, appended at
    position ``base`` of a segment: Kafka's ``LogSegment.append`` loop (since 3.7 it walks
    the batches of an append; an entry here is a message or a wrapper).

    An entry gets an offset-index entry ``(its last offset, its position)`` when it starts
    more than ``interval`` bytes past ``anchor``, the position of the previous one, and a
    time-index entry ``(largest timestamp so far, the offset where it first appeared)``,
    counting from the segment's ``max_timestamp`` / ``offset_of_max``. An entry without a
    timestamp (magic 0, or -1) counts at the time of the first ``(timestamp, offset)`` of
    ``untimed_times`` (sorted by offset, not empty) whose offset is at or after its own, or
    of the last one. Returns both entry lists, the new anchor and the new largest timestamp
    and its offset. ``_records.index_entries`` is the same loop in C: keep them in step.
    """
    unpack_head = HEAD.unpack_from
    offset_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    length = len(buf)
    bound, last_bound = 0, len(untimed_times) - 1
    position = 0
    while position < length:
        offset, size, _crc, magic, _attributes, timestamp = unpack_head(buf, position)
        if magic == BATCH_MAGIC:
            _, last_offset_delta, _, timestamp = _unpack_batch_fields(buf, position + BATCH_CRC_START)
            offset += last_offset_delta
        elif magic == 0:
            timestamp = NO_TIMESTAMP
        if timestamp < 0:
            while bound < last_bound and untimed_times[bound][1] < offset:
                bound += 1
            timestamp = untimed_times[bound][0]
        if timestamp > max_timestamp:
            max_timestamp, offset_of_max = timestamp, offset
        if base + position - anchor > interval:
            anchor = base + position
            offset_entries.append((offset, anchor))
            time_entries.append((max_timestamp, offset_of_max))
        position += LOG_OVERHEAD + size
    return offset_entries, time_entries, anchor, max_timestamp, offset_of_max


index_entries = _py_index_entries


def _py_crc32c(data) -> int:
    return _crc32c_function()(data)


@functools.cache
def _crc32c_function():
    """crcmod builds this on its C extension when present (it is, in this project's
    environment), which is what makes CRC-32C of a megabyte cost about as much as zlib's
    CRC-32. Built on first use: start-up is shorter, and with the C accelerator the pure-Python
    path never needs it."""
    import crcmod.predefined

    return crcmod.predefined.mkCrcFun("crc-32c")


_crc32c = _py_crc32c


def crc32c(data) -> int:
    """CRC-32C (Castagnoli), the checksum of magic 2 batches, with the loop in use; for the
    other formats that carry one too (producer state snapshots)."""
    return _crc32c(data)


def _use_native(native) -> None:
    """Called by ``records.use_native``: the C loops when ``native`` is the accelerator module."""
    global index_entries, _crc32c
    index_entries = native.index_entries if native is not None else _py_index_entries
    _crc32c = native.crc32c if native is not None else _py_crc32c
