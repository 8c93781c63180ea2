"""Magic 2 record batches: reading them, and converting them to magic 1 on the leader path,
with batches built by kafka-python's and aiokafka's own DefaultRecordBatchBuilder."""

import struct

import crcmod.predefined
import pytest
from aiokafka.record import default_records as aiokafka_records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from minikafka.protocol.compression import Codec
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import BATCH_OVERHEAD, batch_records, iter_batches, magic_1_conversion
from minikafka.protocol.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    ValidationConfig,
    build_message_set,
    iter_entries,
    iter_records,
    validate_and_assign,
    validate_given_offsets,
)

NOW = 1_700_000_000_000
# Compressible values, so every builder keeps the codec (they fall back to none otherwise).
RECORDS = [(b"key-%d" % i if i % 3 else None, b"value %d " % i * (i + 4), NOW - 500 + i * 7) for i in range(20)]
RECORDS[5] = (b"", None, NOW - 1000)  # empty key, null value, earlier than the first
RECORDS[9] = (None, b"", NOW + 100)  # empty value
CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]
BUILDERS = {
    "kafka-python": KafkaPythonBuilder,
    "aiokafka": aiokafka_records.DefaultRecordBatchBuilder,
    "aiokafka-py": aiokafka_records._DefaultRecordBatchBuilderPy,
}
CONFIG = ValidationConfig(magic=1)
crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def build_batch(records=RECORDS, *, codec=Codec.NONE, builder="kafka-python", headers=(),
                transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1) -> bytes:
    batch = BUILDERS[builder](
        magic=2, compression_type=int(codec), is_transactional=int(transactional), producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 20,
    )
    for offset, (key, value, timestamp) in enumerate(records):
        assert batch.append(offset, timestamp=timestamp, key=key, value=value, headers=list(headers)) is not None
    data = bytes(batch.build())
    assert data[16] == 2 and struct.unpack_from(">h", data, 21)[0] & 7 == codec
    return data


def patched(batch: bytes, position: int, fmt: str, value, *, fix_crc: bool = True) -> bytes:
    """``batch`` with one header field overwritten and (by default) its CRC-32C fixed."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, position, value)
    if fix_crc:
        struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def with_attributes(batch: bytes, set_bits: int) -> bytes:
    (attributes,) = struct.unpack_from(">h", batch, 21)
    return patched(batch, 21, ">h", attributes | set_bits)


def refused(data: bytes, config: ValidationConfig = CONFIG) -> ErrorCode:
    with pytest.raises(RecordError) as caught:
        validate_and_assign(data, 0, NOW, config)
    return caught.value.code


@pytest.mark.parametrize("builder", BUILDERS)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_converted_batch_reads_back_with_assigned_offsets(builder, codec):
    validated = validate_and_assign(build_batch(codec=codec, builder=builder), 1000, NOW, CONFIG)

    records = list(iter_records(validated.buffer))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (1000 + i, key, value, timestamp) for i, (key, value, timestamp) in enumerate(RECORDS)
    ]
    assert {(r.magic, r.timestamp_type) for r in records} == {(1, CREATE_TIME)}
    assert (validated.first_offset, validated.last_offset, validated.record_count) == (1000, 1019, 20)
    assert validated.max_timestamp == max(t for _, _, t in RECORDS)
    entries = list(iter_entries(validated.buffer))
    if codec == Codec.NONE:
        assert len(entries) == 20 and all(e.codec == Codec.NONE for e in entries)
    else:
        [wrapper] = entries
        assert (wrapper.codec, wrapper.offset, wrapper.magic) == (codec, 1019, 1)


def test_converted_wrapper_is_what_a_magic_1_producer_sends():
    """Same codec, inner offsets 0..n-1: a conversion differs from a magic 1 producer's
    wrapper only in its offset, assigned like any other."""
    converted = validate_and_assign(build_batch(codec=Codec.LZ4), 0, NOW, CONFIG).buffer
    native = validate_and_assign(build_message_set(RECORDS, magic=1, codec=Codec.LZ4), 0, NOW, CONFIG).buffer
    assert converted == native


@pytest.mark.parametrize("timestamp_type", [CREATE_TIME, LOG_APPEND_TIME])
def test_converted_set_validates_as_the_magic_1_set_a_producer_would_send(timestamp_type):
    """Every field of the result, for wrappers at every position of the set (the conversion
    hands their inner sets on rather than have them decompressed)."""
    parts = [(RECORDS[:7], Codec.GZIP), (RECORDS[7:9], Codec.NONE), (RECORDS[9:13], Codec.SNAPPY),
             (RECORDS[13:], Codec.LZ4)]
    config = ValidationConfig(magic=1, timestamp_type=timestamp_type)
    magic_2 = b"".join(build_batch(part, codec=codec) for part, codec in parts)
    magic_1 = b"".join(build_message_set(part, magic=1, codec=codec) for part, codec in parts)
    assert validate_and_assign(magic_2, 7, NOW, config) == validate_and_assign(magic_1, 7, NOW, config)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_conversion_leaves_the_request_as_it_was(codec):
    # Offsets are assigned in the conversion's own buffer; the log validates the same request
    # again when it rolls a segment, and must get the same set.
    data = build_batch(codec=codec)
    before = bytes(data)
    first = validate_and_assign(data, 0, NOW, CONFIG)
    again = validate_and_assign(data, 0, NOW, CONFIG)
    assert data == before and first == again and first.buffer is not again.buffer


def test_several_batches_of_different_codecs_convert_in_order():
    first = build_batch(RECORDS[:7], codec=Codec.GZIP)
    second = build_batch(RECORDS[7:12], builder="aiokafka")
    third = build_batch(RECORDS[12:], codec=Codec.SNAPPY, builder="aiokafka-py")
    validated = validate_and_assign(first + second + third, 50, NOW, CONFIG)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(validated.buffer)] == [
        (50 + i, key, value, timestamp) for i, (key, value, timestamp) in enumerate(RECORDS)
    ]
    assert [entry.offset for entry in iter_entries(validated.buffer)] == [56] + list(range(57, 62)) + [69]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4], ids=lambda c: c.name.lower())
def test_log_append_time_topic_stamps_converted_records(codec):
    config = ValidationConfig(magic=1, timestamp_type=LOG_APPEND_TIME)
    validated = validate_and_assign(build_batch(codec=codec), 0, NOW, config)
    assert validated.log_append_time == NOW
    assert {(r.timestamp, r.timestamp_type) for r in iter_records(validated.buffer)} == {(NOW, LOG_APPEND_TIME)}


def test_create_time_range_is_enforced_after_conversion():
    config = ValidationConfig(magic=1, max_timestamp_difference_ms=600)
    assert refused(build_batch(codec=Codec.GZIP), config) == ErrorCode.INVALID_TIMESTAMP
    assert validate_and_assign(build_batch(RECORDS[6:9]), 0, NOW, config).record_count == 3


def test_producer_set_log_append_time_is_refused_as_for_magic_1():
    assert refused(with_attributes(build_batch(), 0x08)) == ErrorCode.INVALID_TIMESTAMP


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_reader_gives_headers_offsets_and_timestamps(codec):
    headers = [("trace", b"abc"), ("empty", None), ("\u00e9t\u00e9", b"")]
    data = build_batch(RECORDS[:4], codec=codec, headers=headers)
    data = patched(data, 0, ">q", 300)  # a base offset as a broker stores it
    [batch] = iter_batches(data)
    assert (batch.base_offset, batch.record_count, batch.last_offset_delta, batch.codec) == (300, 4, 3, codec)
    assert (batch.base_timestamp, batch.max_timestamp) == (RECORDS[0][2], RECORDS[3][2])
    records = batch_records(data, batch)
    assert [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.headers) for r in records] == [
        (300 + i, key, value, timestamp, CREATE_TIME, tuple(headers))
        for i, (key, value, timestamp) in enumerate(RECORDS[:4])
    ]


def test_reader_gives_max_timestamp_under_log_append_time():
    data = with_attributes(build_batch(RECORDS[:3]), 0x08)
    [batch] = iter_batches(data)
    assert {(r.timestamp, r.timestamp_type) for r in batch_records(data, batch)} == {(RECORDS[2][2], LOG_APPEND_TIME)}


def test_record_with_headers_is_refused():
    assert refused(build_batch(headers=[("h", b"v")])) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert refused(build_batch(codec=Codec.LZ4, headers=[("h", None)])) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


@pytest.mark.parametrize("builder", BUILDERS)
def test_idempotent_and_transactional_batches_are_refused(builder):
    idempotent = build_batch(builder=builder, producer_id=7, producer_epoch=0, base_sequence=0)
    transactional = build_batch(builder=builder, transactional=True, producer_id=7, producer_epoch=0, base_sequence=0)
    assert refused(idempotent) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert refused(transactional) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert refused(with_attributes(build_batch(builder=builder), 0x10)) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_control_batch_is_refused():
    assert refused(with_attributes(build_batch(RECORDS[:1]), 0x20)) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_zstd_is_refused_as_unsupported_compression():
    # Magic 1 cannot hold zstd: the codec bits alone decide, before any decompression.
    assert refused(with_attributes(build_batch(), 4)) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_unknown_codec_is_corrupt():
    assert refused(with_attributes(build_batch(), 5)) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_bad_crc_is_corrupt(codec):
    data = bytearray(build_batch(codec=codec))
    data[-1] ^= 0x40
    assert refused(bytes(data)) == ErrorCode.CORRUPT_MESSAGE
    assert refused(patched(build_batch(codec=codec), 17, ">I", 0, fix_crc=False)) == ErrorCode.CORRUPT_MESSAGE


def test_set_mixing_magic_2_and_magic_1_is_corrupt():
    magic_1 = build_message_set(RECORDS[:2], magic=1)
    magic_2 = build_batch(RECORDS[2:4])
    assert refused(magic_2 + magic_1) == ErrorCode.CORRUPT_MESSAGE
    assert refused(magic_1 + magic_2) == ErrorCode.CORRUPT_MESSAGE
    assert refused(magic_2 + build_message_set(RECORDS[:1], magic=0)) == ErrorCode.CORRUPT_MESSAGE


def test_max_message_bytes_applies_to_each_batch_as_received():
    data = build_batch(RECORDS[:1])
    assert validate_and_assign(data, 0, NOW, ValidationConfig(magic=1, max_message_bytes=len(data))).record_count == 1
    assert refused(data, ValidationConfig(magic=1, max_message_bytes=len(data) - 1)) == ErrorCode.MESSAGE_TOO_LARGE
    # Its CRC is never looked at: the size alone refuses it, as in Kafka's Log.append.
    assert refused(patched(data, 17, ">I", 0, fix_crc=False), ValidationConfig(magic=1, max_message_bytes=20)) == (
        ErrorCode.MESSAGE_TOO_LARGE
    )
    two = build_batch(RECORDS[:1]) + build_batch(RECORDS[1:2])
    assert refused(two, ValidationConfig(magic=1, max_message_bytes=len(data))) == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize(
    "field, fmt, value",
    [
        (57, ">i", 21),  # recordCount above what the section holds
        (57, ">i", 19),  # below: bytes left over
        (57, ">i", 0),
        (57, ">i", -1),
        (8, ">i", 10),  # batchLength shorter than the header
    ],
)
def test_inconsistent_header_is_corrupt(field, fmt, value):
    assert refused(patched(build_batch(), field, fmt, value)) == ErrorCode.CORRUPT_MESSAGE


def test_truncated_set_is_corrupt():
    data = build_batch()
    for cut in (1, 20, len(data) - BATCH_OVERHEAD, len(data) - 1):
        assert refused(data[:cut]) == ErrorCode.CORRUPT_MESSAGE
    assert refused(data + data[:30]) == ErrorCode.CORRUPT_MESSAGE


def test_follower_path_keeps_the_leaders_batches():
    data = bytes(patched(build_batch(), 0, ">q", 10, fix_crc=False))
    validated = validate_given_offsets(data, 10, CONFIG)
    assert validated.buffer == data
    assert (validated.first_offset, validated.last_offset, validated.record_count) == (10, 10 + len(RECORDS) - 1, 1)
    with pytest.raises(RecordError) as caught:
        validate_given_offsets(data, 11, CONFIG)
    assert caught.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(RecordError) as caught:
        validate_given_offsets(patched(data, 40, ">B", data[40] ^ 1, fix_crc=False), 10, CONFIG)
    assert caught.value.code == ErrorCode.CORRUPT_MESSAGE


def _convert_or_refuse(data: bytes) -> None:
    """Every public entry point over ``data``: success, or RecordError, nothing else."""
    for attempt in (
        lambda: validate_and_assign(data, 0, NOW, CONFIG),
        lambda: list(magic_1_conversion(data, CONFIG.max_message_bytes)),
        lambda: [batch_records(data, batch) for batch in iter_batches(data)],
    ):
        try:
            attempt()
        except RecordError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=17, max_size=400))
def test_garbage_raises_only_record_error(garbage):
    _convert_or_refuse(garbage[:16] + b"\x02" + garbage[17:])


SAMPLES = {codec: build_batch(RECORDS[:6], codec=codec, headers=[("h", b"v")] if codec == Codec.NONE else ())
           for codec in CODECS}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(CODECS),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    st.booleans(),
)
def test_mutated_batches_raise_only_record_error(codec, mutations, fix_crc):
    """Byte flips anywhere; with the CRC-32C fixed afterwards they reach the record parser
    (and the decompressors) instead of stopping at the checksum."""
    data = bytearray(SAMPLES[codec])
    for position, byte in mutations:
        data[position % len(data)] = byte
    data[16] = 2
    if fix_crc and len(data) > 21:
        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    _convert_or_refuse(bytes(data))


@pytest.mark.parametrize("codec,target", [(Codec.GZIP, Codec.LZ4), (Codec.NONE, Codec.SNAPPY), (Codec.LZ4, Codec.NONE)])
def test_a_converted_batch_is_stored_in_the_topic_codec(codec, target):
    # Kafka 0.11+ converting a batch for a magic 1 log builds it in the target codec too
    validated = validate_and_assign(build_batch(codec=codec), 40, NOW, CONFIG._replace(codec=target))
    assert {(e.magic, e.codec) for e in iter_entries(validated.buffer)} == {(1, target)}
    assert [(r.offset, r.key, r.value) for r in iter_records(validated.buffer)] == [
        (40 + i, k, v) for i, (k, v, _) in enumerate(RECORDS)]
