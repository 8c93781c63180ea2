"""The log's producer state (storage/producer_state.py wired into Log): snapshots named by the
offset they describe, written at each roll and at a clean close, loaded on open, truncated with
the log, deleted with the segments they precede, and idle producers expired; recovery
replays the batches after the newest snapshot."""

from __future__ import annotations

import os

import pytest

from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import ProducerBatch, build_record_batch
from minikafka.storage import Log, LogConfig
from minikafka.storage.producer_state import AppendOrigin

from .conftest import START_MS, message_set

SNAPSHOT = ".snapshot"


def snapshots(log: Log) -> list[int]:
    return sorted(int(name[:-len(SNAPSHOT)]) for name in os.listdir(log.dir) if name.endswith(SNAPSHOT))


def open_log(directory, clock, *, needs_recovery=False, recovery_point=0, **settings) -> Log:
    return Log(directory, "t", 0, LogConfig(segment_bytes=400, **settings), clock, needs_recovery=needs_recovery,
               recovery_point=recovery_point)


def fill(log: Log, segments: int) -> None:
    """Append until the log has ``segments`` segments."""
    while len(log.segments()) < segments:
        log.append_as_leader(message_set(1, START_MS))  # one offset per entry, whatever the format


def write_producer(log: Log, producer_id: int, *, timestamp: int = START_MS) -> None:
    """Producer state as if ``producer_id`` had written the log's last entry: what an append of
    its batch records (the log records it for the batches it appends)."""
    end = log.log_end_offset
    state = log.producer_state
    for info in state.analyze([ProducerBatch(producer_id, 0, 0, end - 1, end - 1, timestamp, False, False)],
                              AppendOrigin.REPLICATION):
        state.update(info)


def test_a_snapshot_at_each_roll_named_by_the_new_segment_and_one_at_a_clean_close(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    fill(log, 4)
    bases = [segment.base_offset for segment in log.segments()]
    assert snapshots(log) == bases[1:]
    log.append_as_leader(message_set(1, START_MS))
    end = log.log_end_offset
    log.close()
    assert snapshots(log) == bases[1:] + [end]
    reopened = open_log(tmp_path / "t-0", clock)
    assert snapshots(reopened) == bases[1:] + [end]  # loaded, nothing rewritten
    assert reopened.producer_state.map_end_offset == end


def test_producer_state_as_of_a_roll_survives_a_crash(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    fill(log, 2)
    write_producer(log, 7)
    fill(log, 3)  # the roll's snapshot holds producer 7
    log.append_as_leader(message_set(1, START_MS))
    end = log.log_end_offset
    # No close: a crash, the rolled segments flushed. Recovery of the last one starts from the
    # snapshot at its base and replays what follows.
    crashed = open_log(tmp_path / "t-0", clock, needs_recovery=True, recovery_point=log.segments()[-1].base_offset)
    assert crashed.producer_state.last_entry(7) is not None
    assert crashed.producer_state.map_end_offset == crashed.log_end_offset == end


def test_truncation_drops_the_snapshots_above_and_reloads_from_one_below(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    fill(log, 2)
    write_producer(log, 1)
    fill(log, 3)
    write_producer(log, 2)
    fill(log, 4)
    second, third, fourth = [segment.base_offset for segment in log.segments()[1:]]
    assert snapshots(log) == [second, third, fourth]
    log.truncate_to(third + 1)
    assert snapshots(log) == [second, third, third + 1]
    assert log.producer_state.last_entry(1) is not None
    assert log.producer_state.last_entry(2) is None  # it wrote after the third segment's base
    assert log.producer_state.map_end_offset == third + 1
    log.truncate_fully_and_start_at(100)
    assert snapshots(log) == [] and log.producer_state.is_empty()
    assert log.producer_state.map_end_offset == 100


def test_snapshots_go_with_the_segments_before_them(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    fill(log, 4)
    second, third, fourth = [segment.base_offset for segment in log.segments()[1:]]
    log.delete_segments_below(third)
    assert log.log_start_offset == third
    assert snapshots(log) == [third, fourth]


def test_idle_producers_expire(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, producer_id_expiration_ms=60_000)
    log.append_as_leader(message_set(1, START_MS))
    write_producer(log, 3, timestamp=clock.time_ms())
    clock.advance(59_999)
    log.remove_expired_producers()
    assert log.producer_state.last_entry(3) is not None
    clock.advance(1)
    log.remove_expired_producers()
    assert log.producer_state.last_entry(3) is None


def idempotent_batch(producer_id: int, sequence: int, count: int = 2) -> bytes:
    return bytes(build_record_batch([(None, b"v%d" % (sequence + i), START_MS, ()) for i in range(count)],
                                    producer_id=producer_id, producer_epoch=0, base_sequence=sequence))


def test_recovery_replays_the_batches_after_the_newest_snapshot(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(idempotent_batch(5, 0))
    fill(log, 2)  # the roll's snapshot holds producer 5 at sequence 1
    log.append_as_leader(idempotent_batch(5, 2))
    log.append_as_leader(idempotent_batch(6, 0))
    end = log.log_end_offset
    crashed = open_log(tmp_path / "t-0", clock, needs_recovery=True)
    assert crashed.producer_state.last_entry(5).last_seq == 3
    assert crashed.producer_state.last_entry(6).last_data_offset == end - 1
    retried = crashed.append_as_leader(idempotent_batch(6, 0))  # a duplicate: nothing appended
    assert (retried.first_offset, crashed.log_end_offset) == (end - 2, end)
    with pytest.raises(RecordError) as refused:
        crashed.append_as_leader(idempotent_batch(5, 5))
    assert refused.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
