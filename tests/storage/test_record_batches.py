"""Logs of magic 2: record batches stored as produced, magic 0/1 sets up-converted, mixed
segments after a format change, and the format of logs written before magic 2 was stored."""

from __future__ import annotations

import struct

import pytest

from minikafka.protocol.entries import crc_ok, iter_entries
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import build_record_batch
from minikafka.protocol.records import Codec, iter_records
from minikafka.storage import MAX_TIMESTAMP, Log, LogConfig
from minikafka.storage.log_manager import LogManager

from .conftest import MAGIC_1, START_MS, all_records, message_set, open_log

HEADERS = (("traceparent", b"00-abc-01"), ("empty", None))


def batch(count: int, timestamp: int, *, codec: Codec = Codec.NONE, tag: str = "", producer_id: int = -1) -> bytes:
    return bytes(build_record_batch(
        [(b"k", f"{tag}{i}".encode(), timestamp + i, HEADERS) for i in range(count)], codec=codec,
        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
    ))


@pytest.mark.parametrize("codec", list(Codec), ids=lambda c: c.name.lower())
def test_batches_are_stored_as_produced_with_offsets_and_the_leader_epoch(tmp_path, clock, codec):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(message_set(2, START_MS))  # magic 1, up-converted
    produced = batch(3, START_MS + 10, codec=codec)
    result = log.append_as_leader(produced, leader_epoch=5)
    assert (result.first_offset, result.last_offset, result.record_count) == (2, 4, 3)
    stored = log.read(2, 1 << 20).read_bytes()
    entries = list(iter_entries(stored))
    assert [(e.magic, e.offset, e.timestamp) for e in entries] == [(2, 4, START_MS + 12)]
    assert crc_ok(stored, entries[0])
    # Only baseOffset and the epoch changed, both outside the CRC: the records are the producer's bytes.
    assert struct.unpack_from(">qi", stored) == (2, len(produced) - 12)
    assert struct.unpack_from(">i", stored, 12)[0] == 5
    assert stored[21:] == produced[21:]
    records = all_records(log)
    assert [(r.offset, r.magic, r.value, r.headers) for r in records[2:]] == [
        (2 + i, 2, f"{i}".encode(), HEADERS) for i in range(3)]
    assert [(r.offset, r.magic, r.headers) for r in records[:2]] == [(0, 2, ()), (1, 2, ())]


def test_producer_ids_of_batches_are_reported_on_both_paths(tmp_path, clock):
    leader = open_log(tmp_path / "a-0", clock)
    validated = leader.append_as_leader(batch(2, START_MS, producer_id=42))
    assert validated.record_count == 2
    follower = open_log(tmp_path / "b-0", clock)
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    assert follower.read(0, 1 << 20).read_bytes() == leader.read(0, 1 << 20).read_bytes()
    assert follower.log_end_offset == 2


def test_log_append_time_is_set_in_place(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, message_timestamp_type="LogAppendTime")
    clock.set(START_MS + 5000)
    result = log.append_as_leader(batch(3, START_MS))
    assert result.log_append_time == START_MS + 5000
    stored = log.read(0, 1 << 20).read_bytes()
    assert crc_ok(stored, next(iter_entries(stored)))
    assert [r.timestamp for r in iter_records(stored)] == [START_MS + 5000] * 3


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4], ids=lambda c: c.name.lower())
def test_a_handed_over_writable_set_is_assigned_in_place_and_others_are_left_alone(tmp_path, clock, codec):
    """A produce request's own frame (``in_place``) gets its offsets, epoch and, under
    LogAppendTime, timestamps written where it lies, as Kafka's LogValidator writes into the
    request's buffer; a set not handed over, or read-only, is copied and stays as sent."""
    log = open_log(tmp_path / "t-0", clock, message_timestamp_type="LogAppendTime")
    clock.set(START_MS + 5000)
    produced = batch(3, START_MS, codec=codec)
    kept = bytearray(produced)
    log.append_as_leader(memoryview(kept), leader_epoch=4)
    assert kept == produced
    read_only = memoryview(produced)
    log.append_as_leader(read_only, leader_epoch=4, in_place=True)
    assert read_only == produced
    frame = bytearray(b"header" + produced)
    log.append_as_leader(memoryview(frame)[6:], leader_epoch=4, in_place=True)
    stored = log.read(0, 1 << 20).read_bytes()
    assert frame[6:] == stored[2 * len(produced):] and frame[:6] == b"header"
    assert struct.unpack_from(">q", frame, 6)[0] == 6 and struct.unpack_from(">i", frame, 6 + 12)[0] == 4
    assert [(r.offset, r.timestamp) for r in iter_records(stored)] == [(i, START_MS + 5000) for i in range(9)]
    assert all(crc_ok(stored, entry) for entry in iter_entries(stored))


def test_refused_batches_write_nothing(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, message_timestamp_difference_max_ms=1000)
    with pytest.raises(RecordError) as caught:
        log.append_as_leader(batch(2, START_MS - 5000))
    assert caught.value.code == ErrorCode.INVALID_TIMESTAMP
    corrupt = bytearray(batch(2, START_MS))
    corrupt[-1] ^= 1
    with pytest.raises(RecordError) as caught:
        log.append_as_leader(bytes(corrupt))
    assert caught.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0 and log.size_in_bytes == 0


def test_offset_for_timestamp_finds_a_record_inside_an_uncompressed_batch(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(batch(5, START_MS))
    assert log.offset_for_timestamp(START_MS + 2) == (2, START_MS + 2)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4], ids=lambda c: c.name.lower())
def test_a_clean_reopen_keeps_the_indexes_of_batches(tmp_path, clock, caplog, codec):
    # Index entries point at a batch by its last offset (as at a wrapper's), not its base
    directory = tmp_path / "t-0"
    settings = {"segment_bytes": 2000, "index_interval_bytes": 100}
    log = open_log(directory, clock, **settings)
    for i in range(40):
        log.append_as_leader(batch(4, START_MS + i, codec=codec, tag=f"{i}-"))
    assert len(log.segments()) > 2
    log.close()
    indexes = {path.name: path.read_bytes() for path in directory.glob("*index")}
    reopened = open_log(directory, clock, **settings)
    assert "rebuilding indexes" not in caplog.text
    assert reopened.log_end_offset == 160
    assert [r.offset for r in all_records(reopened, 57)][:3] == [57, 58, 59]
    reopened.close()
    assert {path.name: path.read_bytes() for path in directory.glob("*index")} == indexes


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP], ids=lambda c: c.name.lower())
def test_max_timestamp_is_the_first_record_carrying_it_not_the_batch_end(tmp_path, clock, codec):
    """KIP-734's MAX_TIMESTAMP answers the record (Kafka 3.8, KAFKA-16310; 3.0 answered the
    batch's last offset): a batch's maxTimestamp is its largest record's, not its last's."""
    log = open_log(tmp_path / "t-0", clock)
    records = [(b"k", b"v", START_MS + ts, ()) for ts in (5, 9, 2, 9, 1)]
    log.append_as_leader(bytes(build_record_batch(records, codec=codec)))
    log.roll()
    log.append_as_leader(bytes(build_record_batch(records[:2], codec=codec)))  # a tie, later: not it
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (1, START_MS + 9)
    # Below the log start offset (DeleteRecords) a record is gone for this lookup too.
    log.increment_log_start_offset(2)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (3, START_MS + 9)
    log.increment_log_start_offset(4)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (6, START_MS + 9)


def test_a_format_change_leaves_mixed_segments_that_recovery_and_readers_take(tmp_path, clock):
    directory = tmp_path / "t-0"
    old = open_log(directory, clock, segment_bytes=600, index_interval_bytes=1, **MAGIC_1)
    for i in range(3):
        old.append_as_leader(message_set(3, START_MS + i, tag=f"old{i}-"))
    old.close()
    new = open_log(directory, clock, segment_bytes=600, index_interval_bytes=1)
    for i in range(3):
        new.append_as_leader(batch(3, START_MS + 10 * i, tag=f"new{i}-"))
    assert {e.magic for s in new.segments() for e in iter_entries(s.log_path.read_bytes())} == {1, 2}
    end = new.log_end_offset
    new.close()
    for segment in directory.glob("*.index"):
        segment.unlink()
    recovered = Log(directory, "t", 0, LogConfig(segment_bytes=600, index_interval_bytes=1), clock, needs_recovery=True)
    assert recovered.log_end_offset == end == 18
    records = all_records(recovered)
    assert [r.offset for r in records] == list(range(18))
    assert [r.magic for r in records] == [1] * 9 + [2] * 9
    assert records[12].value == b"new1-0" and records[12].headers == HEADERS
    assert recovered.offset_for_timestamp(START_MS + 11) == (13, START_MS + 11)
    recovered.truncate_to(14)
    assert recovered.log_end_offset == 12  # a batch goes whole, as a wrapper does
    recovered.close()


def test_a_format_change_starts_a_segment_so_no_read_spans_it(tmp_path, clock):
    directory = tmp_path / "t-0"
    old = open_log(directory, clock, **MAGIC_1)
    old.append_as_leader(message_set(2, START_MS))
    old.append_as_leader(message_set(2, START_MS, magic=0))  # magic 0 and 1 share a segment, as before
    old.close()
    for settings in ({}, MAGIC_1, MAGIC_1, {}):  # up, back down, a restart in the same format, up again
        log = open_log(directory, clock, **settings)
        log.append_as_leader(batch(2, START_MS) if not settings else message_set(2, START_MS))
        log.close()
    log = open_log(directory, clock)
    assert [sorted({e.magic for e in iter_entries(s.log_path.read_bytes())}) for s in log.segments()] == [
        [0, 1], [2], [1], [2]]
    assert [s.base_offset for s in log.segments()][1:] == [4, 6, 10]
    assert [{e.magic for e in iter_entries(log.read(offset, 1 << 20).read_bytes())} for offset in (0, 4, 6, 10)] == [
        {0, 1}, {2}, {1}, {2}]
    log.close()


def test_logs_written_before_magic_2_keep_their_format_without_an_override(tmp_path, clock):
    old = LogManager([tmp_path], LogConfig(**MAGIC_1), clock)
    old.startup()
    old.create_topic("legacy", 1, {})
    old.create_topic("empty", 1, {})
    old.create_topic("pinned", 1, {})
    for topic in ("legacy", "pinned"):
        old.get_log(topic, 0).append_as_leader(message_set(1, START_MS))
    old.shutdown()
    upgraded = LogManager([tmp_path], LogConfig(), clock)
    upgraded.startup()
    upgraded.create_topic("fresh", 1, {})
    upgraded.create_topic("overridden", 1, {"message.format.version": "2.8"})
    formats = {}
    for topic in ("legacy", "empty", "fresh", "overridden"):
        log = upgraded.get_log(topic, 0)
        log.append_as_leader(message_set(1, START_MS))
        formats[topic] = {e.magic for e in iter_entries(log.read(log.log_start_offset, 1 << 20).read_bytes())}
    assert formats == {"legacy": {1}, "empty": {2}, "fresh": {2}, "overridden": {2}}
    upgraded.shutdown()


def test_a_follower_learns_the_leader_epochs_from_the_batches(tmp_path, clock):
    """Kafka 0.11+'s Log.append: each batch's partition leader epoch above the cache's latest
    starts at its base offset, so a follower's cache matches its leader's without being told
    (a magic 0/1 follower has to ask: replication.fetcher)."""
    leader = open_log(tmp_path / "a-0", clock)
    for epoch, count in ((0, 2), (0, 1), (3, 2), (5, 1), (5, 2)):
        leader.append_as_leader(batch(count, START_MS), leader_epoch=epoch)
    assert leader.leader_epoch_cache.entries == [(0, 0), (3, 3), (5, 5)]
    follower = open_log(tmp_path / "b-0", clock)
    data = leader.read(0, 1 << 20).read_bytes()
    follower.append_as_follower(data[:100])  # a fetch answer that ends inside a batch
    follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20).read_bytes())
    assert follower.log_end_offset == 8
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    assert (tmp_path / "b-0" / "leader-epoch-checkpoint").read_bytes() == \
        (tmp_path / "a-0" / "leader-epoch-checkpoint").read_bytes()


def test_a_magic_1_follower_learns_no_epochs_from_its_sets(tmp_path, clock):
    leader = open_log(tmp_path / "a-0", clock, **MAGIC_1)
    leader.append_as_leader(message_set(2, START_MS), leader_epoch=0)
    leader.append_as_leader(message_set(2, START_MS), leader_epoch=4)
    follower = open_log(tmp_path / "b-0", clock, **MAGIC_1)
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    assert follower.log_end_offset == 4 and follower.leader_epoch_cache.entries == []
