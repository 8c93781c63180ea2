"""Transactions in the log (issue 26): transactional data batches, the COMMIT and ABORT markers a
transaction coordinator has the leader append (``Log.append_txn_marker``), and the producer
state they leave, on real files."""

from __future__ import annotations

import struct

import pytest

from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import build_record_batch, end_txn_marker, iter_batches
from minikafka.storage import Log, LogConfig
from minikafka.storage.cleaner import CleanerConfig, LogCleaner

from .conftest import MAGIC_1, START_MS, all_records, message_set

PRODUCER = 4000


def open_log(directory, clock, *, needs_recovery=False, **settings) -> Log:
    return Log(directory, "t", 0, LogConfig(**settings), clock, needs_recovery=needs_recovery)


def transactional_batch(sequence: int, count: int = 2, *, producer_id: int = PRODUCER, epoch: int = 0) -> bytes:
    return bytes(build_record_batch([(None, b"v%d" % (sequence + i), START_MS, ()) for i in range(count)],
                                    producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                                    transactional=True))


def stored_batches(log: Log):
    data = log.read(log.log_start_offset, 1 << 20).read_bytes()
    return data, list(iter_batches(data))


def marker(log: Log, *, commit: bool, producer_id: int = PRODUCER, epoch: int = 0, coordinator_epoch: int = 0):
    return log.append_txn_marker(producer_id=producer_id, producer_epoch=epoch, coordinator_epoch=coordinator_epoch,
                                 commit=commit)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_data_then_a_marker_ends_the_transaction(tmp_path, clock, commit):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(message_set(1, START_MS))  # offset 0, outside any transaction
    log.append_as_leader(transactional_batch(0))  # offsets 1-2
    state = log.producer_state
    assert state.last_entry(PRODUCER).current_txn_first_offset == 1
    assert state.first_unstable_offset() == 1
    appended = marker(log, commit=commit, coordinator_epoch=3)
    assert (appended.first_offset, appended.last_offset, log.log_end_offset) == (3, 3, 4)
    # Decided, but unstable until the high watermark passes the marker.
    assert state.last_entry(PRODUCER).current_txn_first_offset is None
    assert state.first_undecided_offset() is None
    assert state.first_unstable_offset() == 1
    state.on_high_watermark_updated(4)
    assert state.first_unstable_offset() is None

    data, batches = stored_batches(log)
    control = batches[-1]
    assert (control.base_offset, control.record_count, control.producer_id, control.producer_epoch) == (3, 1, PRODUCER, 0)
    assert (control.is_control, control.is_transactional, control.codec, control.base_sequence) == (True, True, 0, -1)
    assert batches[1].is_transactional and not batches[1].is_control
    # Kafka's layout: key ControlRecordType v0 + type (0 ABORT, 1 COMMIT), value EndTransactionMarker v0 + epoch.
    raw = data[control.position:control.position + control.size]
    assert struct.pack(">hh", 0, int(commit)) + b"\x0c" + struct.pack(">hi", 0, 3) in raw
    assert end_txn_marker(raw) == (commit, 3, START_MS)


def test_a_fenced_producer_or_coordinator_writes_no_marker(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(transactional_batch(0, epoch=2))
    marker(log, commit=False, epoch=2, coordinator_epoch=5)
    end = log.log_end_offset
    with pytest.raises(RecordError) as stale_producer:
        marker(log, commit=True, epoch=1, coordinator_epoch=5)
    assert stale_producer.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(RecordError) as stale_coordinator:
        marker(log, commit=True, epoch=2, coordinator_epoch=4)
    assert stale_coordinator.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == end
    # A marker of a newer epoch (the coordinator aborting after fencing the producer) bumps it.
    marker(log, commit=False, epoch=3, coordinator_epoch=5)
    assert log.producer_state.last_entry(PRODUCER).epoch == 3
    with pytest.raises(RecordError) as fenced:
        log.append_as_leader(transactional_batch(1, epoch=2))
    assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_non_transactional_batch_inside_an_open_transaction_is_refused(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(transactional_batch(0))
    idempotent = bytes(build_record_batch([(None, b"x", START_MS, ())], producer_id=PRODUCER, producer_epoch=0,
                                          base_sequence=2))
    with pytest.raises(RecordError) as refused:
        log.append_as_leader(idempotent)
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE


def test_clients_may_not_write_control_batches(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    forged = bytes(build_record_batch([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), START_MS, ())],
                                      producer_id=PRODUCER, producer_epoch=0, base_sequence=0, transactional=True,
                                      control=True))
    with pytest.raises(RecordError) as refused:
        log.append_as_leader(forged)
    assert refused.value.code == ErrorCode.CORRUPT_MESSAGE


def test_a_magic_1_log_holds_no_markers(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, **MAGIC_1)
    with pytest.raises(RecordError) as refused:
        marker(log, commit=True)
    assert refused.value.code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_a_follower_copying_the_leader_tracks_the_same_transactions(tmp_path, clock):
    leader = open_log(tmp_path / "leader" / "t-0", clock)
    leader.append_as_leader(transactional_batch(0))
    leader.append_as_leader(transactional_batch(0, producer_id=PRODUCER + 1))
    marker(leader, commit=False)
    follower = open_log(tmp_path / "follower" / "t-0", clock)
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    for log in (leader, follower):
        state = log.producer_state
        assert state.last_entry(PRODUCER).current_txn_first_offset is None
        assert state.last_entry(PRODUCER + 1).current_txn_first_offset == 2
        assert state.first_undecided_offset() == 2
        assert state.first_unstable_offset() == 0  # the aborted one's marker is above the high watermark


def test_recovery_rebuilds_open_and_ended_transactions(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300)
    log.append_as_leader(transactional_batch(0))
    marker(log, commit=True)
    log.append_as_leader(transactional_batch(0, producer_id=PRODUCER + 1))
    while len(log.segments()) < 3:
        log.append_as_leader(message_set(1, START_MS))
    log.append_as_leader(transactional_batch(2))
    marker(log, commit=False, coordinator_epoch=1)
    end = log.log_end_offset
    # No close: a crash. Recovery replays from the newest snapshot, the markers included.
    crashed = open_log(tmp_path / "t-0", clock, needs_recovery=True, segment_bytes=300)
    state = crashed.producer_state
    assert crashed.log_end_offset == end
    assert state.last_entry(PRODUCER).current_txn_first_offset is None
    assert state.last_entry(PRODUCER).coordinator_epoch == 1
    assert state.last_entry(PRODUCER + 1).current_txn_first_offset == 3
    assert state.first_undecided_offset() == 3
    with pytest.raises(RecordError) as fenced:
        marker(crashed, commit=True, coordinator_epoch=0)
    assert fenced.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def aborted_entries(log: Log):
    return [(segment.base_offset, txn) for segment in log._segments for txn in segment.txn_index.entries()]


def test_the_last_stable_offset_waits_for_markers_and_the_high_watermark(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(message_set(2, START_MS))  # 0-1
    log.append_as_leader(transactional_batch(0))  # 2-3
    log.append_as_leader(transactional_batch(0, producer_id=PRODUCER + 1))  # 4-5
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 2
    marker(log, commit=True)  # 6
    assert log.last_stable_offset == 2  # the marker is not below the high watermark yet
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 4  # the other producer's transaction is still open
    marker(log, commit=False, producer_id=PRODUCER + 1)  # 7
    log.high_watermark = 7
    assert log.last_stable_offset == 4
    log.high_watermark = 8
    assert log.last_stable_offset == 8


def test_aborted_transactions_go_to_the_txn_index_of_the_marker_segment(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300)
    log.append_as_leader(transactional_batch(0))  # 0-1
    log.append_as_leader(transactional_batch(0, producer_id=PRODUCER + 1))  # 2-3
    while len(log.segments()) < 2:
        log.append_as_leader(message_set(1, START_MS))
    second = log.segments()[-1].base_offset
    aborted = marker(log, commit=False).last_offset
    committed = marker(log, commit=True, producer_id=PRODUCER + 1).last_offset
    # Kafka's layout: version 0, producer id, first offset, last offset, last stable offset.
    path = tmp_path / "t-0" / f"{second:020d}.txnindex"
    assert path.read_bytes() == struct.pack(">hqqqq", 0, PRODUCER, 0, aborted, 2)
    assert not (tmp_path / "t-0" / f"{0:020d}.txnindex").exists()
    assert committed == aborted + 1
    log.high_watermark = log.log_end_offset
    data, txns = log.read_committed(0, 1 << 20, log.last_stable_offset)
    assert data.length and [(t.producer_id, t.first_offset) for t in txns] == [(PRODUCER, 0)]
    # A fetch starting after the aborted transaction's marker is told nothing of it.
    assert log.read_committed(aborted + 1, 1 << 20, log.last_stable_offset)[1] == []
    log.truncate_to(aborted)
    assert path.read_bytes() == b""
    log.append_as_leader(message_set(1, START_MS))


def test_read_committed_stops_at_the_last_stable_offset(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(message_set(2, START_MS))
    log.append_as_leader(transactional_batch(0))
    log.high_watermark = log.log_end_offset
    data, txns = log.read_committed(0, 1 << 20, log.last_stable_offset)
    assert [b.base_offset for b in iter_batches(data.read_bytes())] == [0]
    assert txns == []
    assert log.read_committed(2, 1 << 20, log.last_stable_offset)[0].length == 0


def test_recovery_rebuilds_the_txn_indexes_of_the_segments_it_recovers(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300)
    log.append_as_leader(transactional_batch(0))
    log.append_as_leader(transactional_batch(0, producer_id=PRODUCER + 1))
    marker(log, commit=False)
    while len(log.segments()) < 3:
        log.append_as_leader(message_set(1, START_MS))
    marker(log, commit=False, producer_id=PRODUCER + 1)
    log.append_as_leader(transactional_batch(2))
    written = aborted_entries(log)
    assert [base for base, _ in written] == [0, log.segments()[-1].base_offset]
    for segment in log._segments:
        segment.txn_index.path.unlink(missing_ok=True)  # lost with the page cache
    crashed = open_log(tmp_path / "t-0", clock, needs_recovery=True, segment_bytes=300)
    assert aborted_entries(crashed) == written
    assert crashed.producer_state.first_undecided_offset() == crashed.log_end_offset - 2
    # A clean reopen keeps them as they are.
    crashed.close()
    assert aborted_entries(open_log(tmp_path / "t-0", clock, segment_bytes=300)) == written


def test_a_damaged_txn_index_is_rebuilt_on_a_clean_open(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(transactional_batch(0))
    marker(log, commit=False)
    written = aborted_entries(log)
    log.close()
    path = tmp_path / "t-0" / f"{0:020d}.txnindex"
    path.write_bytes(path.read_bytes()[:-3])  # a partial entry
    assert aborted_entries(open_log(tmp_path / "t-0", clock)) == written


def keyed_txn(key: str, value: str | None, sequence: int, *, producer_id: int = PRODUCER) -> bytes:
    return bytes(build_record_batch([(key.encode(), None if value is None else value.encode(), START_MS, ())],
                                    producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                                    transactional=True))


def compacted(tmp_path, clock, **settings) -> Log:
    return open_log(tmp_path / "t-0", clock, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, **settings)


def clean(log: Log, clock):
    return LogCleaner(lambda: [log], CleanerConfig(), clock).clean_filthiest()


def stored(log: Log):
    """(offset, kind, key) of every batch: kind data/COMMIT/ABORT, None for an emptied one."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        batches = list(iter_batches(data, allow_empty=True))
        for batch in batches:
            raw = data[batch.position:batch.position + batch.size]
            if not batch.record_count:
                kind = None
            elif batch.is_control:
                kind = "COMMIT" if end_txn_marker(raw).commit else "ABORT"
            else:
                kind = "data"
            out.append((batch.base_offset, kind))
        offset = batches[-1].base_offset + batches[-1].last_offset_delta + 1
    return out


def test_the_cleaner_removes_aborted_data_then_the_markers_no_batch_needs(tmp_path, clock):
    log = compacted(tmp_path, clock, delete_retention_ms=0)

    def more(*batches: bytes) -> None:
        for batch in batches:
            log.append_as_leader(batch)
        log.roll()
        log.append_as_leader(message_set(1, START_MS, key=b"end"))  # the active segment
        log.high_watermark = log.log_end_offset

    log.append_as_leader(keyed_txn("k", "committed", 0))  # 0
    marker(log, commit=True)  # 1
    log.append_as_leader(keyed_txn("k", "aborted", 1))  # 2: must not hide the committed value
    marker(log, commit=False)  # 3
    more(keyed_txn("other", "x", 0, producer_id=PRODUCER + 1))  # 4 still open, 5 "end"
    assert log.last_stable_offset == 4
    assert clean(log, clock).end_offset == 4  # the cleaner stops at the last stable offset
    # The aborted batch is emptied (its producer's last data batch: compaction keeps it), its
    # marker stays with its transaction index entry, and the aborted value hides nothing.
    assert stored(log) == [(0, "data"), (1, "COMMIT"), (2, None), (3, "ABORT"), (4, "data"), (5, "data")]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in log.aborted_transactions()] == [(PRODUCER, 2, 3)]
    assert [(r.offset, r.value) for r in all_records(log) if r.key == b"k"] == [(0, b"committed")]

    marker(log, commit=True, producer_id=PRODUCER + 1)  # 6
    log.append_as_leader(keyed_txn("k", "last", 2))  # 7
    marker(log, commit=True)  # 8
    more()  # 9 "end"
    clean(log, clock)
    kinds = dict(stored(log))
    assert 2 not in kinds and kinds[3] == "ABORT"  # the batch went in this pass, the marker with it next
    more(bytes(build_record_batch([(b"z", b"z", START_MS, ())])))  # 10, 11 "end"
    clean(log, clock)
    kinds = dict(stored(log))
    assert 3 not in kinds and 1 not in kinds and kinds[6] == kinds[8] == "COMMIT"
    assert log.aborted_transactions() == []
    assert [(r.offset, r.value) for r in all_records(log) if r.key == b"k"] == [(7, b"last")]
