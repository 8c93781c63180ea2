"""Codecs of magic 0/1 message sets, checked against kafka-python's codec functions and the
lz4 / snappy libraries themselves."""

import gzip
import struct
import tomllib
from pathlib import Path

import kafka.codec
import lz4.frame
import pytest
import snappy
from xxhash import xxh32_intdigest as xxh32
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.protocol import compression
from minikafka.protocol.compression import XERIAL_MAGIC, Codec, compress, decompress
from minikafka.protocol.errors import ErrorCode, RecordError

PAYLOAD = b"".join(b"message %d with some repeated text, " % i for i in range(5000))
CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4]


def test_xxhash_is_a_core_dependency():
    # LZ4 frame header checksums are XXH32: the maintained C package computes them, so a
    # plain `pip install minikafka` must bring it.
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("xxhash") for dep in project["dependencies"])
    assert not hasattr(compression, "xxh32")  # no second, hand-written XXH32 beside it


def test_header_checksums_agree_with_lz4_frames():
    for store_size in (False, True):
        frame = lz4.frame.compress(b"x" * 1000, store_size=store_size)
        header_end = 14 if store_size else 6
        assert frame[header_end] == (xxh32(frame[4:header_end]) >> 8) & 0xFF


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_round_trip(codec, magic):
    assert decompress(codec, compress(codec, PAYLOAD, magic=magic), magic=magic) == PAYLOAD
    assert decompress(codec, compress(codec, b"", magic=magic), magic=magic) == b""


@pytest.mark.parametrize("codec", CODECS)
@given(data=st.binary(max_size=3000))
@settings(max_examples=40, deadline=None)
def test_round_trip_arbitrary_bytes(codec, data):
    for magic in (0, 1):
        assert decompress(codec, compress(codec, data, magic=magic), magic=magic) == data


def test_gzip_is_a_standard_gzip_stream_and_multi_member_streams_are_read():
    assert gzip.decompress(compress(Codec.GZIP, PAYLOAD, magic=1)) == PAYLOAD
    two_members = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Codec.GZIP, two_members, magic=1) == b"first second"
    assert decompress(Codec.GZIP, kafka.codec.gzip_encode(PAYLOAD), magic=0) == PAYLOAD


def test_snappy_writes_xerial_framing_with_32k_blocks():
    data = compress(Codec.SNAPPY, PAYLOAD, magic=1)
    assert data[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", data[8:16]) == (1, 1)
    position, blocks, out = 16, 0, b""
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position)
        out += snappy.decompress(data[position + 4 : position + 4 + length])
        position += 4 + length
        blocks += 1
    assert out == PAYLOAD
    assert blocks == -(-len(PAYLOAD) // 32768)
    assert kafka.codec.snappy_decode(data) == PAYLOAD


def test_snappy_reads_raw_blocks_and_kafka_python_xerial():
    assert decompress(Codec.SNAPPY, snappy.compress(PAYLOAD), magic=1) == PAYLOAD
    assert decompress(Codec.SNAPPY, kafka.codec.snappy_encode(PAYLOAD, xerial_compatible=False), magic=0) == PAYLOAD
    assert decompress(Codec.SNAPPY, kafka.codec.snappy_encode(PAYLOAD), magic=1) == PAYLOAD


def test_snappy_xerial_with_little_endian_version_fields_is_read():
    # Some producers (redpanda) write version/compat little-endian; Kafka never checks them.
    data = compress(Codec.SNAPPY, PAYLOAD, magic=1)
    assert decompress(Codec.SNAPPY, data[:8] + struct.pack("<ii", 1, 1) + data[16:], magic=1) == PAYLOAD


def test_lz4_magic_1_frame_has_the_correct_header_checksum_and_is_standard():
    frame = compress(Codec.LZ4, PAYLOAD, magic=1)
    assert lz4.frame.decompress(frame) == PAYLOAD
    flg = frame[4]
    assert flg & 0x20, "blocks must be independent for Kafka's reader"
    assert not flg & 0x08 and not flg & 0x04, "no content size, no content checksum"
    assert frame[6] == (xxh32(frame[4:6]) >> 8) & 0xFF
    assert kafka.codec.lz4_decode(frame) == PAYLOAD


def test_lz4_magic_0_frame_has_kafkas_legacy_header_checksum():
    frame = compress(Codec.LZ4, PAYLOAD, magic=0)
    # KAFKA-3160: the header checksum was computed over the frame magic bytes as well.
    assert frame[6] == (xxh32(frame[0:6]) >> 8) & 0xFF
    assert frame[6] != (xxh32(frame[4:6]) >> 8) & 0xFF
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(frame)


def test_lz4_legacy_frames_interoperate_with_kafka_python():
    ours = compress(Codec.LZ4, PAYLOAD, magic=0)
    assert kafka.codec.lz4_decode_old_kafka(ours) == PAYLOAD
    theirs = kafka.codec.lz4_encode_old_kafka(PAYLOAD)
    assert decompress(Codec.LZ4, theirs, magic=0) == PAYLOAD


def test_lz4_magic_0_reader_ignores_the_header_checksum_like_kafka():
    # Kafka reads magic 0 lz4 ignoring HC, so frames with the correct byte and frames that
    # carry a content size are read too.
    assert decompress(Codec.LZ4, lz4.frame.compress(PAYLOAD), magic=0) == PAYLOAD
    assert decompress(Codec.LZ4, compress(Codec.LZ4, PAYLOAD, magic=1), magic=0) == PAYLOAD


def test_lz4_magic_1_reader_rejects_the_legacy_header_checksum():
    with pytest.raises(RecordError) as error:
        decompress(Codec.LZ4, compress(Codec.LZ4, PAYLOAD, magic=0), magic=1)
    assert error.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "garbage",
    [b"\xff", b"not compressed at all, just text", XERIAL_MAGIC + b"\x00\x00\x00\x01" * 2 + b"\x00\x00\x10\x00abc"],
)
def test_garbage_is_corrupt_message(codec, garbage):
    for magic in (0, 1):
        with pytest.raises(RecordError) as error:
            decompress(codec, garbage, magic=magic)
        assert error.value.code == ErrorCode.CORRUPT_MESSAGE


def test_truncated_compressed_payloads_are_corrupt_message():
    for codec in CODECS:
        data = compress(codec, PAYLOAD, magic=1)
        with pytest.raises(RecordError) as error:
            decompress(codec, data[: len(data) // 2], magic=1)
        assert error.value.code == ErrorCode.CORRUPT_MESSAGE


def test_unknown_codec_is_a_programming_error():
    with pytest.raises(ValueError):
        compress(Codec.NONE, b"x", magic=1)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_decompressed_size_is_capped_before_allocation(codec, magic):
    data = compress(codec, PAYLOAD, magic=magic)
    assert decompress(codec, data, magic=magic, max_size=len(PAYLOAD)) == PAYLOAD
    with pytest.raises(RecordError) as error:
        decompress(codec, data, magic=magic, max_size=len(PAYLOAD) - 1)
    assert error.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_raw_snappy_block_declaring_a_huge_length_is_refused_unread():
    bomb = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10  # declares 4 GiB - 1
    with pytest.raises(RecordError) as error:
        decompress(Codec.SNAPPY, bomb, magic=1)
    assert error.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_gzip_bomb_is_refused_by_the_default_cap(monkeypatch):
    import minikafka.protocol.compression

    monkeypatch.setattr(minikafka.protocol.compression, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    bomb = compress(Codec.GZIP, bytes(8 << 20), magic=1)
    assert len(bomb) < 20_000
    with pytest.raises(RecordError) as error:
        decompress(Codec.GZIP, bomb, magic=1)
    assert error.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_gzip_trailing_zero_padding_is_accepted_and_trailing_garbage_is_not():
    data = compress(Codec.GZIP, PAYLOAD, magic=1)
    assert decompress(Codec.GZIP, data + bytes(8), magic=1) == PAYLOAD
    with pytest.raises(RecordError) as error:
        decompress(Codec.GZIP, data + b"garbage", magic=1)
    assert error.value.code == ErrorCode.CORRUPT_MESSAGE
