"""Columnar reader of Kafka segment files: one ``.log`` file in, Arrow record batches out.

A segment file is a plain sequence of entries exactly as they travel on the wire, laid out as
``protocol.entries`` describes: magic 0 / magic 1 messages and magic 2 record batches, mixed
when a topic's ``message.format.version`` changed. The absolute offset of an inner message
of a magic 1 wrapper is ``wrapper offset - last relative offset + relative offset``; under
LogAppendTime they all take the wrapper's timestamp. Magic 0 messages carry no timestamp
(Spark's Kafka source reports those as timestamp -1 ms and timestampType -1, Kafka's
``NO_TIMESTAMP_TYPE``; so do we). Records of magic 2 batches are read with
``protocol.record_batch`` (CRC-32C checked), their keys and values copied to a side buffer as
a wrapper's are; control batches (transaction markers) hold no records a consumer sees and
are skipped, as are batches that compaction emptied. With ``include_headers`` the batches
have a ``headers`` column, ``array<struct<key: string, value: binary>>`` as Spark's Kafka
source with ``includeHeaders``: null for a record without headers (every magic 0/1 message).

Speed: the only per-message Python work is one ``struct`` unpack of the fixed-size header
(plus the value length), a CRC in C, and appending a few ints to lists. Keys and values are
never sliced into Python ``bytes``: per record the four positions ``key start, key end,
value start, value end`` go into one monotonic list, which becomes the offsets buffer of an
Arrow ``BinaryArray`` laid over the memory-mapped file (element 4i is record i's key, 4i+2
its value, the others the headers in between), and an Arrow ``take`` of those elements copies
them into compact columns in C. Decompressed inner sets are gathered in one side buffer per
batch and handled the same way; a batch holds records of one kind only.

CRCs are checked (``zlib.crc32`` runs in C): the export is the durable copy of the log, and a
bit flip on disk must stop it with a clear error rather than be exported.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from minikafka.protocol import record_batch
from minikafka.protocol.compression import Codec, decompress
from minikafka.protocol.entries import (
    CODEC_MASK as _CODEC_MASK,
    HEAD,
    HEAD_AND_KEY_LENGTH,
    LOG_OVERHEAD as _LOG_OVERHEAD,
    MAGIC_POSITION,
    MIN_MESSAGE_SIZE,
    TIMESTAMP_TYPE_BIT as _TIMESTAMP_TYPE_BIT,
)
from minikafka.protocol.errors import RecordError

__all__ = [
    "ARROW_SCHEMA",
    "ARROW_SCHEMA_WITH_HEADERS",
    "HEADERS_TYPE",
    "NO_TIMESTAMP",
    "NO_TIMESTAMP_TYPE",
    "SegmentCorrupt",
    "read_segment",
]

#: Spark's Kafka source schema (key, value, topic, partition, offset, timestamp,
#: timestampType), as the exact Arrow types a Python data source must yield for it.
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
])
#: The same with Spark's ``includeHeaders`` column.
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))

NO_TIMESTAMP = -1  # ms: Kafka's RecordBatch.NO_TIMESTAMP, every magic 0 message's timestamp column
NO_TIMESTAMP_TYPE = -1  # Kafka's TimestampType.NO_TIMESTAMP_TYPE: magic 0 messages
_CREATE_TIME = 0
_LOG_APPEND_TIME = 1

_INT32 = struct.Struct(">i")
_MIN_MESSAGE_SIZE = MIN_MESSAGE_SIZE[0]
_HEAD_V0, _HEAD_V1 = HEAD_AND_KEY_LENGTH  # offset .. key_length, per magic
_KEY_START_V0, _KEY_START_V1 = _HEAD_V0.size, _HEAD_V1.size
_INT64 = struct.Struct(">q")
_LAST_OFFSET_DELTA_POSITION = 23  # in a magic 2 batch header
_RECORD_COUNT_POSITION = 57

DEFAULT_BATCH_RECORDS = 65536
# Bounds a batch's keys + values (and its side buffer, whose positions are int32) whatever
# the record size.
_MAX_BATCH_BYTES = 64 << 20


class SegmentCorrupt(ValueError):
    """A segment file holds bytes that are not a valid message set."""


class _Columns:
    """Column lists of one batch, all of whose keys and values live in one data buffer.

    ``ranges`` holds four byte positions per record, ``[key start, key end, value start,
    value end]`` (a null is an empty range, marked in ``null_keys`` / ``null_values``), so the
    buffer read as a ``BinaryArray`` over ``ranges`` has record i's key at element 4i and its
    value at 4i+2. The buffer is the segment file (uncompressed messages) or ``side``, the
    decompressed inner sets; a batch never mixes the two.
    """

    __slots__ = ("offsets", "timestamps", "types", "ranges", "null_keys", "null_values", "side", "headers")

    def __init__(self, side: bytearray | None = None) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.ranges: list[int] = []
        self.null_keys: list[int] = []
        self.null_values: list[int] = []
        self.side = side
        self.headers: dict[int, list[tuple[str, bytes | None]]] = {}  # by row, only rows that have some


def _new_columns(side: bytearray | None = None):
    """A fresh ``_Columns`` and the bound methods the per-message loop appends with."""
    cols = _Columns(side)
    return cols, cols.offsets.append, cols.timestamps.append, cols.types.append, cols.ranges.extend


def read_segment(
    path: Path | str,
    topic: str,
    partition: int,
    *,
    start_offset: int = 0,
    end_offset: int | None = None,
    start_timestamp: int | None = None,
    batch_records: int = DEFAULT_BATCH_RECORDS,
    include_headers: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of one segment file with ``start_offset <= offset < end_offset``,
    as ``ARROW_SCHEMA`` batches (``ARROW_SCHEMA_WITH_HEADERS`` with ``include_headers``).

    With ``start_timestamp`` (ms), records before the first one whose timestamp is at least
    that are skipped (Kafka's offset-for-timestamp: everything from that offset on is read,
    whatever its timestamp). A truncated last message ends the file quietly: the active
    segment may be written while it is read. Batches hold about ``batch_records`` rows.
    """
    path = Path(path)
    if not path.exists() and Path(str(path) + ".deleted").exists():
        # Retention renamed it for asynchronous deletion; the bytes are still there.
        path = Path(str(path) + ".deleted")
    if path.stat().st_size == 0:
        return
    mapped = pa.memory_map(str(path), "r")
    try:
        data = mapped.read_buffer()
        batches = _read(data, path, topic, partition, start_offset,
                        end_offset if end_offset is not None else 2**63 - 1, start_timestamp, batch_records)
        if include_headers:
            yield from batches
        else:
            for batch in batches:
                yield batch.drop_columns(["headers"])
    finally:
        mapped.close()


def _read(data: pa.Buffer, path: Path, topic: str, partition: int, start_offset: int,
          end_offset: int, start_timestamp: int | None, batch_records: int) -> Iterator[pa.RecordBatch]:
    view = memoryview(data)
    size = len(view)
    head = HEAD.unpack_from
    head_v1 = _HEAD_V1.unpack_from
    head_v0 = _HEAD_V0.unpack_from
    int32 = _INT32.unpack_from
    crc32 = zlib.crc32
    seeking_timestamp = start_timestamp is not None
    # Bound methods hoisted out of the loop: this is the per-message hot path.
    cols, offsets_append, timestamps_append, types_append, ranges_extend = _new_columns()
    count = 0
    pos = 0
    while pos + _LOG_OVERHEAD + _MIN_MESSAGE_SIZE <= size:
        magic = view[pos + MAGIC_POSITION]
        inner = None  # the side bytes and messages of a wrapper or batch to read from
        if magic == record_batch.RECORD_BATCH_MAGIC:
            end = pos + _LOG_OVERHEAD + int32(view, pos + 8)[0]
            if end > size:
                break  # truncated tail
            offset, inner, messages = _batch_records(path, view, pos, end, start_offset)
            pos = end
        elif magic == 1 and pos + _KEY_START_V1 <= size:
            offset, message_size, crc, _, attributes, timestamp, key_length = head_v1(view, pos)
            key_start = pos + _KEY_START_V1
            timestamp_type = _LOG_APPEND_TIME if attributes & _TIMESTAMP_TYPE_BIT else _CREATE_TIME
        elif magic == 0:
            offset, message_size, crc, _, attributes, _, key_length = head_v0(view, pos)
            key_start = pos + _KEY_START_V0
            timestamp = NO_TIMESTAMP
            timestamp_type = NO_TIMESTAMP_TYPE
        else:
            offset, message_size, *_ = head(view, pos)
            if pos + _LOG_OVERHEAD + message_size > size:
                break  # truncated tail
            raise SegmentCorrupt(f"{path}: message at byte {pos} has unknown magic {magic}")
        if magic != record_batch.RECORD_BATCH_MAGIC:
            end = pos + _LOG_OVERHEAD + message_size
            if message_size < _MIN_MESSAGE_SIZE:
                raise SegmentCorrupt(f"{path}: message at byte {pos} has impossible size {message_size}")
            if end > size:
                break  # truncated tail: the writer has not finished this message
            if crc32(view[pos + MAGIC_POSITION:end]) != crc:
                raise SegmentCorrupt(f"{path}: CRC mismatch in message at byte {pos} (offset {offset})")
            key_end = key_start + key_length if key_length > 0 else key_start
            if key_length < -1 or key_end + 4 > end:
                raise SegmentCorrupt(f"{path}: message at byte {pos} has an impossible key length")
            value_length = int32(view, key_end)[0]
            value_start = key_end + 4
            if value_start + (value_length if value_length > 0 else 0) != end or value_length < -1:
                raise SegmentCorrupt(f"{path}: message at byte {pos} has inconsistent key/value lengths")
            pos = end
            if attributes & _CODEC_MASK and offset >= start_offset:  # a wrapper's offset is its last inner one
                inner, messages = _inner_messages(path, view, value_start, value_length, offset, magic,
                                                  attributes, timestamp)
        if inner is not None:
            if cols.side is None:
                if count:
                    yield _to_batch(cols, data, topic, partition)
                    count = 0
                cols, offsets_append, timestamps_append, types_append, ranges_extend = \
                    _new_columns(bytearray())
            base = len(cols.side)
            cols.side += inner
            for (inner_offset, inner_timestamp, inner_type, key_from, key_to, value_from, value_to,
                 key_is_null, value_is_null, headers) in messages:
                if inner_offset < start_offset:
                    continue
                if inner_offset >= end_offset:
                    break
                if seeking_timestamp:
                    if inner_timestamp < start_timestamp:
                        continue
                    seeking_timestamp = False
                offsets_append(inner_offset)
                timestamps_append(inner_timestamp)
                types_append(inner_type)
                if key_is_null:
                    cols.null_keys.append(count)
                if value_is_null:
                    cols.null_values.append(count)
                ranges_extend((base + key_from, base + key_to, base + value_from, base + value_to))
                if headers:
                    cols.headers[count] = headers
                count += 1
        elif magic != record_batch.RECORD_BATCH_MAGIC and not attributes & _CODEC_MASK \
                and start_offset <= offset < end_offset:
            if seeking_timestamp:
                if timestamp < start_timestamp:
                    continue
                seeking_timestamp = False
            if cols.side is not None:
                if count:
                    yield _to_batch(cols, data, topic, partition)
                    count = 0
                cols, offsets_append, timestamps_append, types_append, ranges_extend = _new_columns()
            offsets_append(offset)
            timestamps_append(timestamp)
            types_append(timestamp_type)
            if key_length < 0:
                cols.null_keys.append(count)
            if value_length < 0:
                cols.null_values.append(count)
            ranges_extend((key_start, key_end, value_start, end))
            count += 1
        if offset >= end_offset - 1:
            break  # offsets only grow: everything after this message is past the end
        if count >= batch_records or (count and cols.ranges[-1] - cols.ranges[0] >= _MAX_BATCH_BYTES):
            yield _to_batch(cols, data, topic, partition)
            count = 0
            cols, offsets_append, timestamps_append, types_append, ranges_extend = _new_columns()
    if count:
        yield _to_batch(cols, data, topic, partition)


def _inner_messages(path: Path, view: memoryview, value_start: int, value_length: int,
                    wrapper_offset: int, wrapper_magic: int, wrapper_attributes: int,
                    wrapper_timestamp: int):
    """Decompress a wrapper; return its inner bytes and, per inner message, ``[offset,
    timestamp, timestamp type, key start, key end, value start, value end, key is null,
    value is null, headers (None)]`` (positions in the inner bytes)."""
    if value_length < 0:
        raise SegmentCorrupt(f"{path}: compressed wrapper at offset {wrapper_offset} has a null value")
    codec = wrapper_attributes & _CODEC_MASK
    try:
        inner = decompress(Codec(codec), bytes(view[value_start:value_start + value_length]),
                           magic=wrapper_magic)
    except Exception as exc:  # ValueError for unknown codecs, RecordError for bad bytes
        raise SegmentCorrupt(f"{path}: cannot decompress wrapper at offset {wrapper_offset}: {exc}") from exc
    log_append = wrapper_magic == 1 and bool(wrapper_attributes & _TIMESTAMP_TYPE_BIT)
    messages = []
    pos = 0
    size = len(inner)
    while pos < size:
        if pos + _LOG_OVERHEAD > size:
            raise SegmentCorrupt(f"{path}: truncated inner message in wrapper at offset {wrapper_offset}")
        message_size = _INT32.unpack_from(inner, pos + 8)[0]
        end = pos + _LOG_OVERHEAD + message_size
        if message_size < _MIN_MESSAGE_SIZE or end > size:
            raise SegmentCorrupt(f"{path}: bad inner message size in wrapper at offset {wrapper_offset}")
        offset, _, crc, magic, attributes, timestamp = HEAD.unpack_from(inner, pos)
        if zlib.crc32(memoryview(inner)[pos + MAGIC_POSITION:end]) != crc:
            raise SegmentCorrupt(f"{path}: CRC mismatch in inner message of wrapper at offset {wrapper_offset}")
        if magic == 1:
            key_start = pos + _KEY_START_V1
        else:
            key_start = pos + _KEY_START_V0
            timestamp = NO_TIMESTAMP
        key_length = _INT32.unpack_from(inner, key_start - 4)[0]
        if attributes & _CODEC_MASK:
            raise SegmentCorrupt(f"{path}: nested compression in wrapper at offset {wrapper_offset}")
        value_length_at = key_start + max(key_length, 0)
        inner_value_length = _INT32.unpack_from(inner, value_length_at)[0]
        key_end = key_start + max(key_length, 0)
        if wrapper_magic == 0:
            timestamp_type = NO_TIMESTAMP_TYPE
        elif log_append:
            timestamp, timestamp_type = wrapper_timestamp, _LOG_APPEND_TIME
        else:
            timestamp_type = _CREATE_TIME
        messages.append([offset, timestamp, timestamp_type, key_start, key_end, value_length_at + 4, end,
                         key_length < 0, inner_value_length < 0, None])
        pos = end
    if wrapper_magic == 1 and messages:
        shift = wrapper_offset - messages[-1][0]
        for message in messages:
            message[0] += shift
    return inner, messages


def _batch_records(path: Path, view: memoryview, position: int, end: int, start_offset: int):
    """The magic 2 batch at ``view[position:end]``: its last offset, and, as
    ``_inner_messages`` gives a wrapper's, its keys and values copied to one side buffer and
    its records (headers as ``[{"key", "value"}]``, None for none), or None for a batch that
    ends before ``start_offset`` or holds nothing a consumer reads (control, emptied)."""
    (base_offset,) = _INT64.unpack_from(view, position)
    (last_offset_delta,) = _INT32.unpack_from(view, position + _LAST_OFFSET_DELTA_POSITION)
    last_offset = base_offset + last_offset_delta
    if last_offset < start_offset or _INT32.unpack_from(view, position + _RECORD_COUNT_POSITION)[0] == 0:
        return last_offset, None, None  # compaction keeps emptied batches for their producer state
    entry = view[position:end].cast("B")  # Arrow's buffers are signed chars; the parser reads bytes
    try:
        (batch,) = record_batch.iter_batches(entry)
        if batch.is_control:
            return last_offset, None, None
        records = record_batch.batch_records(entry, batch)
    except RecordError as exc:
        raise SegmentCorrupt(f"{path}: record batch at byte {position}: {exc}") from exc
    side = bytearray()
    messages = []
    for record in records:
        key_start = len(side)
        if record.key is not None:
            side += record.key
        value_start = len(side)
        if record.value is not None:
            side += record.value
        headers = [{"key": key, "value": value} for key, value in record.headers] or None
        messages.append([record.offset, record.timestamp, record.timestamp_type, key_start, value_start,
                         value_start, len(side), record.key is None, record.value is None, headers])
    return last_offset, side, messages


def _binary_columns(cols: _Columns, data: pa.Buffer) -> tuple[pa.Array, pa.Array]:
    """Gather keys (elements 4i) and values (4i+2) into two compact ``binary`` columns."""
    count = len(cols.offsets)
    buffer = pa.py_buffer(cols.side) if cols.side is not None else data
    offsets = pa.array(cols.ranges, pa.int32()).buffers()[1]
    spans = pa.Array.from_buffers(pa.binary(), 4 * count - 1, [None, offsets, buffer])
    key_index = pa.array(range(0, 4 * count, 4), pa.int64())
    value_index = pa.array(range(2, 4 * count, 4), pa.int64())
    return (spans.take(_with_nulls(key_index, cols.null_keys, count)),
            spans.take(_with_nulls(value_index, cols.null_values, count)))


def _with_nulls(index: pa.Array, nulls: list[int], count: int) -> pa.Array:
    if not nulls:
        return index
    is_null = [False] * count
    for position in nulls:
        is_null[position] = True
    return pc.if_else(pa.array(is_null, pa.bool_()), pa.scalar(None, pa.int64()), index)


def _to_batch(cols: _Columns, data: pa.Buffer, topic: str, partition: int) -> pa.RecordBatch:
    count = len(cols.offsets)
    millis = pa.array(cols.timestamps, pa.int64())
    micros = pc.multiply_checked(millis, 1000).view(pa.timestamp("us", tz="UTC"))
    keys, values = _binary_columns(cols, data)
    return pa.RecordBatch.from_arrays(
        [
            keys,
            values,
            pa.repeat(pa.scalar(topic, pa.string()), count),
            pa.repeat(pa.scalar(partition, pa.int32()), count),
            pa.array(cols.offsets, pa.int64()),
            micros,
            pa.array(cols.types, pa.int32()),
            _headers_column(cols.headers, count),
        ],
        schema=ARROW_SCHEMA_WITH_HEADERS,
    )


def _headers_column(headers: dict[int, list], count: int) -> pa.Array:
    if not headers:
        return pa.nulls(count, HEADERS_TYPE)
    rows = [None] * count
    for row, row_headers in headers.items():
        rows[row] = row_headers
    return pa.array(rows, HEADERS_TYPE)
