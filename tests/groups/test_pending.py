"""Events appended to ``__consumer_offsets`` but not yet committed (below the high watermark):
snapshots, expiry and SyncGroup must treat them as Kafka treats its pending offset commits
and its group store (issue 31, defects 6-8).

The coordinator runs on real files; only the high watermark is the test's (``HeldWriter``),
standing for the replication a cluster waits on.
"""

from __future__ import annotations

import trio

from minikafka.broker.groups.coordinator import PartitionCommit
from minikafka.broker.groups.group import GroupState
from minikafka.broker.groups.records import group_key, offset_key, offset_value, OffsetAndMetadata
from minikafka.protocol.errors import ErrorCode

from .conftest import START_MS
from .test_persistence import ONE_PARTITION, committed, wait_for_snapshot

RETENTION_MS = 60_000


async def answered(answers) -> None:
    with trio.fail_after(10):
        while not answers:
            await trio.sleep(0.01)


async def commit_in_background(nursery, harness, group, partition, offset, answers):
    async def run():
        answers.extend(await harness.coordinator.commit(group, "", -1, -1, [
            PartitionCommit("t", partition, offset, f"m{offset}")]))
    nursery.start_soon(run)
    await trio.testing.wait_all_tasks_blocked()


async def test_a_snapshot_holds_commits_still_waiting_for_the_high_watermark(harness_factory):
    harness = harness_factory(**ONE_PARTITION, **{"offsets.snapshot.interval.events": "1"})
    writer = harness.hold_commits()
    partition = harness.coordinator.partitions[0]
    answers = []
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.coordinator.run)
        # The commit crosses the snapshot interval: the snapshot at 1 is taken while it waits.
        await commit_in_background(nursery, harness, "g", 0, 7, answers)
        await wait_for_snapshot(partition, 1)
        writer.release()
        await answered(answers)
        nursery.cancel_scope.cancel()
    assert answers == [ErrorCode.NONE]
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert (report.snapshot_offset, report.events_replayed) == (1, 0)
    assert committed(harness, "g") == {("t", 0): (7, "m7")}


async def test_expiry_does_not_remove_a_new_group_whose_first_commit_waits(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    writer = harness.hold_commits()
    answers = []
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.coordinator.run)
        await commit_in_background(nursery, harness, "fresh", 0, 3, answers)
        harness.coordinator.expire_offsets(harness.clock.time_ms())
        writer.release()
        await answered(answers)
        nursery.cancel_scope.cancel()
    assert answers == [ErrorCode.NONE]
    assert committed(harness, "fresh") == {("t", 0): (3, "m3")}
    harness.restart(clean=False)
    assert committed(harness, "fresh") == {("t", 0): (3, "m3")}


async def test_expiry_leaves_a_partition_whose_recommit_waits(harness_factory):
    harness = harness_factory(**ONE_PARTITION, **{"offsets.retention.minutes": "1"})
    harness.coordinator.commit_offsets("g", "", -1, -1, [PartitionCommit("t", 0, 1, "m1")])
    harness.clock.advance(RETENTION_MS + 1)
    writer = harness.hold_commits()
    answers = []
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.coordinator.run)
        await commit_in_background(nursery, harness, "g", 0, 2, answers)
        # Kafka expires neither a partition with a pending commit nor its group.
        assert harness.coordinator.expire_offsets(harness.clock.time_ms()) == 0
        writer.release()
        await answered(answers)
        nursery.cancel_scope.cancel()
    assert answers == [ErrorCode.NONE]
    assert committed(harness, "g") == {("t", 0): (2, "m2")}
    harness.restart(clean=False)
    assert committed(harness, "g") == {("t", 0): (2, "m2")}


def test_loading_keeps_offsets_committed_before_a_group_tombstone(harness_factory):
    # Kafka's loadGroupsAndOffsets: a group tombstone removes the group's metadata; offsets
    # not tombstoned themselves are loaded into an empty group.
    harness = harness_factory(**ONE_PARTITION)
    harness.form_group("g", 1)
    partition = harness.coordinator.partitions[0]
    commit_value = offset_value(OffsetAndMetadata(5, "kept", START_MS, START_MS + 86_400_000))
    partition.append([(offset_key("g", "t", 0), commit_value), (group_key("g"), None)])
    harness.restart(clean=False)
    group = harness.coordinator.group("g")
    assert group is not None and group.is_(GroupState.EMPTY) and not group.members
    assert committed(harness, "g") == {("t", 0): (5, "kept")}


async def sync_leader(harness, nursery):
    """Join one member and send its SyncGroup as leader; returns (member id, answers)."""
    [joined] = harness.join("g")
    answers = harness.sync("g", joined.generation_id, joined.member_id, {joined.member_id: b"all"})
    await trio.testing.wait_all_tasks_blocked()
    return joined.member_id, answers


async def test_sync_group_is_answered_once_the_group_metadata_is_committed(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    writer = harness.hold_commits()
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.coordinator.run)
        member, answers = await sync_leader(harness, nursery)
        assert answers == []
        assert harness.coordinator.group("g").is_(GroupState.COMPLETING_REBALANCE)
        writer.release()
        await answered(answers)
        nursery.cancel_scope.cancel()
    assert [(a.error, a.assignment) for a in answers] == [(ErrorCode.NONE, b"all")]
    assert harness.coordinator.group("g").is_(GroupState.STABLE)


async def test_a_group_metadata_append_that_fails_to_replicate_fails_the_sync(harness_factory):
    # Kafka 0.10.2's storeGroup callback: NOT_LEADER_FOR_PARTITION -> NOT_COORDINATOR_FOR_GROUP,
    # REQUEST_TIMED_OUT -> REBALANCE_IN_PROGRESS; the group prepares a new rebalance.
    for replication_error, answered in [(ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
                                        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REBALANCE_IN_PROGRESS)]:
        harness = harness_factory(**ONE_PARTITION)
        writer = harness.hold_commits()
        async with trio.open_nursery() as nursery:
            await nursery.start(harness.coordinator.run)
            member, answers = await sync_leader(harness, nursery)
            assert answers == []
            writer.fail(replication_error)
            with trio.fail_after(10):
                while not answers:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert [a.error for a in answers] == [answered]
        group = harness.coordinator.group("g")
        assert group.is_(GroupState.PREPARING_REBALANCE)
        assert group.members[member].assignment == b""
