"""Compression codecs of message sets and record batches: gzip, snappy, lz4 and (magic 2 only) zstd.

A compressed wrapper message carries, as its value, a whole inner message set compressed
with the codec named by the low three bits of its attributes. The byte formats:

* **gzip** (codec 1): an RFC 1952 gzip stream. Java producers write one member; readers
  accept several concatenated members.
* **snappy** (codec 2): the Java client and kafka-python write the *xerial* block framing::

      header   \\x82 S N A P P Y \\x00   (8 bytes)
               int32 version, int32 compatible-version   (both 1; never checked, some
               producers write them little-endian)
      blocks   [int32 compressed length][raw snappy block] ...   (each block <= 32 KiB raw)

  librdkafka (confluent-kafka, kcat; see tests/protocol/golden) and some Go clients send one
  raw snappy block with no framing. Reading accepts both; writing uses the xerial framing,
  which every client reads.
* **lz4** (codec 3): an LZ4 frame (magic ``04 22 4D 18``, FLG, BD, [content size], HC,
  blocks, end mark). Kafka before 0.10 computed the header checksum HC over the frame magic
  as well as the descriptor (KAFKA-3160), so magic 0 messages carry that wrong byte and
  magic 1 messages (KIP-57) the correct one. Reading magic 0 ignores HC, exactly as Kafka
  does; writing magic 0 produces the legacy byte so 0.8/0.9 clients can read it. Frames are
  written with independent 64 KiB blocks and neither content size nor content checksum,
  the subset every Kafka LZ4 reader accepts.
* **zstd** (codec 4, magic 2 only, KIP-110): one Zstandard frame, as the Java client writes it
  (zstd-jni's default level 3); librdkafka omits the content size, so decompression streams.

Bad compressed bytes raise ``RecordError(CORRUPT_MESSAGE)``: they arrive in produce
requests, and the partition answers with that code. A payload that would inflate past
``MAX_DECOMPRESSED_BYTES`` raises ``RecordError(MESSAGE_TOO_LARGE)`` before the memory is
allocated (Kafka streams inner messages instead; we decompress whole sets).
"""

from __future__ import annotations

import enum
import struct
import zlib

# lz4, snappy, zstandard and xxhash are imported where they are used: a broker whose producers send
# uncompressed sets (or gzip) never loads them, and start-up is some 5 ms shorter.

from minikafka.protocol.errors import ErrorCode, RecordError


class Codec(enum.IntEnum):
    """Compression codec, as stored in the low three bits of a message's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# The codecs a magic 0/1 message set can carry: every one but zstd (KIP-110, magic 2 only).
MESSAGE_SET_CODECS = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_DICT_ID = 0x01
# Refuse inner sets that would inflate past this: a 1 MiB produce request must not make the
# broker allocate gigabytes. Real producers' batches are far smaller.
MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024
_GZIP_LEVEL = 6  # java.util.zip.Deflater's default, what Kafka's Java producer uses
_ZSTD_LEVEL = 3  # zstd's default, what Kafka's Java producer uses


def compress(codec: Codec, data: bytes, *, magic: int) -> bytes:
    """Compress an inner message set for a wrapper message of the given ``magic``."""
    if codec == Codec.GZIP:
        compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if codec == Codec.SNAPPY:
        return _xerial_compress(data)
    if codec == Codec.LZ4:
        import lz4.frame

        frame = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        if magic == 0:
            frame = _with_header_checksum(frame, legacy=True)
        return frame
    if codec == Codec.ZSTD:
        import zstandard

        return zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data)
    raise ValueError(f"not a compression codec: {codec!r}")


def decompress(codec: Codec, data: bytes, *, magic: int, max_size: int | None = None) -> bytes:
    """Decompress the value of a wrapper message of the given ``magic``.

    Raises ``RecordError(CORRUPT_MESSAGE)`` when ``data`` is not valid for ``codec``, and
    ``RecordError(MESSAGE_TOO_LARGE)`` when it would decompress to more than ``max_size``
    bytes (default ``MAX_DECOMPRESSED_BYTES``), found out before that much is allocated.
    """
    limit = MAX_DECOMPRESSED_BYTES if max_size is None else max_size
    try:
        if codec == Codec.GZIP:
            return _gunzip(data, limit)
        if codec == Codec.SNAPPY:
            if bytes(data[:8]) == XERIAL_MAGIC:
                return _xerial_decompress(data, limit)
            return _snappy_block(data, limit)
        if codec == Codec.LZ4:
            if magic == 0:
                data = _with_header_checksum(bytes(data), legacy=False)
            return _lz4_decompress(data, limit)
        if codec == Codec.ZSTD:
            return _zstd_decompress(data, limit)
    except RecordError:
        raise
    except Exception as exc:  # each library raises its own types for bad input
        raise RecordError(
            ErrorCode.CORRUPT_MESSAGE, f"cannot decompress {Codec(codec).name} payload: {exc}"
        ) from None
    raise ValueError(f"not a compression codec: {codec!r}")


def _too_large(limit: int) -> RecordError:
    return RecordError(
        ErrorCode.MESSAGE_TOO_LARGE, f"compressed message set decompresses to more than {limit} bytes"
    )


def _gunzip(data, limit: int) -> bytes:
    parts = []
    total = 0
    remaining = bytes(data)
    while True:
        member = zlib.decompressobj(31)
        part = member.decompress(remaining, limit + 1 - total)
        total += len(part)
        if total > limit:
            raise _too_large(limit)
        if not member.eof:
            raise RecordError(ErrorCode.CORRUPT_MESSAGE, "gzip payload is truncated")
        parts.append(part)
        remaining = member.unused_data
        # Like gzip.GzipFile, accept further members and trailing zero padding.
        if not remaining.strip(b"\x00"):
            return b"".join(parts)


def _lz4_decompress(data, limit: int) -> bytes:
    # lz4's chunk function, not its LZ4FrameDecompressor, which copies a memoryview (the
    # produced batch, a view of the request) into bytes before it starts.
    from lz4.frame import create_decompression_context, decompress_chunk

    context = create_decompression_context()
    rest = memoryview(data)
    # lz4 allocates max_length up front: asking for the whole limit at once (128 MiB) doubles
    # the cost of decompressing a producer's batch. Start near the likely size, then go on in
    # growing steps while the frame has more.
    step = min(limit + 1, max(1 << 20, 8 * len(rest)))
    parts = []
    total = 0
    while True:
        part, read, end_of_frame = decompress_chunk(context, rest, max_length=min(limit + 1 - total, max(step, total)))
        parts.append(part)
        total += len(part)
        if total > limit:
            raise _too_large(limit)
        if end_of_frame:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        if not part and not read:  # no progress (every byte taken): the frame stops short
            raise RecordError(ErrorCode.CORRUPT_MESSAGE, "LZ4 frame is truncated")
        rest = rest[read:]


def _zstd_decompress(data, limit: int) -> bytes:
    import zstandard

    # A stream reader, not decompress(): a frame need not declare its content size
    # (librdkafka's do not), and reading in bounded steps stops a bomb at ``limit``.
    parts = []
    total = 0
    with zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True) as reader:
        for part in iter(lambda: reader.read(1 << 20), b""):
            total += len(part)
            if total > limit:
                raise _too_large(limit)
            parts.append(part)
    if not parts:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE, "zstd payload is empty")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _snappy_block(block, limit: int) -> bytes:
    """One raw snappy block, its declared length (a leading varint) checked first."""
    import snappy

    declared = 0
    for index in range(min(5, len(block))):
        byte = block[index]
        declared |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            break
    if declared > limit:
        raise _too_large(limit)
    return snappy.decompress(bytes(block))


def _xerial_compress(data: bytes) -> bytes:
    import snappy

    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(data), _XERIAL_BLOCK_SIZE):
        block = snappy.compress(bytes(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(data: bytes, limit: int) -> bytes:
    view = memoryview(data)
    position = len(_XERIAL_HEADER)
    if len(view) < position:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE, "xerial snappy header is truncated")
    parts = []
    total = 0
    while position < len(view):
        if len(view) - position < 4:
            raise RecordError(ErrorCode.CORRUPT_MESSAGE, "xerial snappy block length truncated")
        (length,) = _INT32.unpack_from(view, position)
        position += 4
        if length < 0 or position + length > len(view):
            raise RecordError(
                ErrorCode.CORRUPT_MESSAGE, f"xerial snappy block of {length} bytes overruns data"
            )
        block = _snappy_block(view[position : position + length], limit - total)
        total += len(block)
        parts.append(block)
        position += length
    return b"".join(parts)


def _with_header_checksum(frame: bytes, *, legacy: bool) -> bytes:
    """Return ``frame`` with its header checksum byte replaced.

    HC is the second byte of xxh32 over the frame descriptor (FLG .. last descriptor field);
    Kafka's legacy variant hashes the four magic bytes too.
    """
    import xxhash

    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE, "not an LZ4 frame")
    flg = frame[4]
    hc_position = 6
    if flg & _LZ4_FLG_CONTENT_SIZE:
        hc_position += 8
    if flg & _LZ4_FLG_DICT_ID:
        hc_position += 4
    if len(frame) <= hc_position:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE, "LZ4 frame header is truncated")
    hashed = frame[0 if legacy else 4 : hc_position]
    checksum = (xxhash.xxh32_intdigest(hashed) >> 8) & 0xFF
    return frame[:hc_position] + bytes((checksum,)) + frame[hc_position + 1 :]
