"""Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447) in the group coordinator:
pending per producer until the transaction's marker, then committed (Kafka's ordering by
log offset) or dropped; fenced by generation and member id; rebuilt by loading, from the log
and from snapshots, with open transactions still pending.

The coordinator runs on real files; the markers are written to ``__consumer_offsets`` as a
transaction coordinator has them written (``Log.append_txn_marker``), then the hook it calls
(``GroupCoordinator.handle_txn_completion``).
"""

from __future__ import annotations

import trio

from minikafka.broker.groups.coordinator import PartitionCommit
from minikafka.broker.groups.store import LocalWriter
from minikafka.protocol.errors import ErrorCode

from .test_persistence import ONE_PARTITION, commit, committed

PRODUCER = 1000


async def txn_commit(harness, offsets, *, producer=PRODUCER, epoch=0, group="g", member="", generation=-1):
    return await harness.coordinator.txn_commit(
        group, producer, epoch, member, None, generation,
        [PartitionCommit("t", partition, offset, f"m{offset}") for partition, offset in offsets.items()])


def write_marker(harness, commit, *, producer=PRODUCER, epoch=0):
    harness.coordinator.partitions[0].log.append_txn_marker(
        producer_id=producer, producer_epoch=epoch, coordinator_epoch=0, commit=commit)


def end_txn(harness, commit, *, producer=PRODUCER, epoch=0):
    write_marker(harness, commit, producer=producer, epoch=epoch)
    harness.coordinator.handle_txn_completion(producer, [0], commit)


def stable(harness, partitions, group="g"):
    error, fetched = harness.coordinator.fetch_offsets(group, [("t", p) for p in partitions], require_stable=True)
    assert error == ErrorCode.NONE
    return {f.partition: f.error if f.error else f.offset for f in fetched}


async def test_offsets_become_visible_with_the_commit_marker_only(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    assert await txn_commit(harness, {0: 5, 1: 6}) == [ErrorCode.NONE] * 2
    assert committed(harness, "g") == {}
    assert stable(harness, [0, 1, 2]) == {0: ErrorCode.UNSTABLE_OFFSET_COMMIT,
                                          1: ErrorCode.UNSTABLE_OFFSET_COMMIT, 2: -1}
    end_txn(harness, True)
    assert committed(harness, "g") == {("t", 0): (5, "m5"), ("t", 1): (6, "m6")}
    assert stable(harness, [0, 1]) == {0: 5, 1: 6}


async def test_an_aborted_transaction_leaves_the_committed_offsets(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    commit(harness, "g", 0, 3)
    assert await txn_commit(harness, {0: 9}) == [ErrorCode.NONE]
    end_txn(harness, False)
    assert committed(harness, "g") == {("t", 0): (3, "m3")}
    assert stable(harness, [0]) == {0: 3}
    assert not harness.coordinator.group("g").pending_txn_offsets


async def test_a_transaction_replaces_only_offsets_appended_before_its_own(harness_factory):
    # Kafka's completePendingTxnOffsetCommit: the newer record in the log wins.
    harness = harness_factory(**ONE_PARTITION)
    await txn_commit(harness, {0: 10, 1: 10})
    commit(harness, "g", 0, 20)   # after the transaction's offset: it stays
    end_txn(harness, True)
    assert committed(harness, "g") == {("t", 0): (20, "m20"), ("t", 1): (10, "m10")}


async def test_kip_447_generation_and_member_checks(harness):
    leader, follower = harness.form_group("g", 2)
    generation = harness.coordinator.group("g").generation_id
    assert await txn_commit(harness, {0: 1}, member=leader, generation=generation - 1) == [ErrorCode.ILLEGAL_GENERATION]
    assert await txn_commit(harness, {0: 1}, member="zombie", generation=generation) == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert await txn_commit(harness, {0: 1}, member=follower, generation=generation) == [ErrorCode.NONE]
    # v0-v2 carry neither: any group takes them.
    assert await txn_commit(harness, {1: 1}) == [ErrorCode.NONE]
    assert await harness.coordinator.txn_commit("", PRODUCER, 0, "", None, -1,
                                                [PartitionCommit("t", 0, 1, "")]) == [ErrorCode.INVALID_GROUP_ID]


async def test_a_fenced_producer_epoch_is_refused(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    await txn_commit(harness, {0: 1}, epoch=1)
    end_txn(harness, True, epoch=1)
    assert await txn_commit(harness, {0: 2}, epoch=0) == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert committed(harness, "g") == {("t", 0): (1, "m1")}


async def load_with_open_committed_and_aborted_transactions(harness, *, hook_for_last=False):
    """Producers 1-4: one committed, one aborted, one still open and one committed whose hook
    never ran unless ``hook_for_last`` (the coordinator's process died in between)."""
    commit(harness, "g", 3, 30)
    await txn_commit(harness, {0: 1}, producer=1)
    await txn_commit(harness, {1: 2}, producer=2)
    await txn_commit(harness, {2: 3}, producer=3)
    await txn_commit(harness, {3: 4}, producer=4)
    end_txn(harness, True, producer=1)
    end_txn(harness, False, producer=2)
    if hook_for_last:
        end_txn(harness, True, producer=4)
    else:
        write_marker(harness, True, producer=4)


def check_loaded(harness):
    assert committed(harness, "g") == {("t", 0): (1, "m1"), ("t", 3): (4, "m4")}
    assert stable(harness, [0, 1, 2, 3]) == {0: 1, 1: -1, 2: ErrorCode.UNSTABLE_OFFSET_COMMIT, 3: 4}
    end_txn(harness, True, producer=3)
    assert committed(harness, "g")[("t", 2)] == (3, "m3")


async def test_replay_keeps_open_transactions_pending(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    await load_with_open_committed_and_aborted_transactions(harness)
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert report.snapshot_offset is None
    check_loaded(harness)


async def test_a_snapshot_carries_the_offsets_of_open_transactions(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    await load_with_open_committed_and_aborted_transactions(harness, hook_for_last=True)
    harness.restart(clean=True)
    [report] = harness.coordinator.load_reports
    assert report.snapshot_offset is not None and report.events_replayed == 0
    check_loaded(harness)
    # The marker of a transaction the snapshot holds open, replayed after it.
    await txn_commit(harness, {4: 5}, producer=5)
    harness.restart(clean=True)
    write_marker(harness, True, producer=5)
    harness.restart(clean=False)
    assert committed(harness, "g")[("t", 4)] == (5, "m5")


async def test_a_snapshot_leaves_out_a_pending_offset_older_than_the_committed_one(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    await txn_commit(harness, {0: 10})
    commit(harness, "g", 0, 20)
    harness.restart(clean=True)
    write_marker(harness, True)
    harness.restart(clean=False)
    assert committed(harness, "g") == {("t", 0): (20, "m20")}


async def test_no_snapshot_is_taken_while_a_marker_waits_to_be_applied(harness_factory):
    # The marker is in the log, its hook has not run: a snapshot of the state would cover
    # the marker without its effect. The shutdown snapshot is skipped; the replay applies it.
    harness = harness_factory(**ONE_PARTITION)
    await txn_commit(harness, {0: 5})
    write_marker(harness, True)
    harness.restart(clean=True)
    [report] = harness.coordinator.load_reports
    assert report.snapshot_offset is None
    assert committed(harness, "g") == {("t", 0): (5, "m5")}


class LedWriter(LocalWriter):
    """A single broker's writer standing in for a cluster leader's (what a load needs of it)."""

    def trim_bound(self) -> int:
        return 0


async def test_a_completion_while_the_partition_loads_is_applied_once_it_is_loaded(harness_factory):
    # A cluster broker that just became the partition's leader loads it in the background; a
    # marker written after the load read the log completes the transaction meanwhile.
    harness = harness_factory(**ONE_PARTITION)
    await txn_commit(harness, {0: 5})
    ownership = harness.coordinator.ownership
    log = harness.coordinator.partitions[0].log
    async with trio.open_nursery() as nursery:
        ownership.became_leader(0, log, LedWriter(log))
        harness.coordinator.handle_txn_completion(PRODUCER, [0], True)
        nursery.start_soon(ownership.run_loads)
        with trio.fail_after(10):
            while 0 not in ownership.partitions:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert committed(harness, "g") == {("t", 0): (5, "m5")}
