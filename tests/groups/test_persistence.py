"""Committed offsets and groups survive restarts: event log, snapshots, fallback (KIP-630)."""

from __future__ import annotations

import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from minikafka.broker.groups.coordinator import GROUP_METADATA_TOPIC, PartitionCommit
from minikafka.broker.groups.group import GroupState
from minikafka.broker.groups.records import offset_key, offset_value, OffsetAndMetadata
from minikafka.broker.groups.store import SnapshotFormatError, decode_snapshot, encode_snapshot
from minikafka.protocol.errors import ErrorCode

ONE_PARTITION = {"offsets.topic.num.partitions": "1"}


def commit(harness, group, partition, offset, member="", generation=-1):
    errors = harness.coordinator.commit_offsets(group, member, generation, -1,
                                                [PartitionCommit("t", partition, offset, f"m{offset}")])
    assert errors == [ErrorCode.NONE]


def committed(harness, group):
    error, fetched = harness.coordinator.fetch_offsets(group, None)
    assert error == ErrorCode.NONE
    return {(f.topic, f.partition): (f.offset, f.metadata) for f in fetched}


def test_clean_restart_brings_back_offsets_and_group_from_a_snapshot(harness):
    leader, follower = harness.form_group("g", 2)
    commit(harness, "g", 0, 11, leader, 2)
    commit(harness, "g", 1, 22, follower, 2)
    commit(harness, "solo", 0, 5)
    harness.restart(clean=True)
    coordinator = harness.coordinator
    assert committed(harness, "g") == {("t", 0): (11, "m11"), ("t", 1): (22, "m22")}
    assert committed(harness, "solo") == {("t", 0): (5, "m5")}
    group = coordinator.group("g")
    assert group.is_(GroupState.STABLE) and group.generation_id == 2 and group.leader_id == leader
    assert {m.member_id: m.assignment for m in group.members.values()} == \
        {leader: leader.encode(), follower: follower.encode()}
    # Its members carry on without a rebalance...
    assert coordinator.heartbeat("g", leader, 2) == ErrorCode.NONE
    assert coordinator.heartbeat("g", follower, 2) == ErrorCode.NONE
    # ...and the shutdown snapshot covered everything: nothing was replayed.
    assert sum(r.events_replayed for r in coordinator.load_reports) == 0
    assert all(r.snapshot_offset is not None for r in coordinator.load_reports
               if r.replay_end_offset > 0)


def test_members_that_do_not_come_back_after_a_restart_expire(harness):
    leader, follower = harness.form_group("g", 2)
    harness.restart(clean=True)
    harness.advance(5000)
    assert harness.coordinator.heartbeat("g", leader, 2) == ErrorCode.NONE
    harness.advance(6000)
    assert list(harness.coordinator.group("g").members) == [leader]


def test_crash_restart_replays_the_whole_log(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    for offset in range(7):
        commit(harness, "g", offset % 3, offset)
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert report.snapshot_offset is None
    assert (report.replay_start_offset, report.replay_end_offset, report.events_replayed) == (0, 7, 7)
    assert committed(harness, "g") == {("t", 0): (6, "m6"), ("t", 1): (4, "m4"), ("t", 2): (5, "m5")}


async def wait_for_snapshot(partition, offset):
    with trio.fail_after(10):
        while offset not in partition.snapshot_offsets:
            await trio.sleep(0.01)


async def test_snapshots_bound_the_replay_and_fall_back_when_damaged(harness_factory):
    harness = harness_factory(**ONE_PARTITION, **{"offsets.snapshot.interval.events": "10"})
    partition = harness.coordinator.partitions[0]
    # "early" commits only before the first snapshot (its events end up only in that
    # snapshot), "middle" only between the two, "late" only after the newest.
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.coordinator.run)
        for offset in range(10):
            commit(harness, "early", offset % 2, offset)
        await wait_for_snapshot(partition, 10)
        for offset in range(10, 20):
            commit(harness, "middle", offset % 3, offset)
        await wait_for_snapshot(partition, 20)
        for offset in range(20, 25):
            commit(harness, "late", offset % 4, offset)
        nursery.cancel_scope.cancel()
    expected = {"early": {("t", 0): (8, "m8"), ("t", 1): (9, "m9")},
                "middle": {("t", 0): (18, "m18"), ("t", 1): (19, "m19"), ("t", 2): (17, "m17")},
                "late": {("t", p): (o, f"m{o}") for p, o in [(0, 24), (1, 21), (2, 22), (3, 23)]}}
    assert {group: committed(harness, group) for group in expected} == expected
    # Two snapshots are kept; the log below the older one is gone.
    assert partition.snapshots.offsets() == [10, 20]
    assert partition.log.log_start_offset == 10

    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert (report.snapshot_offset, report.replay_start_offset, report.events_replayed) == (20, 20, 5)
    assert {group: committed(harness, group) for group in expected} == expected

    # The newest snapshot is cut short: start-up falls back to the older one and replays more.
    newest = sorted(harness.coordinator.partitions[0].snapshots.directory.glob("*.snapshot"))[-1]
    newest.write_bytes(newest.read_bytes()[:-7])
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert (report.snapshot_offset, report.replay_start_offset, report.events_replayed) == (10, 10, 15)
    assert {group: committed(harness, group) for group in expected} == expected

    # A clean shutdown snapshots what the fallback loaded: the next start replays nothing.
    harness.restart(clean=True)
    [report] = harness.coordinator.load_reports
    assert (report.snapshot_offset, report.events_replayed) == (25, 0)
    assert {group: committed(harness, group) for group in expected} == expected


async def test_snapshots_by_bytes_keep_two_and_remove_what_they_cover(harness_factory):
    # The events interval is far away: every snapshot here comes from the bytes interval.
    harness = harness_factory(**ONE_PARTITION, **{"offsets.snapshot.interval.bytes": "2000"})
    partition = harness.coordinator.partitions[0]
    first = None
    offset = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.coordinator.run)
        with trio.fail_after(10):
            # Commit until a third snapshot has pushed the first out.
            while first is None or partition.snapshot_offsets[0] == first:
                harness.coordinator.commit_offsets("g", "", -1, -1, [
                    PartitionCommit("t", offset % 3, offset, "x" * 200)])
                offset += 1
                await trio.sleep(0.001)
                if first is None and partition.snapshot_offsets:
                    first = partition.snapshot_offsets[0]
        nursery.cancel_scope.cancel()
    assert 0 < first < 20                      # each event is over 200 bytes
    retained = partition.snapshot_offsets
    assert len(retained) == 2 and partition.snapshots.offsets() == retained
    assert partition.log.log_start_offset == retained[0]
    expected = committed(harness, "g")
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert report.snapshot_offset == retained[-1]
    assert report.events_replayed == offset - retained[-1]
    assert committed(harness, "g") == expected


async def test_a_failed_snapshot_write_leaves_its_events_for_the_shutdown_snapshot(harness_factory, caplog):
    harness = harness_factory(**ONE_PARTITION, **{"offsets.snapshot.interval.events": "5"})
    directory = harness.coordinator.partitions[0].snapshots.directory
    directory.rmdir()
    directory.write_bytes(b"")                       # the snapshot write fails: not a directory
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.coordinator.run)
        for offset in range(5):
            commit(harness, "g", 0, offset)
        with trio.fail_after(10):
            while "writing the snapshot at 5 failed" not in caplog.text:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    directory.unlink()
    directory.mkdir()
    harness.restart(clean=True)
    [report] = harness.coordinator.load_reports
    assert (report.snapshot_offset, report.events_replayed) == (5, 0)
    assert committed(harness, "g") == {("t", 0): (4, "m4")}


async def test_offsets_retention_minutes_expires_offsets_in_the_background(harness_factory):
    harness = harness_factory(**ONE_PARTITION, **{"offsets.retention.minutes": "1",
                                                  "offsets.retention.check.interval.ms": "10"})
    coordinator = harness.coordinator
    commit(harness, "old", 0, 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        harness.clock.advance(30_000)
        commit(harness, "young", 0, 2)
        harness.clock.advance(30_000)                  # "old" is exactly one minute old: kept
        await trio.sleep(0.1)
        assert committed(harness, "old") == {("t", 0): (1, "m1")}
        harness.clock.advance(1000)                    # past the minute and the check interval
        with trio.fail_after(10):
            while coordinator.group("old") is not None:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert committed(harness, "old") == {}
    assert committed(harness, "young") == {("t", 0): (2, "m2")}
    harness.restart(clean=False)                       # the expiry is in the log too
    assert harness.coordinator.group("old") is None
    assert committed(harness, "young") == {("t", 0): (2, "m2")}


def test_snapshot_of_a_log_without_snapshots_and_a_damaged_one_falls_back_to_full_replay(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    for offset in range(5):
        commit(harness, "g", 0, offset)
    harness.restart(clean=True)                          # first snapshot, at 5; log kept whole
    partition = harness.coordinator.partitions[0]
    assert partition.snapshots.offsets() == [5] and partition.log.log_start_offset == 0
    [snapshot] = partition.snapshots.directory.glob("*.snapshot")
    snapshot.write_bytes(b"")
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert (report.snapshot_offset, report.events_replayed) == (None, 5)
    assert committed(harness, "g") == {("t", 0): (4, "m4")}


def test_a_snapshot_past_the_log_end_is_rewritten_at_the_log_end(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    for offset in range(5):
        commit(harness, "g", offset % 2, offset)
    harness.restart(clean=True)                          # snapshot at 5
    # The log loses its tail below the fsynced snapshot (power loss before a flush).
    harness.coordinator.partitions[0].log.truncate_to(3)
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert (report.snapshot_offset, report.replay_end_offset) == (5, 3)
    assert committed(harness, "g") == {("t", 0): (4, "m4"), ("t", 1): (3, "m3")}
    assert harness.coordinator.partitions[0].snapshots.offsets() == [3]
    # The next event lands at offset 3: it must not pass for one the snapshot covers.
    commit(harness, "g", 1, 99)
    harness.restart(clean=False)
    assert committed(harness, "g") == {("t", 0): (4, "m4"), ("t", 1): (99, "m99")}


def state_of(coordinator):
    result = {}
    for groups in coordinator.ownership.groups_by_partition.values():
        for group in groups.values():
            result[group.group_id] = (
                group.state, group.generation_id, group.protocol, group.leader_id,
                sorted((m.member_id, m.assignment) for m in group.members.values()),
                dict(group.offsets))
    return result


operations = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from("abcde"), st.integers(0, 3), st.integers(0, 1000)),
    st.tuples(st.just("expire"), st.integers(1, 3)),
    st.tuples(st.just("restart"), st.booleans()),
    st.tuples(st.just("join"), st.sampled_from("xy")),
), max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations)
def test_snapshot_plus_replay_equals_the_state_before_restart(harness_factory, ops):
    harness = harness_factory(**{"offsets.topic.num.partitions": "2",
                                 "offsets.snapshot.interval.events": "1000"})
    for op in ops:
        if op[0] == "commit":
            _, group, partition, offset = op
            harness.coordinator.commit_offsets(group, "", -1, 3_600_000 * (1 + partition), [
                PartitionCommit("t", partition, offset, "")])
        elif op[0] == "expire":
            harness.clock.advance(op[1] * 3_600_000)
            harness.coordinator.expire_offsets(harness.clock.time_ms())
        elif op[0] == "join":
            group = harness.coordinator.group(op[1])
            if group is None or group.is_(GroupState.EMPTY):
                harness.form_group(op[1], 1)
        else:
            before = state_of(harness.coordinator)
            harness.restart(clean=op[1])
            assert state_of(harness.coordinator) == before
    before = state_of(harness.coordinator)
    harness.restart(clean=False)
    assert state_of(harness.coordinator) == before
    harness.close()


def test_consumer_offsets_topic_is_created_with_the_configured_partitions(harness_factory):
    harness = harness_factory(**{"offsets.topic.num.partitions": "3"})
    assert harness.broker.log_manager.topics()[GROUP_METADATA_TOPIC] == 3
    assert harness.coordinator.partition_for("hello") == 99162322 % 3


def test_a_snapshot_with_a_good_checksum_but_unknown_format_is_ignored(harness_factory):
    harness = harness_factory(**ONE_PARTITION)
    for offset in range(3):
        commit(harness, "g", 0, offset)
    harness.coordinator.partitions[0].snapshots.write(3, b"MKGS\x00\x63 from a future version")
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert (report.snapshot_offset, report.events_replayed) == (None, 3)
    assert committed(harness, "g") == {("t", 0): (2, "m2")}
    snapshots = harness.coordinator.partitions[0].snapshots
    assert (snapshots.directory / "00000000000000000003.snapshot.unreadable").exists()


def two_snapshots_with_the_log_deleted_below_the_older(harness_factory):
    """Offsets of group "early" only in the snapshot at 5 (the log below 5 is deleted), "g"
    in the snapshot at 10 and after it. Returns the harness and every committed offset."""
    harness = harness_factory(**ONE_PARTITION)
    for partition in range(5):
        commit(harness, "early", partition, 100 + partition)
    harness.restart(clean=True)                          # snapshot at 5; the log is kept whole
    for offset in range(5):
        commit(harness, "g", offset % 2, offset)
    harness.restart(clean=True)                          # snapshot at 10; the log below 5 goes
    for offset in range(5, 8):
        commit(harness, "g", offset % 2, offset)
    partition = harness.coordinator.partitions[0]
    assert partition.snapshots.offsets() == [5, 10] and partition.log.log_start_offset == 5
    expected = {"early": {("t", p): (100 + p, f"m{100 + p}") for p in range(5)},
                "g": {("t", 0): (6, "m6"), ("t", 1): (7, "m7")}}
    assert {group: committed(harness, group) for group in expected} == expected
    return harness, expected


def unknown_version(data):
    return data[:4] + b"\x00\x02" + data[6:]


def entry_cut_short(data):
    return data[:-3]


def ghost_entry_then_an_undecodable_key(data):
    # A good entry first, so a fallback that did not undo the partial load would show it.
    ghost = (offset_key("ghost", "t", 0), offset_value(OffsetAndMetadata(1, "", 0, 2**40)))
    return encode_snapshot(0, 10, [ghost, (b"\x00\x09not a key version", b"")])


@pytest.mark.parametrize("mangle", [unknown_version, entry_cut_short, ghost_entry_then_an_undecodable_key])
def test_a_checksum_valid_but_undecodable_newest_snapshot_falls_back_to_the_older_one(
        harness_factory, caplog, mangle):
    harness, expected = two_snapshots_with_the_log_deleted_below_the_older(harness_factory)
    store = harness.coordinator.partitions[0].snapshots
    offset, data = store.latest()
    assert offset == 10
    store.write(10, mangle(data))                        # a valid checksum over what cannot be read
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    # The older snapshot plus the log from it, not a "full replay" from the log start at 5.
    assert (report.snapshot_offset, report.replay_start_offset, report.events_replayed) == (5, 5, 8)
    assert {group: committed(harness, group) for group in expected} == expected
    assert harness.coordinator.group("ghost") is None
    assert "snapshot at 10 passed its checksum but cannot be decoded" in caplog.text
    assert "LOST" not in caplog.text
    assert store.offsets() == [5]
    assert (store.directory / "00000000000000000010.snapshot.unreadable").exists()
    # Later snapshots carry on from the fallback: nothing is lost across further restarts.
    harness.restart(clean=True)
    harness.restart(clean=True)
    assert {group: committed(harness, group) for group in expected} == expected


def test_both_snapshots_undecodable_with_the_log_deleted_below_them_is_a_loud_error(harness_factory, caplog):
    harness, expected = two_snapshots_with_the_log_deleted_below_the_older(harness_factory)
    store = harness.coordinator.partitions[0].snapshots
    for offset, data in list(store.newest_first()):
        store.write(offset, unknown_version(data))
    harness.restart(clean=False)
    [report] = harness.coordinator.load_reports
    assert (report.snapshot_offset, report.replay_start_offset) == (None, 5)
    # What cannot be replayed is named, not passed off as the state...
    assert ("no usable snapshot, but the log starts at 5: the events at offsets 0 to 4 are gone, "
            "and the committed offsets and groups only they held are LOST") in caplog.text
    assert committed(harness, "early") == {}
    assert committed(harness, "g") == {("t", 0): (6, "m6"), ("t", 1): (7, "m7")}
    # ...and the snapshots that still hold it stay on disk for an operator.
    assert sorted(p.name for p in store.directory.glob("*.unreadable")) == [
        "00000000000000000005.snapshot.unreadable", "00000000000000000010.snapshot.unreadable"]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_mangled_snapshot_payload_only_raises_snapshot_format_error(data):
    entries = [(b"k%d" % i, b"v" * i) for i in range(4)]
    payload = bytearray(encode_snapshot(0, 7, entries))
    for _ in range(data.draw(st.integers(1, 4))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(payload)))
    try:
        list(decode_snapshot(0, 7, bytes(payload[:cut])))
    except SnapshotFormatError:
        pass


@pytest.mark.parametrize("clean", [True, False])
def test_static_members_survive_a_restart(harness, clean):
    """The group's metadata keeps each member's group.instance.id (Kafka's value v3): after a
    restart, a static member joining again under its instance id still takes over its former
    self without a rebalance, and that former self is fenced."""
    answers = []
    harness.coordinator.handle_join_group("g", "", "client", "/127.0.0.1", 30000, 10000, "consumer",
                                          [("range", b"meta")], answers.append, group_instance_id="i-1")
    (joined,) = answers
    assert harness.sync("g", 1, joined.member_id, {joined.member_id: b"mine"})[0].error == ErrorCode.NONE
    harness.restart(clean=clean)
    again = []
    harness.coordinator.handle_join_group("g", "", "client", "/127.0.0.1", 30000, 10000, "consumer",
                                          [("range", b"meta")], again.append, group_instance_id="i-1")
    (rejoined,) = again
    assert (rejoined.error, rejoined.generation_id) == (ErrorCode.NONE, 1)
    assert rejoined.member_id != joined.member_id
    assert harness.sync("g", 1, rejoined.member_id)[0].assignment == b"mine"
    assert harness.coordinator.heartbeat("g", joined.member_id, 1, "i-1") == ErrorCode.FENCED_INSTANCE_ID
