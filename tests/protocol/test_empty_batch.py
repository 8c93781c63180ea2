"""A batch the log cleaner emptied (Kafka 2.8's ``DefaultRecordBatch.writeEmptyHeader``): what
each reader of stored data makes of it, and that produce still refuses one."""

from __future__ import annotations

import pytest
from kafka.record.memory_records import MemoryRecords

from minikafka.export.segment_reader import read_segment
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import BATCH_OVERHEAD, build_record_batch, empty_batch, iter_batches
from minikafka.protocol.records import (Codec, ValidationConfig, down_converted, iter_entries, iter_records,
                                        validate_and_assign, validate_given_offsets)

T0 = 1_700_000_000_000


@pytest.fixture(scope="module", autouse=True)
def _both_records_implementations(records_implementation):
    return records_implementation


def stored_batch(base_offset: int, *keys: bytes, codec: Codec = Codec.NONE, **producer) -> bytearray:
    return build_record_batch([(key, b"v", T0 + i, ()) for i, key in enumerate(keys)], codec=codec,
                              base_offset=base_offset, partition_leader_epoch=3, **producer)


@pytest.fixture
def log_bytes() -> bytes:
    """A batch of producer 9 emptied by the cleaner at offsets 0-2, then a live batch at 3."""
    original = stored_batch(0, b"a", b"b", b"c", codec=Codec.GZIP, producer_id=9, producer_epoch=1, base_sequence=4)
    [batch] = iter_batches(original)
    return bytes(empty_batch(batch) + stored_batch(3, b"d"))


def test_the_empty_batch_keeps_offsets_producer_fields_and_max_timestamp(log_bytes):
    empty, live = iter_batches(log_bytes, allow_empty=True)
    assert (empty.base_offset, empty.last_offset_delta, empty.record_count, empty.codec, empty.size,
            empty.partition_leader_epoch, empty.producer_id, empty.producer_epoch, empty.base_sequence,
            empty.base_timestamp, empty.max_timestamp) == (0, 2, 0, 0, BATCH_OVERHEAD, 3, 9, 1, 4, -1, T0 + 2)
    # kafka-python reads it as Kafka's clients do: a valid batch with no records.
    records = MemoryRecords(log_bytes)
    first = records.next_batch()
    assert first.validate_crc() and list(first) == [] and first.base_sequence == 4
    assert [r.offset for r in records.next_batch()] == [3]


def test_readers_of_stored_data_pass_over_it(log_bytes, tmp_path):
    assert [(e.offset, e.size) for e in iter_entries(log_bytes)][0] == (2, BATCH_OVERHEAD)
    assert [r.offset for r in iter_records(log_bytes)] == [3]
    # Old consumers get nothing of it (Kafka's down-conversion writes no empty message set).
    assert [r.offset for r in iter_records(b"".join(down_converted([log_bytes], 1, 0)))] == [3]
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(log_bytes)
    assert [batch.column("offset").to_pylist() for batch in read_segment(segment, "t", 0)] == [[3]]


def test_a_follower_takes_it_with_its_producer_state(log_bytes):
    validated = validate_given_offsets(log_bytes, 0, ValidationConfig())
    assert (validated.first_offset, validated.last_offset, validated.buffer) == (0, 3, log_bytes)
    [producer] = validated.producer_batches
    assert (producer.producer_id, producer.base_sequence, producer.first_offset, producer.last_offset) == (9, 4, 0, 2)


def test_a_client_may_not_produce_one(log_bytes):
    empty = log_bytes[:BATCH_OVERHEAD]
    with pytest.raises(RecordError) as refused:
        validate_and_assign(empty, 0, T0, ValidationConfig())
    assert refused.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(RecordError) as refused:
        validate_and_assign(empty, 0, T0, ValidationConfig(magic=1))
    assert refused.value.code == ErrorCode.CORRUPT_MESSAGE
