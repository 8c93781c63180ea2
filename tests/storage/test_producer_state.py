"""Producer state (storage/producer_state.py): Kafka 2.8's ProducerStateManager rules for
sequences, epochs, duplicates and transactions, and its snapshot files, on real files."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.storage.producer_state import (
    INT32_MAX,
    AppendOrigin,
    CompletedTxn,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    snapshot_path,
)

PID = 1000


def append(manager: ProducerStateManager, *, pid=PID, epoch=0, first_seq=0, count=1, timestamp=0,
           transactional=False, origin=AppendOrigin.CLIENT) -> int:
    """Append one batch of ``count`` records at the map's end; its first offset."""
    first = manager.map_end_offset
    info = manager.prepare_update(pid, origin)
    info.append_data_batch(epoch, first_seq, (first_seq + count - 1) % (INT32_MAX + 1), timestamp, first,
                           first + count - 1, transactional)
    manager.update(info)
    manager.update_map_end_offset(first + count)
    return first


def marker(manager: ProducerStateManager, *, pid=PID, epoch=0, abort=False, coordinator_epoch=0,
           origin=AppendOrigin.COORDINATOR) -> CompletedTxn | None:
    offset = manager.map_end_offset
    info = manager.prepare_update(pid, origin)
    completed = info.append_end_txn_marker(abort=abort, coordinator_epoch=coordinator_epoch, epoch=epoch,
                                           offset=offset, timestamp=0)
    manager.update(info)
    manager.update_map_end_offset(offset + 1)
    return completed


def refused(code: ErrorCode, call, *args, **kwargs) -> None:
    with pytest.raises(RecordError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == code


@pytest.fixture
def manager(tmp_path):
    return ProducerStateManager("t-0", tmp_path)


def test_sequences_follow_on_and_a_gap_or_a_step_back_is_out_of_order(manager):
    append(manager, first_seq=0, count=3)
    append(manager, first_seq=3, count=2)
    refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, manager, first_seq=6)  # 5 is missing
    refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, manager, first_seq=4)  # not a whole earlier batch
    assert manager.last_entry(PID).last_seq == 4 and manager.map_end_offset == 5


def test_the_sequence_wraps_after_int32_max(manager):
    append(manager, first_seq=INT32_MAX - 1, count=2)  # the first batch of an unknown producer may start anywhere
    append(manager, first_seq=0, count=1)
    assert manager.last_entry(PID).last_seq == 0


def test_a_new_epoch_starts_at_sequence_zero_and_an_older_epoch_is_fenced(manager):
    append(manager, epoch=3, first_seq=0, count=2)
    refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, manager, epoch=4, first_seq=2)
    append(manager, epoch=4, first_seq=0)
    refused(ErrorCode.INVALID_PRODUCER_EPOCH, append, manager, epoch=3, first_seq=2)
    assert manager.last_entry(PID).epoch == 4


def test_a_replica_copies_what_the_leader_accepted(manager):
    append(manager, epoch=5, first_seq=0, origin=AppendOrigin.REPLICATION)
    append(manager, epoch=5, first_seq=7, origin=AppendOrigin.REPLICATION)  # a gap: the leader's call
    append(manager, epoch=4, first_seq=0, origin=AppendOrigin.REPLICATION)  # logged, not refused
    assert manager.map_end_offset == 3


def test_a_refused_append_changes_nothing(manager):
    append(manager, first_seq=0, count=2)
    info = manager.prepare_update(PID, AppendOrigin.CLIENT)
    info.append_data_batch(0, 2, 2, 0, 2, 2, False)
    with pytest.raises(RecordError):
        info.append_data_batch(0, 9, 9, 0, 3, 3, False)  # the append's second batch is out of order
    assert manager.last_entry(PID).last_seq == 1  # update() was never called


def test_the_last_five_batches_are_recognised_as_duplicates_with_their_offsets(manager):
    offsets = [append(manager, first_seq=seq * 2, count=2) for seq in range(6)]
    for batch in range(1, 6):
        duplicate = manager.find_duplicate(PID, 0, batch * 2, batch * 2 + 1)
        assert (duplicate.first_offset, duplicate.last_offset) == (offsets[batch], offsets[batch] + 1)
    assert manager.find_duplicate(PID, 0, 0, 1) is None  # the sixth-newest is gone
    assert manager.find_duplicate(PID, 1, 10, 11) is None  # another epoch
    assert manager.find_duplicate(PID, 0, 10, 10) is None  # not the same range
    assert manager.find_duplicate(PID + 1, 0, 10, 11) is None


def test_every_batch_of_a_multi_batch_append_is_retained(manager):
    for first in (0, 2):  # a new producer's first append, then a known one's
        info = manager.prepare_update(PID, AppendOrigin.CLIENT)
        info.append_data_batch(0, first * 2, first * 2 + 1, 0, first * 2, first * 2 + 1, False)
        info.append_data_batch(0, first * 2 + 2, first * 2 + 3, 0, first * 2 + 2, first * 2 + 3, False)
        manager.update(info)
        manager.update_map_end_offset(first * 2 + 4)
    for seq in (0, 2, 4, 6):
        assert manager.find_duplicate(PID, 0, seq, seq + 1).first_offset == seq


def test_snapshot_bytes_are_kafkas_version_1_layout(manager):
    append(manager, epoch=2, first_seq=5, count=3, timestamp=1_700_000_000_000)
    data = encode_snapshot(manager.producers.values())
    entries = bytes.fromhex(
        "00000001"  # one entry
        "00000000000003e8"  # producer id 1000
        "0002"  # epoch
        "00000007"  # last sequence
        "0000000000000002"  # last offset
        "00000002"  # offset delta
        "0000018bcfe56800"  # timestamp
        "ffffffff"  # coordinator epoch -1
        "ffffffffffffffff")  # no open transaction
    assert data[:2] == b"\x00\x01" and data[6:] == entries
    import crcmod.predefined

    assert struct.unpack(">I", data[2:6])[0] == crcmod.predefined.mkCrcFun("crc-32c")(entries)


def test_a_snapshot_restores_each_producers_last_batch(tmp_path, manager):
    append(manager, pid=1, epoch=0, first_seq=0, count=2)
    append(manager, pid=2, epoch=3, first_seq=0, count=1)
    append(manager, pid=1, epoch=0, first_seq=2, count=2)
    manager.take_snapshot()
    assert snapshot_path(tmp_path, 5).exists()
    reloaded = ProducerStateManager("t-0", tmp_path)
    reloaded.truncate_and_reload(0, 5, now_ms=0)
    assert reloaded.map_end_offset == 5
    assert reloaded.last_entry(1).last_seq == 3 and reloaded.last_entry(1).last_data_offset == 4
    assert reloaded.find_duplicate(1, 0, 2, 3).first_offset == 3
    append(reloaded, pid=2, epoch=3, first_seq=1)  # goes on where it was
    refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, reloaded, pid=1, first_seq=5)


def test_a_corrupt_newest_snapshot_is_dropped_for_the_one_before(tmp_path, manager):
    append(manager, first_seq=0)
    manager.take_snapshot()
    append(manager, first_seq=1)
    manager.take_snapshot()
    newest = snapshot_path(tmp_path, 2)
    newest.write_bytes(newest.read_bytes()[:-1] + b"\x01")
    reloaded = ProducerStateManager("t-0", tmp_path)
    reloaded.truncate_and_reload(0, 2, now_ms=0)
    assert reloaded.map_end_offset == 1 and reloaded.last_entry(PID).last_seq == 0
    assert not newest.exists()
    with pytest.raises(ValueError):
        decode_snapshot(b"\x00\x02" + bytes(8))


def test_truncation_drops_snapshots_above_the_new_end_and_reloads(tmp_path, manager):
    for seq in range(4):
        append(manager, first_seq=seq)
        manager.take_snapshot()
    manager.truncate_and_reload(0, 2, now_ms=0)
    assert sorted(p.name for p in tmp_path.glob("*.snapshot")) == [snapshot_path(tmp_path, n).name for n in (1, 2)]
    assert manager.map_end_offset == 2 and manager.last_entry(PID).last_seq == 1
    manager.delete_snapshots_before(2)
    assert manager.oldest_snapshot_offset == 2


def test_stray_snapshots_go_but_the_clean_shutdown_one_above_every_segment_stays(tmp_path, manager):
    for offset in (0, 3, 5, 9, 12):
        snapshot_path(tmp_path, offset).write_bytes(encode_snapshot([]))
    manager.remove_stray_snapshots([0, 5, 10])
    assert sorted(int(p.stem) for p in tmp_path.glob("*.snapshot")) == [0, 5, 12]
    manager.remove_stray_snapshots([0, 5, 20])
    assert sorted(int(p.stem) for p in tmp_path.glob("*.snapshot")) == [0, 5]


def test_producers_expire_unless_a_transaction_is_open(tmp_path):
    manager = ProducerStateManager("t-0", tmp_path, expiration_ms=1000)
    append(manager, pid=1, timestamp=0)
    append(manager, pid=2, timestamp=0, transactional=True)
    append(manager, pid=3, timestamp=900)
    manager.take_snapshot()
    manager.remove_expired_producers(now_ms=1000)
    assert set(manager.producers) == {2, 3}
    reloaded = ProducerStateManager("t-0", tmp_path, expiration_ms=1000)
    reloaded.truncate_and_reload(0, 3, now_ms=1900)
    assert set(reloaded.producers) == {2}  # expired ones are not loaded


def test_transactions_hold_the_last_stable_offset_until_their_marker_is_replicated(manager):
    append(manager, pid=1, first_seq=0)  # offset 0, not transactional
    append(manager, pid=2, first_seq=0, transactional=True)  # 1
    append(manager, pid=3, first_seq=0, transactional=True)  # 2
    append(manager, pid=2, first_seq=1, transactional=True)  # 3
    assert manager.first_unstable_offset() == 1
    refused(ErrorCode.INVALID_TXN_STATE, append, manager, pid=2, first_seq=2)  # outside its transaction
    completed = marker(manager, pid=2, abort=True)  # 4
    assert completed == CompletedTxn(2, 1, 4, True)
    assert manager.last_stable_offset(completed) == 2  # producer 3's transaction is still open
    manager.complete_txn(completed)
    assert manager.first_unstable_offset() == 1  # decided, marker not yet below the HW
    manager.on_high_watermark_updated(5)
    assert manager.first_unstable_offset() == 2
    assert marker(manager, pid=1) is None  # a marker without a transaction ends nothing
    done = marker(manager, pid=3)
    assert manager.last_stable_offset(done) == done.last_offset + 1
    manager.complete_txn(done)
    manager.on_high_watermark_updated(done.last_offset + 1)
    assert manager.first_unstable_offset() is None


def test_an_open_transaction_survives_a_snapshot(tmp_path, manager):
    append(manager, pid=2, first_seq=0, transactional=True)
    manager.take_snapshot()
    reloaded = ProducerStateManager("t-0", tmp_path)
    reloaded.truncate_and_reload(0, 1, now_ms=0)
    assert reloaded.first_unstable_offset() == 0


def test_a_zombie_coordinators_marker_is_fenced(manager):
    append(manager, pid=2, transactional=True)
    marker(manager, pid=2, coordinator_epoch=5)
    refused(ErrorCode.TRANSACTION_COORDINATOR_FENCED, marker, manager, pid=2, coordinator_epoch=4)
    marker(manager, pid=2, coordinator_epoch=4, origin=AppendOrigin.REPLICATION)  # a replica copies it


# A producer's moves: the next batch, a retry of one of its recent batches, a skipped
# sequence, an epoch bump, a stale epoch; a snapshot may follow any of them.
MOVES = st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["next", "retry", "gap", "bump", "stale"]),
                           st.integers(1, 3), st.booleans()), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(moves=MOVES, cut=st.integers(0, 100))
def test_the_state_at_any_snapshot_is_the_state_the_log_had_there(tmp_path_factory, moves, cut):
    """Whatever mix of retries, gaps and epochs the producers sent: each accepted batch continues
    its producer's sequence, a retry is found as a duplicate, and truncating to any snapshot
    brings back exactly the map as it was at that offset (each producer's epoch and last batch)."""
    directory = tmp_path_factory.mktemp("producer-state")
    manager = ProducerStateManager("t-0", directory)
    expected_next: dict[int, tuple[int, int]] = {}  # producer -> (epoch, next sequence)
    sent: dict[int, list[tuple[int, int, int]]] = {}  # producer -> its accepted (epoch, first, last)
    at_snapshot: dict[int, dict] = {}
    for producer, move, count, snapshot in moves:
        epoch, seq = expected_next.get(producer, (0, 0))
        if move == "retry" and sent.get(producer):
            retried = sent[producer][-1]
            assert manager.find_duplicate(producer, *retried) is not None
            continue
        if move == "bump":
            epoch, seq = epoch + 1, 0
        attempt = {"gap": seq + 1, "stale": seq}.get(move, seq)
        attempt_epoch = epoch - 1 if move == "stale" and epoch > 0 else epoch
        try:
            append(manager, pid=producer, epoch=attempt_epoch, first_seq=attempt, count=count)
        except RecordError as error:
            assert move in ("gap", "stale") and producer in expected_next
            assert error.code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH)
            continue
        assert move not in ("gap", "stale") or producer not in expected_next or attempt_epoch == epoch and move != "gap"
        expected_next[producer] = (attempt_epoch, attempt + count)
        sent.setdefault(producer, []).append((attempt_epoch, attempt, attempt + count - 1))
        if snapshot:
            manager.take_snapshot()
            at_snapshot[manager.map_end_offset] = {pid: (e.epoch, e.last_seq, e.last_data_offset)
                                                    for pid, e in manager.producers.items()}
    if not at_snapshot:
        return
    offsets = sorted(at_snapshot)
    target = offsets[cut % len(offsets)]
    manager.truncate_and_reload(0, target, now_ms=0)
    assert manager.map_end_offset == target
    assert {pid: (e.epoch, e.last_seq, e.last_data_offset) for pid, e in manager.producers.items()} == at_snapshot[target]
