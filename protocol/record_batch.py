"""Kafka's magic 2 RecordBatch format (KIP-98): a strict reader, and its conversion to the
magic 1 messages of this broker's log.

Why this exists: aiokafka 0.14, one of the clients minikafka serves in its default
configuration, always builds magic 2 batches (its MessageAccumulator uses
DefaultRecordBatchBuilder) and sends them even in Produce v2, which is specified to carry
magic 0/1 message sets only. minikafka stores Kafka 0.10's message format (magic 0/1). A
real Kafka broker whose log has an older ``message.format.version`` than an incoming batch
converts the batch down to the log's format in its LogValidator
(``convertAndAssignOffsetsNonCompressed``, and ``validateMessagesAndAssignOffsetsCompressed``
with a target magic); ``protocol.records.validate_and_assign`` does the same with the magic 1
messages this module writes, and refuses what the old format cannot hold, with the codes
Kafka uses:

* records with headers, transactional or idempotent batches (producerId != -1), control
  batches: UNSUPPORTED_FOR_MESSAGE_FORMAT;
* zstd (codec 4, which magic 0/1 cannot carry): UNSUPPORTED_COMPRESSION_TYPE;
* a batch over ``max.message.bytes`` as received (log overhead included): MESSAGE_TOO_LARGE;
* anything malformed (bad CRC-32C, sizes, varints, counts, unknown codec, a set mixing
  magic 2 with magic 0/1): CORRUPT_MESSAGE.

Any bad input raises ``RecordError``; no other exception escapes.

A set is one or more batches back to back, each a batch header as ``protocol.entries``
lays it out (magic 2: CRC-32C from attributes to the end, lastOffsetDelta, base and max
timestamps, producer id, epoch and base sequence, recordCount) and then its records,
compressed as a whole when the codec is not 0::

    record    length                varint  bytes from attributes to the end of headers
              attributes            int8    unused
              timestampDelta        varlong from baseTimestamp
              offsetDelta           varint  from baseOffset
              keyLength             varint  -1 = null key
              key
              valueLength           varint  -1 = null value
              value
              headersCount          varint
              headers               keyLength varint, key (UTF-8), valueLength varint
                                    (-1 = null), value; headersCount times

Varints are zigzag-encoded base-128 little-endian groups (protobuf's sint32 / sint64), at
most 5 bytes (varint) or 10 bytes (varlong). Compressed record sections use the codecs of
``protocol.compression`` (gzip; snappy with xerial framing or a raw block; lz4 as a standard
frame with the correct header checksum).
"""

from __future__ import annotations

import functools
import struct
import zlib
from typing import Iterator, NamedTuple

from minikafka.protocol.compression import Codec, compress, decompress
from minikafka.protocol.entries import (
    BATCH_CRC_START as _CRC_START,
    BATCH_HEADER as _HEADER,
    CODEC_MASK as _CODEC_MASK,
    CONTROL_BIT as _CONTROL_BIT,
    CRC_POSITION as _CRC_POSITION_MAGIC_1,
    HEAD_AND_KEY_LENGTH,
    HEAD_AND_LENGTHS,
    LOG_OVERHEAD as _LOG_OVERHEAD,
    MAGIC_POSITION,
    TIMESTAMP_TYPE_BIT as _TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT as _TRANSACTIONAL_BIT,
    crc32c,
)
from minikafka.protocol.errors import ErrorCode, RecordError

__all__ = [
    "RECORD_BATCH_MAGIC",
    "BATCH_OVERHEAD",
    "MAGIC_POSITION",
    "NO_PRODUCER_ID",
    "RecordBatch",
    "BatchRecord",
    "iter_batches",
    "batch_records",
    "magic_1_conversion",
    "ProducerBatch",
    "AssignedBatches",
    "assign_batches",
    "producer_batches",
    "leader_epoch_starts",
    "build_record_batch",
    "empty_batch",
    "uses_zstd",
    "EndTxnMarker",
    "batch_header",
    "build_end_txn_marker",
    "end_txn_marker",
]

RECORD_BATCH_MAGIC = 2
NO_PRODUCER_ID = -1
_ZSTD = 4

# The magic 1 message as ``protocol.records`` describes it, up to the key length, and with a
# null key up to the value length (one pack for the common case).
_MAGIC_1_HEAD = HEAD_AND_KEY_LENGTH[1]
_MAGIC_1_NULL_KEY_HEAD = HEAD_AND_LENGTHS[1]
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
BATCH_OVERHEAD = _HEADER.size  # 61: everything before the records
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_NO_HEADERS: tuple = ()
_ZIGZAG = tuple((byte >> 1) ^ -(byte & 1) for byte in range(0x80))  # one-byte varints


def _corrupt(message: str) -> RecordError:
    return RecordError(ErrorCode.CORRUPT_MESSAGE, message)


def _unsupported(message: str) -> RecordError:
    return RecordError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, message)


class RecordBatch(NamedTuple):
    """The header of one magic 2 batch in a buffer (its CRC-32C already checked).

    ``position`` is where its baseOffset field starts and ``size`` its total length, log
    overhead included (``batchLength + 12``), the size ``max.message.bytes`` limits.
    """

    base_offset: int
    position: int
    size: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def codec(self) -> int:
        """Compression codec number (4 is zstd, which ``Codec`` does not name)."""
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)


class BatchRecord(NamedTuple):
    """One record of a magic 2 batch.

    ``offset`` is baseOffset + offsetDelta. ``timestamp`` is baseTimestamp +
    timestampDelta under CreateTime and the batch's maxTimestamp under LogAppendTime
    (Kafka's rule). ``headers`` are (UTF-8 key, value or None) pairs.
    """

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def iter_batches(buf, max_message_bytes: int | None = None, *, allow_empty: bool = False) -> Iterator[RecordBatch]:
    """The batches of a produced set, each checked before it is yielded.

    The set must be whole (a truncated tail is CORRUPT_MESSAGE: this reader serves the
    produce path, not fetch responses). Checked per batch: magic 2 (anything else means a
    set mixing formats), size within ``max_message_bytes`` when given (log overhead
    included, MESSAGE_TOO_LARGE, before the CRC is computed, as in Kafka's Log.append),
    sane batchLength, CRC-32C, a known codec (zstd included), and recordCount >= 1, or >= 0
    with ``allow_empty``: a client may not send an empty batch (Kafka 2.8's LogValidator),
    while a log holds those the cleaner keeps for their producer state (``empty_batch``).
    Records are not parsed here: see ``batch_records``.
    """
    view = memoryview(buf)
    length = len(view)
    if length == 0:
        raise _corrupt("empty record batch set")
    position = 0
    unpack = _HEADER.unpack_from
    while position < length:
        if length - position < BATCH_OVERHEAD:
            if length - position > MAGIC_POSITION and view[position + MAGIC_POSITION] != RECORD_BATCH_MAGIC:
                raise _corrupt(f"set mixes magic 2 and magic {view[position + MAGIC_POSITION]} at byte {position}")
            raise _corrupt(f"record batch set ends in a truncated batch at byte {position}")
        (base_offset, batch_length, leader_epoch, magic, crc, attributes, last_offset_delta,
         base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
         record_count) = unpack(view, position)
        if magic != RECORD_BATCH_MAGIC:
            raise _corrupt(f"set mixes magic 2 and magic {magic} at byte {position}")
        end = position + _LOG_OVERHEAD + batch_length
        if max_message_bytes is not None and end - position > max_message_bytes:
            raise RecordError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record batch of {end - position} bytes (log overhead included) exceeds "
                f"max.message.bytes {max_message_bytes}",
            )
        if batch_length < BATCH_OVERHEAD - _LOG_OVERHEAD or end > length:
            raise _corrupt(f"record batch at byte {position} has impossible length {batch_length}")
        if crc32c(view[position + _CRC_START : end]) != crc:
            raise _corrupt(f"record batch at byte {position} fails its CRC-32C check")
        if attributes & _CODEC_MASK > _ZSTD:
            raise _corrupt(f"record batch at byte {position} has unknown codec {attributes & _CODEC_MASK}")
        if record_count < (0 if allow_empty else 1):
            raise _corrupt(f"record batch at byte {position} has record count {record_count}")
        yield RecordBatch(
            base_offset, position, end - position, leader_epoch, attributes, last_offset_delta,
            base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, record_count,
        )
        position = end


def batch_records(buf, batch: RecordBatch) -> list[BatchRecord]:
    """Every record of ``batch`` (read from ``buf`` by ``iter_batches``), decompressed.

    CORRUPT_MESSAGE when the records do not parse, overrun their section, leave bytes over,
    or do not number ``recordCount``.
    """
    section = _records_section(buf, batch)
    if _batch_records is not None:
        records = _batch_records(section, batch.record_count, batch.base_offset, batch.base_timestamp,
                                 batch.timestamp_type, batch.max_timestamp, BatchRecord)
        if records is not None:
            return records
    return _py_batch_records(section, batch)  # which raises where the C loop gave None


def _py_batch_records(section: memoryview, batch: RecordBatch) -> list[BatchRecord]:
    """``batch_records``' loop over the records section; ``_records.batch_records`` is the
    same in C (None where this raises): keep them in step (tests/protocol/test_native.py)."""
    log_append_time = batch.timestamp_type == 1
    records = []
    for offset_delta, timestamp_delta, key, value, headers in _parse_records(section, batch):
        timestamp = batch.max_timestamp if log_append_time else _timestamp(batch, timestamp_delta)
        records.append(BatchRecord(
            batch.base_offset + offset_delta,
            timestamp,
            batch.timestamp_type,
            None if key is None else key.tobytes(),
            None if value is None else value.tobytes(),
            headers,
        ))
    return records


def magic_1_conversion(buf, max_message_bytes: int) -> Iterator[tuple[Codec, int, bytearray, int, int]]:
    """What each batch of ``buf`` becomes in a magic 1 log, for ``protocol.records``.

    Yields, per batch, ``(codec, timestamp type, messages, count, max timestamp)``:
    ``messages`` is the magic 1 message set of its ``count`` records, at offsets 0..n-1, to
    be appended as it is (``Codec.NONE``) or compressed into one wrapper with ``codec``
    whose timestamp is ``max timestamp`` (the largest inner one, as a magic 1 producer
    writes it). Timestamps are baseTimestamp + delta (CreateTime) or maxTimestamp
    (LogAppendTime, which uncompressed messages carry in their attributes too). Raises, per
    batch and in Kafka's order: MESSAGE_TOO_LARGE (size as received), the checks of
    ``iter_batches``, UNSUPPORTED_FOR_MESSAGE_FORMAT for control, transactional and
    idempotent batches, UNSUPPORTED_COMPRESSION_TYPE for zstd, CORRUPT_MESSAGE for records
    that do not parse (``batch_records``), and then UNSUPPORTED_FOR_MESSAGE_FORMAT for a
    record with headers.
    """
    for batch in iter_batches(buf, max_message_bytes):
        if batch.is_control:
            raise _unsupported(f"control batch at byte {batch.position} cannot be written in magic 1")
        if batch.is_transactional or batch.producer_id != NO_PRODUCER_ID:
            raise _unsupported(
                f"transactional or idempotent batch (producer id {batch.producer_id}) at byte "
                f"{batch.position} cannot be written in magic 1"
            )
        if batch.codec == _ZSTD:
            raise RecordError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"record batch at byte {batch.position} is zstd-compressed, which magic 1 cannot hold",
            )
        section = _records_section(buf, batch)
        converted = _magic_1_messages(
            section, batch.record_count, batch.attributes & _CODEC_MASK, batch.timestamp_type,
            batch.base_timestamp, batch.max_timestamp,
        )
        if converted is None:
            raise _refusal(section, batch)
        messages, max_timestamp = converted
        yield Codec(batch.codec), batch.timestamp_type, messages, batch.record_count, max_timestamp


def _py_magic_1_messages(
    data: memoryview, count: int, codec: int, timestamp_type: int, base_timestamp: int, batch_max_timestamp: int
) -> tuple[bytearray, int] | None:
    """The records section ``data`` of a batch (its recordCount, codec number, timestamp
    type, baseTimestamp and maxTimestamp given as they are in its header) written as magic 1
    messages, and their largest timestamp; None if any record is not well-formed or cannot be
    converted (then ``_refusal`` tells which error Kafka's order reports).

    This is the produce path's per-record loop for magic 2 producers: it reads each record
    and writes its message straight into one buffer, without a per-record object, function
    call or copy beyond the key and value themselves. Varints of one or two bytes (every
    length, delta and count below 8 Ki) are decoded inline; longer ones go through
    ``_varint``. ``_records.magic_1_messages`` is the same loop in C, taking the same
    arguments: keep them in step (tests/protocol/test_record_batch.py compares them).
    """
    end = len(data)
    # A record takes at least 7 bytes and its message 27 more (34 bytes with null key and
    # value against 7), which bounds the output before a forged count can inflate it. A batch
    # has at least one record (``iter_batches`` checks it).
    if count < 1 or count > end // 7:
        return None
    out = bytearray(end + 27 * count)
    pack_head = _MAGIC_1_HEAD.pack_into
    pack_null_key_head = _MAGIC_1_NULL_KEY_HEAD.pack_into
    pack_int32 = _INT32.pack_into
    pack_crc = _UINT32.pack_into
    crc32 = zlib.crc32
    varint = _varint
    zigzag = _ZIGZAG
    log_append_time = timestamp_type == 1
    attributes = _TIMESTAMP_TYPE_BIT if log_append_time and codec == 0 else 0
    # Under LogAppendTime every record takes the batch's maxTimestamp; the largest
    # timestamp starts, as a magic 1 producer's does, at -1 (none).
    timestamp = batch_max_timestamp
    max_timestamp = max(timestamp, -1) if log_append_time else -1
    min_delta = _INT64_MIN - base_timestamp
    max_delta = _INT64_MAX - base_timestamp
    position = 0
    written = 0
    with memoryview(out) as view:
        try:
            for index in range(count):
                byte = data[position]
                if byte < 0x80:
                    size = zigzag[byte]
                    position += 1
                elif data[position + 1] < 0x80:
                    size = byte & 0x7F | data[position + 1] << 7
                    size = (size >> 1) ^ -(size & 1)
                    position += 2
                else:
                    size, position = varint(data, position, 5)
                record_end = position + size
                if size < 0 or record_end > end:
                    return None
                position += 1  # attributes
                byte = data[position]
                if byte < 0x80:
                    timestamp_delta = zigzag[byte]
                    position += 1
                elif data[position + 1] < 0x80:
                    timestamp_delta = byte & 0x7F | data[position + 1] << 7
                    timestamp_delta = (timestamp_delta >> 1) ^ -(timestamp_delta & 1)
                    position += 2
                else:
                    timestamp_delta, position = varint(data, position, 10)
                if not log_append_time:
                    if not min_delta <= timestamp_delta <= max_delta:
                        return None
                    timestamp = base_timestamp + timestamp_delta
                    if timestamp > max_timestamp:
                        max_timestamp = timestamp
                # offsetDelta: magic 1 numbers the messages 0..n-1 whatever it says
                if data[position] < 0x80:
                    position += 1
                elif data[position + 1] < 0x80:
                    position += 2
                else:
                    _, position = varint(data, position, 5)
                if data[position] == 1:  # -1: a null key
                    position += 1
                    key_length = -1
                else:
                    key_length, position = varint(data, position, 5)
                    if key_length < 0 or position + key_length > record_end:
                        return None
                    key_position = position
                    position += key_length
                byte = data[position]
                if byte < 0x80:
                    value_length = zigzag[byte]
                    position += 1
                elif data[position + 1] < 0x80:
                    value_length = byte & 0x7F | data[position + 1] << 7
                    value_length = (value_length >> 1) ^ -(value_length & 1)
                    position += 2
                else:
                    value_length, position = varint(data, position, 5)
                if value_length < 0:
                    if value_length != -1:
                        return None
                    value_end = position
                elif position + value_length > record_end:
                    return None
                else:
                    value_end = position + value_length
                # What is left must be a header count of 0 (one byte, unless a producer pads
                # the varint): anything else has headers or does not add up, and is refused
                # either way.
                if value_end + 1 != record_end or data[value_end] != 0:
                    header_count, header_end = varint(data, value_end, 5)
                    if header_count != 0 or header_end != record_end:
                        return None
                message = written
                if key_length < 0:
                    written += _MAGIC_1_NULL_KEY_HEAD.size
                    pack_null_key_head(
                        out, message, index, written - message - _LOG_OVERHEAD + value_end - position, 0, 1,
                        attributes, timestamp, -1, value_length,
                    )
                else:
                    written += _MAGIC_1_HEAD.size
                    pack_head(
                        out, message, index, written - message + 4 - _LOG_OVERHEAD + key_length
                        + value_end - position, 0, 1, attributes, timestamp, key_length,
                    )
                    view[written : written + key_length] = data[key_position : key_position + key_length]
                    written += key_length
                    pack_int32(out, written, value_length)
                    written += 4
                view[written : written + value_end - position] = data[position:value_end]
                written += value_end - position
                pack_crc(out, message + _CRC_POSITION_MAGIC_1, crc32(view[message + MAGIC_POSITION : written]))
                position = record_end
        except (IndexError, RecordError):
            return None
    if position != end:
        return None
    del out[written:]
    return out, max_timestamp


# The per-record loop in use: this pure-Python one, or its C twin from
# ``minikafka.protocol._records``. ``protocol.records.use_native`` alone chooses (through
# ``_use_native``), so one switch (and ``MINIKAFKA_PURE_PYTHON=1``) covers every loop of the
# produce path, and this module, which records imports, need not know about the accelerator.
_magic_1_messages = _py_magic_1_messages
# The C check of a batch's records (None: ``_records_max_timestamp`` alone, in Python).
_check_records = None
# The C reader of a batch's records (None: ``_py_batch_records`` alone).
_batch_records = None


def _use_native(native) -> None:
    """Take the loops of the C accelerator module ``native``, or the Python ones for None."""
    global _magic_1_messages, _check_records, _batch_records
    _magic_1_messages = _py_magic_1_messages if native is None else native.magic_1_messages
    _check_records = None if native is None else native.check_records
    _batch_records = None if native is None else native.batch_records


def _refusal(data: memoryview, batch: RecordBatch) -> RecordError:
    """The error for a records section ``_magic_1_messages`` could not convert: the first
    record that does not parse, else the first with headers or a timestamp beyond int64."""
    try:
        records = _parse_records(data, batch)
    except RecordError as error:
        return error
    for _, timestamp_delta, _, _, headers in records:
        if headers:
            return _unsupported(f"record with headers in batch at byte {batch.position} cannot be written in magic 1")
        if batch.timestamp_type == 0:
            try:
                _timestamp(batch, timestamp_delta)
            except RecordError as error:
                return error
    raise AssertionError(f"record batch at byte {batch.position} converts in the reader but not in the writer")


def _timestamp(batch: RecordBatch, delta: int) -> int:
    timestamp = batch.base_timestamp + delta
    if not _INT64_MIN <= timestamp <= _INT64_MAX:
        raise _corrupt(f"record in batch at byte {batch.position} has a timestamp beyond int64")
    return timestamp


def _records_section(buf, batch: RecordBatch) -> memoryview:
    section = memoryview(buf)[batch.position + BATCH_OVERHEAD : batch.position + batch.size]
    if batch.codec == 0:
        return section
    return memoryview(decompress(Codec(batch.codec), section, magic=RECORD_BATCH_MAGIC))


def _varint(data: memoryview, position: int, max_bytes: int) -> tuple[int, int]:
    """The zigzag varint at ``position`` and the position after it (IndexError past the
    end of ``data``, which the caller turns into CORRUPT_MESSAGE)."""
    result = 0
    shift = 0
    for _ in range(max_bytes):
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
    raise _corrupt(f"varint longer than {max_bytes} bytes")


def _parse_records(data: memoryview, batch: RecordBatch) -> list[tuple]:
    """``(offsetDelta, timestampDelta, key, value, headers)`` per record of a records
    section; key and value are memoryviews into ``data`` or None."""
    where = f"record batch at byte {batch.position}"
    end = len(data)
    records = []
    append = records.append
    varint = _varint
    position = 0
    zigzag = _ZIGZAG
    # Most varints of a record (deltas, a null key's length, the header count) take one
    # byte: those are decoded inline, a function call being most of the cost per record.
    try:
        for _ in range(batch.record_count):
            size, position = varint(data, position, 5)
            record_end = position + size
            if size < 0 or record_end > end:
                raise _corrupt(f"{where} has a record of impossible length {size}")
            position += 1  # attributes
            byte = data[position]
            if byte < 0x80:
                timestamp_delta = zigzag[byte]
                position += 1
            else:
                timestamp_delta, position = varint(data, position, 10)
            byte = data[position]
            if byte < 0x80:
                offset_delta = zigzag[byte]
                position += 1
            else:
                offset_delta, position = varint(data, position, 5)
            byte = data[position]
            if byte == 1:  # -1: a null key
                key = None
                position += 1
            else:
                key_length, position = varint(data, position, 5)
                if key_length < 0:
                    raise _corrupt(f"{where} has a record with key length {key_length}")
                key = data[position : position + key_length]
                position += key_length
            value_length, position = varint(data, position, 5)
            if value_length < 0:
                if value_length != -1:
                    raise _corrupt(f"{where} has a record with value length {value_length}")
                value = None
            else:
                value = data[position : position + value_length]
                position += value_length
            if data[position] == 0:
                headers = _NO_HEADERS
                position += 1
            else:
                header_count, position = varint(data, position, 5)
                headers, position = _parse_headers(data, position, record_end, header_count, where)
            if position != record_end:
                raise _corrupt(f"{where} has a record whose fields do not add up to its length")
            append((offset_delta, timestamp_delta, key, value, headers))
    except IndexError:
        raise _corrupt(f"{where} ends inside a record") from None
    if position != end:
        raise _corrupt(f"{where} holds bytes beyond its {batch.record_count} records")
    return records


def _parse_headers(data: memoryview, position: int, record_end: int, count: int, where: str):
    # Each header takes at least two bytes, which bounds a forged count before looping.
    if count < 0 or count * 2 > record_end - position:
        raise _corrupt(f"{where} has a record with header count {count}")
    headers = []
    for _ in range(count):
        key_length, position = _varint(data, position, 5)
        if key_length < 0 or position + key_length > record_end:
            raise _corrupt(f"{where} has a header with key length {key_length}")
        try:
            key = str(data[position : position + key_length], "utf-8")
        except UnicodeDecodeError:
            raise _corrupt(f"{where} has a header key that is not UTF-8") from None
        position += key_length
        value_length, position = _varint(data, position, 5)
        if value_length < -1 or position + max(value_length, 0) > record_end:
            raise _corrupt(f"{where} has a header with value length {value_length}")
        value = None if value_length == -1 else data[position : position + value_length].tobytes()
        position += max(value_length, 0)
        headers.append((key, value))
    return tuple(headers), position


# ---------------------------------------------------------------------------------------
# A log of magic 2: batches appended as they are (Kafka 2.8's LogValidator for magic 2)

_OFFSET_AND_SIZE = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP_POSITION = 35
_ATTRIBUTES_AND_HEAD = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, base and max timestamp
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
_PRODUCER_POSITION = 43
_LEADER_EPOCH_POSITION = 12
_CRC_POSITION = 17


class EndTxnMarker(NamedTuple):
    """The COMMIT or ABORT a control batch's record holds (Kafka's EndTransactionMarker), with
    the record's timestamp."""

    commit: bool
    coordinator_epoch: int
    timestamp: int


class ProducerBatch(NamedTuple):
    """What producer state needs of one appended batch that carries a producer id
    (``storage.producer_state``'s ``append_data_batch`` and ``append_end_txn_marker``):
    ``marker`` is a control batch's, None for a data batch and for a control batch without
    a transaction marker (one the cleaner emptied)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool
    is_control: bool
    marker: EndTxnMarker | None = None


class AssignedBatches(NamedTuple):
    """``assign_batches``' result: the batches with offsets, epochs and timestamps written in,
    and what the log needs of them (as ``protocol.records.ValidatedSet`` names them)."""

    buffer: bytearray | memoryview
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    first_timestamp: int
    first_untimed_offset: int
    producer_batches: tuple[ProducerBatch, ...]


def assign_batches(
    buf, next_offset: int, now_ms: int, *, max_message_bytes: int, log_append_time: bool,
    earliest: int, latest: int, leader_epoch: int, in_place: bool = False,
) -> AssignedBatches:
    """Validate produced magic 2 batches and assign their offsets from ``next_offset`` in
    place, as Kafka 2.8's LogValidator does for a log of magic 2 (``assignOffsetsNonCompressed``
    and the in-place branch of ``validateMessagesAndAssignOffsetsCompressed``).

    Per batch, besides ``iter_batches``' checks (size, CRC-32C, codec, count): recordCount
    must equal lastOffsetDelta + 1 (Kafka's "inconsistent batch offset range"); no control
    batch (only a transaction coordinator writes those); a producer id needs a base sequence;
    and a producer may not claim LogAppendTime (INVALID_TIMESTAMP). Every record is parsed,
    decompressed if need be (Kafka validates compressed records too), and must have offsetDelta
    equal to its index; under CreateTime its timestamp (unless -1) must lie in
    [``earliest``, ``latest``] (INVALID_TIMESTAMP).

    Where this departs from Kafka: Kafka answers the malformed-batch cases with INVALID_RECORD
    (87), which clients before 2.4 do not know; they are CORRUPT_MESSAGE here, as for magic
    0/1. A set of several batches is taken batch by batch (Kafka 2.8 refuses it: no client
    sends one, and each batch is appended in place either way). A compressed batch whose
    offset deltas are not 0..n-1 is refused, not recompressed (no client writes one; the magic
    1 path refuses such wrappers too). The topic's ``compression.type``, where it is not
    ``producer``, is applied afterwards (``recompressed``).

    Written in place, outside the CRC: baseOffset and partitionLeaderEpoch (``leader_epoch``).
    Inside it, so the CRC-32C is computed again when they change: under LogAppendTime the
    timestamp-type bit and maxTimestamp ``now_ms``; under CreateTime maxTimestamp becomes the
    largest record timestamp (Kafka's ``setMaxTimestamp``).

    ``in_place``: the caller hands ``buf`` over (a produce request's own frame), so where it is
    writable it is written in place, as Kafka's LogValidator writes into the request's buffer;
    else the batches are copied first. A refused set may be left part-written.
    """
    out = buf if in_place and not memoryview(buf).readonly else bytearray(buf)
    offset = next_offset
    max_timestamp = -1
    offset_of_max = -1
    first_timestamp = None
    first_untimed = -1
    producers = []
    for batch in iter_batches(out, max_message_bytes):
        where = f"record batch at byte {batch.position}"
        if batch.record_count != batch.last_offset_delta + 1:
            raise _corrupt(f"{where} has {batch.record_count} records but last offset delta {batch.last_offset_delta}")
        if batch.is_control:
            raise _corrupt(f"{where} is a control batch, which clients may not write")
        if batch.producer_id != NO_PRODUCER_ID and batch.base_sequence < 0:
            raise _corrupt(f"{where} has producer id {batch.producer_id} but no base sequence")
        if batch.timestamp_type == 1:
            # Kafka's validateTimestamp refuses each of its records for it
            raise RecordError(ErrorCode.INVALID_TIMESTAMP, f"{where} has the LogAppendTime type set; only brokers set it",
                              tuple((index, "Producer should not set timestamp type to LogAppendTime.")
                                    for index in range(batch.record_count)))
        section = _records_section(out, batch)
        batch_max = None if _check_records is None else _check_records(
            section, batch.record_count, batch.base_timestamp, not log_append_time, earliest, latest)
        if batch_max is None:  # the records' checks in Python: they raise the error, if any
            batch_max = _records_max_timestamp(section, batch, not log_append_time, earliest, latest, now_ms)
        position = batch.position
        last_offset = offset + batch.last_offset_delta
        _INT64.pack_into(out, position, offset)
        _INT32.pack_into(out, position + _LEADER_EPOCH_POSITION, leader_epoch)
        attributes = batch.attributes
        if log_append_time:
            attributes |= _TIMESTAMP_TYPE_BIT
            batch_max = now_ms
        if attributes != batch.attributes or batch_max != batch.max_timestamp:
            _ATTRIBUTES.pack_into(out, position + _CRC_START, attributes)
            _INT64.pack_into(out, position + _MAX_TIMESTAMP_POSITION, batch_max)
            _UINT32.pack_into(out, position + _CRC_POSITION, crc32c(memoryview(out)[position + _CRC_START : position + batch.size]))
        if first_timestamp is None:
            first_timestamp = batch_max
        if batch_max > max_timestamp:
            max_timestamp, offset_of_max = batch_max, last_offset
        elif batch_max < 0 and first_untimed < 0:
            first_untimed = last_offset
        if batch.producer_id != NO_PRODUCER_ID:
            producers.append(ProducerBatch(batch.producer_id, batch.producer_epoch, batch.base_sequence, offset,
                                           last_offset, batch_max, batch.is_transactional, False))
        offset = last_offset + 1
    return AssignedBatches(out, offset, max_timestamp, offset_of_max, first_timestamp, first_untimed, tuple(producers))


def recompressed(buf, codec: int, max_message_bytes: int) -> bytearray:
    """``assign_batches``' batches with those of another codec rebuilt in ``codec``: a topic's
    ``compression.type`` applied, as Kafka 2.8's LogValidator does when the target codec is
    not the producer's (``buildRecordsAndAssignOffsets``: same offsets, timestamps, headers,
    producer fields and epoch). A rebuilt batch over ``max_message_bytes`` is
    MESSAGE_TOO_LARGE (Kafka's RecordTooLargeException after recompression)."""
    out = bytearray()
    for batch in iter_batches(buf):
        if batch.codec == codec:
            out += memoryview(buf)[batch.position : batch.position + batch.size]
            continue
        records = batch_records(buf, batch)
        rebuilt = build_record_batch(
            [(r.key, r.value, r.timestamp, r.headers) for r in records], codec=Codec(codec),
            base_offset=batch.base_offset, timestamp_type=batch.timestamp_type,
            partition_leader_epoch=batch.partition_leader_epoch, producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
            transactional=batch.is_transactional,
            offset_deltas=[r.offset - batch.base_offset for r in records], last_offset_delta=batch.last_offset_delta,
        )
        if len(rebuilt) > max_message_bytes:
            raise RecordError(ErrorCode.MESSAGE_TOO_LARGE,
                              f"record batch at offset {batch.base_offset} recompressed to {len(rebuilt)} bytes "
                              f"exceeds max.message.bytes {max_message_bytes}")
        out += rebuilt
    return out


def _records_max_timestamp(section: memoryview, batch: RecordBatch, check_timestamps: bool, earliest: int,
                           latest: int, now_ms: int) -> int:
    """The largest timestamp of a batch's records (-1 for none), each parsed and checked as
    ``assign_batches`` says; ``_records.check_records`` is the same check in C, which returns
    None where this raises (so this runs then, to say why)."""
    where = f"record batch at byte {batch.position}"
    batch_max = -1
    out_of_range = []
    for index, (offset_delta, timestamp_delta, _, _, _) in enumerate(_parse_records(section, batch)):
        if offset_delta != index:
            raise _corrupt(f"{where} has record {index} at offset delta {offset_delta}")
        timestamp = _timestamp(batch, timestamp_delta)
        if check_timestamps and timestamp != -1 and not earliest <= timestamp <= latest:
            out_of_range.append((index, f"Timestamp {timestamp} of message with offset {index} is out of range. "
                                        f"The timestamp should be within [{earliest}, {latest}]"))
        if timestamp > batch_max:
            batch_max = timestamp
    if out_of_range:  # every record out of range is named, as Kafka 2.8's processRecordErrors does
        raise RecordError(ErrorCode.INVALID_TIMESTAMP,
                          "One or more records have been rejected due to invalid timestamp "
                          f"(message.timestamp.difference.max.ms around {now_ms})", tuple(out_of_range))
    return batch_max


def _whole_batches(buf, end: int) -> Iterator[tuple[int, int]]:
    """``(position, base offset)`` of each magic 2 batch among the whole, checked entries in
    ``buf[:end]`` (the magic 0/1 entries a mixed set may hold are passed over)."""
    position = 0
    while position < end:
        offset, size = _OFFSET_AND_SIZE.unpack_from(buf, position)
        if buf[position + MAGIC_POSITION] == RECORD_BATCH_MAGIC:
            yield position, offset
        position += _LOG_OVERHEAD + size


def producer_batches(buf, end: int) -> tuple[ProducerBatch, ...]:
    """The batches with a producer id among the whole, checked entries in ``buf[:end]`` (a
    follower's append: it builds producer state from what the leader wrote)."""
    found = []
    for position, offset in _whole_batches(buf, end):
        producer_id, epoch, base_sequence = _PRODUCER_FIELDS.unpack_from(buf, position + _PRODUCER_POSITION)
        if producer_id != NO_PRODUCER_ID:
            attributes, last_offset_delta, _, max_timestamp = _ATTRIBUTES_AND_HEAD.unpack_from(buf, position + _CRC_START)
            marker = None
            if attributes & _CONTROL_BIT:
                size = _LOG_OVERHEAD + _INT32.unpack_from(buf, position + 8)[0]
                marker = end_txn_marker(memoryview(buf)[position : position + size])
            found.append(ProducerBatch(producer_id, epoch, base_sequence, offset, offset + last_offset_delta,
                                       max_timestamp, bool(attributes & _TRANSACTIONAL_BIT),
                                       bool(attributes & _CONTROL_BIT), marker))
    return tuple(found)


def leader_epoch_starts(buf, end: int) -> tuple[tuple[int, int], ...]:
    """``(partition leader epoch, base offset)`` of each batch among the whole, checked entries
    in ``buf[:end]`` whose epoch is above every earlier batch's: where the leader's epochs start
    in a fetched set (a follower records them, as Kafka's Log.append assigns each batch's epoch
    to the epoch cache). Batches without an epoch (-1) are passed over."""
    starts: list[tuple[int, int]] = []
    for position, offset in _whole_batches(buf, end):
        (epoch,) = _INT32.unpack_from(buf, position + _LEADER_EPOCH_POSITION)
        if epoch >= 0 and (not starts or epoch > starts[-1][0]):
            starts.append((epoch, offset))
    return tuple(starts)


def uses_zstd(buf) -> bool:
    """Whether a produced set holds a zstd-compressed batch (header bytes only: the set is
    validated on append)."""
    position = 0
    length = len(buf)
    while length - position > _CRC_START + 1:
        if buf[position + MAGIC_POSITION] == RECORD_BATCH_MAGIC and buf[position + _CRC_START + 1] & _CODEC_MASK == _ZSTD:
            return True
        position += _LOG_OVERHEAD + max(_INT32.unpack_from(buf, position + 8)[0], 0)
    return False


def _zigzag_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    raw &= 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)


def build_record_batch(
    records, *, codec: Codec = Codec.NONE, base_offset: int = 0, timestamp_type: int = 0,
    partition_leader_epoch: int = -1, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
    base_sequence: int = -1, transactional: bool = False, control: bool = False,
    offset_deltas: list[int] | None = None, last_offset_delta: int | None = None,
) -> bytearray:
    """One magic 2 batch of ``(key, value, timestamp, headers)`` records, as a producer (or
    the broker, converting older messages) writes it: offset deltas 0..n-1, baseTimestamp the
    first record's, maxTimestamp the largest (-1 for none), CRC-32C over attributes..end.
    ``headers`` are ``(str key, bytes value or None)`` pairs. At least one record.

    The log cleaner rewrites a batch with what survives of it: ``offset_deltas`` then gives
    each record's, and ``last_offset_delta`` the batch's (the original's, which keeps the
    producer's last sequence where it was, as Kafka 2.8's ``overrideLastOffset``)."""
    section = bytearray()
    base_timestamp = None
    max_timestamp = -1
    count = 0
    for count, (key, value, timestamp, headers) in enumerate(records, 1):
        if base_timestamp is None:
            base_timestamp = timestamp
        max_timestamp = max(max_timestamp, timestamp)
        append_record(section, timestamp - base_timestamp, count - 1 if offset_deltas is None else offset_deltas[count - 1],
                      key, value, headers)
    if not count:
        raise ValueError("a record batch holds at least one record")
    return batch_of_section(
        section, count, base_timestamp, max_timestamp, codec=codec, base_offset=base_offset,
        timestamp_type=timestamp_type, partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, transactional=transactional, control=control,
        last_offset_delta=last_offset_delta)


def append_record(section: bytearray, timestamp_delta: int, offset_delta: int, key: bytes | None,
                  value: bytes | None, headers) -> None:
    """One record, its length first, at the end of an uncompressed records ``section``."""
    body = bytearray(b"\x00")
    _zigzag_varint(body, timestamp_delta)
    _zigzag_varint(body, offset_delta)
    for field in (key, value):
        _zigzag_varint(body, -1 if field is None else len(field))
        if field is not None:
            body += field
    _zigzag_varint(body, len(headers))
    for header_key, header_value in headers:
        encoded = header_key.encode()
        _zigzag_varint(body, len(encoded))
        body += encoded
        _zigzag_varint(body, -1 if header_value is None else len(header_value))
        if header_value is not None:
            body += header_value
    _zigzag_varint(section, len(body))
    section += body


def batch_of_section(
    section, count: int, base_timestamp: int, max_timestamp: int, *, codec: Codec = Codec.NONE,
    base_offset: int = 0, timestamp_type: int = 0, partition_leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1, base_sequence: int = -1,
    transactional: bool = False, control: bool = False, last_offset_delta: int | None = None,
) -> bytearray:
    """The batch of ``count`` records whose uncompressed records section is ``section``,
    compressed with ``codec``, its header filled in and its CRC-32C computed (see
    ``build_record_batch``)."""
    if codec != Codec.NONE:
        section = compress(Codec(codec), bytes(section), magic=RECORD_BATCH_MAGIC)
    attributes = (codec | (_TIMESTAMP_TYPE_BIT if timestamp_type == 1 else 0) | (_TRANSACTIONAL_BIT if transactional else 0)
                  | (_CONTROL_BIT if control else 0))
    out = bytearray(_HEADER.pack(
        base_offset, BATCH_OVERHEAD - _LOG_OVERHEAD + len(section), partition_leader_epoch, RECORD_BATCH_MAGIC, 0,
        attributes, count - 1 if last_offset_delta is None else last_offset_delta, base_timestamp, max_timestamp,
        producer_id, producer_epoch, base_sequence, count,
    ))
    out += section
    _UINT32.pack_into(out, _CRC_POSITION, crc32c(memoryview(out)[_CRC_START:]))
    return out


# A control record's key is Kafka's ControlRecordType (version 0, then the type), a transaction
# marker's value its EndTransactionMarker (version 0, then the coordinator's epoch).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


def build_end_txn_marker(*, commit: bool, coordinator_epoch: int, producer_id: int, producer_epoch: int,
                         base_offset: int, timestamp: int, partition_leader_epoch: int) -> bytearray:
    """The control batch a transaction coordinator has a partition's leader append to end a
    producer's transaction there, as Kafka's ``MemoryRecords.withEndTransactionMarker`` builds
    it: transactional and control, uncompressed, CreateTime, no sequence, one record."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return build_record_batch([(key, value, timestamp, ())], base_offset=base_offset,
                              partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
                              producer_epoch=producer_epoch, transactional=True, control=True)


def batch_header(batch) -> RecordBatch:
    """The header of a stored batch (its bytes from its base offset to its end), not checked
    again: what a reader of the log needs of a batch it already knows whole."""
    base_offset, _, leader_epoch, _, _, *fields = _HEADER.unpack_from(batch)
    return RecordBatch(base_offset, 0, len(batch), leader_epoch, *fields)


def end_txn_marker(batch) -> EndTxnMarker | None:
    """The transaction marker of the control batch ``batch`` (its bytes, from its base offset
    to its end; written by a leader, so its CRC is not checked again): None when it holds no
    record (the cleaner removed it with its transaction) or a control record of another type.
    CORRUPT_MESSAGE for a key or value too short to be one (Kafka's ControlRecordType.parse
    and EndTransactionMarker.deserialize)."""
    header = batch_header(batch)
    if header.record_count < 1:
        return None
    _, timestamp_delta, key, value, _ = _parse_records(_records_section(batch, header), header)[0]
    if key is None or len(key) < _CONTROL_KEY.size:
        raise _corrupt(f"control record at offset {header.base_offset} has a key of {0 if key is None else len(key)} "
                       "bytes")
    key_version, record_type = _CONTROL_KEY.unpack_from(key)
    if key_version < 0 or record_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise _corrupt(f"transaction marker at offset {header.base_offset} has a value of "
                       f"{0 if value is None else len(value)} bytes")
    _, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    timestamp = header.max_timestamp if header.timestamp_type == 1 else _timestamp(header, timestamp_delta)
    return EndTxnMarker(record_type == CONTROL_COMMIT, coordinator_epoch, timestamp)


def empty_batch(batch: RecordBatch) -> bytearray:
    """``batch`` with no records, as Kafka 2.8's log cleaner keeps a producer's last batch once
    compaction removed every record of it (``DefaultRecordBatch.writeEmptyHeader``): its base
    offset, last offset delta, producer fields, leader epoch, timestamp type, transactional
    and control bits and maxTimestamp stay, so producer state rebuilt from the log still
    knows the producer's last sequence; no codec, baseTimestamp -1, recordCount 0."""
    attributes = batch.attributes & (_TIMESTAMP_TYPE_BIT | _TRANSACTIONAL_BIT | _CONTROL_BIT)
    out = bytearray(_HEADER.pack(
        batch.base_offset, BATCH_OVERHEAD - _LOG_OVERHEAD, batch.partition_leader_epoch, RECORD_BATCH_MAGIC, 0,
        attributes, batch.last_offset_delta, -1, batch.max_timestamp, batch.producer_id, batch.producer_epoch,
        batch.base_sequence, 0,
    ))
    _UINT32.pack_into(out, _CRC_POSITION, crc32c(memoryview(out)[_CRC_START:]))
    return out
