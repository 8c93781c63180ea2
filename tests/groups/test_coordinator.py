"""The group state machine driven directly, on real storage with a fake clock."""

from __future__ import annotations

import trio

from minikafka.broker.groups.coordinator import PartitionCommit
from minikafka.broker.groups.group import GroupState
from minikafka.protocol.errors import ErrorCode

from .test_persistence import ONE_PARTITION
from .test_txn_offsets import LedWriter

SESSION = 10000       # the harness's JoinGroup defaults
REBALANCE = 30000


def generation(harness, group):
    return harness.coordinator.group(group).generation_id


def state(harness, group):
    found = harness.coordinator.group(group)
    return found.state if found is not None else None


def test_lone_member_is_answered_at_once_as_leader(harness):
    answers = harness.join("g")
    assert len(answers) == 1
    answer = answers[0]
    assert answer.error == ErrorCode.NONE
    assert answer.member_id.startswith("client-")
    assert answer.leader_id == answer.member_id
    assert answer.generation_id == 1
    assert answer.protocol == "range"
    assert answer.members == ((answer.member_id, None, b"range-meta"),)
    assert state(harness, "g") is GroupState.COMPLETING_REBALANCE
    synced = harness.sync("g", 1, answer.member_id, {answer.member_id: b"all"})
    assert synced[0].error == ErrorCode.NONE and synced[0].assignment == b"all"
    assert state(harness, "g") is GroupState.STABLE


def test_second_member_triggers_rebalance_and_both_get_the_new_generation(harness):
    leader = harness.form_group("g", 1)[0]
    newcomer = harness.join("g")
    assert newcomer == []                                   # waits for the leader to rejoin
    assert state(harness, "g") is GroupState.PREPARING_REBALANCE
    assert harness.coordinator.heartbeat("g", leader, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoin = harness.join("g", leader)
    assert rejoin[0].error == newcomer[0].error == ErrorCode.NONE
    assert rejoin[0].generation_id == newcomer[0].generation_id == 2
    assert rejoin[0].leader_id == leader
    assert {m for m, _, _ in rejoin[0].members} == {leader, newcomer[0].member_id}
    assert newcomer[0].members == ()


def test_protocol_selection_by_votes_among_common_protocols(harness):
    first = harness.join("g", protocols=[("a", b""), ("b", b""), ("c", b"")])[0]
    second = harness.join("g", protocols=[("c", b""), ("b", b"")])
    third = harness.join("g", protocols=[("b", b""), ("c", b"")])
    harness.join("g", first.member_id, protocols=[("a", b""), ("b", b""), ("c", b"")])
    # Common: b, c. First choices among them: member 1 -> b, member 2 -> c, member 3 -> b.
    assert second[0].protocol == third[0].protocol == "b"


def test_inconsistent_protocols_and_bad_requests(harness):
    harness.form_group("g", 1)
    assert harness.join("g", protocols=[("other", b"")])[0].error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert harness.join("g", protocol_type="connect")[0].error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert harness.join("new", protocols=[])[0].error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert harness.join("g", session=5999)[0].error == ErrorCode.INVALID_SESSION_TIMEOUT
    assert harness.join("g", session=300001)[0].error == ErrorCode.INVALID_SESSION_TIMEOUT
    assert harness.join("g", "nobody")[0].error == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.join("unknown-group", "nobody")[0].error == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.join("")[0].error == ErrorCode.INVALID_GROUP_ID


def test_heartbeat_and_sync_errors(harness):
    leader = harness.form_group("g", 1)[0]
    assert harness.coordinator.heartbeat("g", leader, 1) == ErrorCode.NONE
    assert harness.coordinator.heartbeat("g", leader, 0) == ErrorCode.ILLEGAL_GENERATION
    assert harness.coordinator.heartbeat("g", "nobody", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.coordinator.heartbeat("none", leader, 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.sync("g", 7, leader)[0].error == ErrorCode.ILLEGAL_GENERATION
    assert harness.sync("g", 1, "nobody")[0].error == ErrorCode.UNKNOWN_MEMBER_ID
    # A stable group answers a repeated SyncGroup with the stored assignment.
    assert harness.sync("g", 1, leader)[0].assignment == leader.encode()
    harness.join("g")
    assert harness.sync("g", 1, leader)[0].error == ErrorCode.REBALANCE_IN_PROGRESS


def test_follower_rejoining_unchanged_keeps_the_generation(harness):
    leader, follower = harness.form_group("g", 2)
    answer = harness.join("g", follower)[0]
    assert answer.error == ErrorCode.NONE and answer.generation_id == 2
    assert state(harness, "g") is GroupState.STABLE


def test_leave_rebalances_the_rest(harness):
    leader, follower = harness.form_group("g", 2)
    assert harness.coordinator.leave_group("g", leader) == ErrorCode.NONE
    assert harness.coordinator.leave_group("g", leader) == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.coordinator.heartbeat("g", follower, 2) == ErrorCode.REBALANCE_IN_PROGRESS
    answer = harness.join("g", follower)[0]
    assert answer.generation_id == 3 and answer.leader_id == follower
    assert harness.coordinator.leave_group("g", follower) == ErrorCode.NONE
    assert state(harness, "g") is GroupState.EMPTY and generation(harness, "g") == 4
    sync_answer = harness.sync("g", 3, follower)
    assert sync_answer[0].error == ErrorCode.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group(harness):
    [leader] = harness.form_group("g", 1)
    assert harness.coordinator.leave_group("g", leader) == ErrorCode.NONE
    assert state(harness, "g") is GroupState.EMPTY
    assert generation(harness, "g") == 2


def test_session_expiry_removes_member_and_rebalances(harness):
    leader, follower = harness.form_group("g", 2)
    harness.advance(SESSION - 1000)
    assert harness.coordinator.heartbeat("g", leader, 2) == ErrorCode.NONE
    harness.advance(1000)                                   # follower's session is over
    assert list(harness.coordinator.group("g").members) == [leader]
    assert harness.coordinator.heartbeat("g", leader, 2) == ErrorCode.REBALANCE_IN_PROGRESS
    answer = harness.join("g", leader)[0]
    assert answer.generation_id == 3 and answer.members == ((leader, None, b"range-meta"),)


def test_rebalance_timeout_removes_members_that_did_not_rejoin(harness):
    leader, follower = harness.form_group("g", 2)
    newcomer = harness.join("g")
    rejoined = harness.join("g", leader)
    assert newcomer == rejoined == []
    # The follower keeps heartbeating but never rejoins: the rebalance timeout removes it.
    for _ in range(REBALANCE // 5000):
        harness.advance(5000)
        harness.coordinator.heartbeat("g", follower, 2)
    assert rejoined[0].error == newcomer[0].error == ErrorCode.NONE
    assert rejoined[0].generation_id == 3
    assert follower not in harness.coordinator.group("g").members


def test_new_join_during_sync_restarts_the_rebalance(harness):
    leader, follower = harness.form_group("g", 2)
    harness.join("g", follower, protocols=[("range", b"changed"), ("roundrobin", b"")])
    waiting = harness.join("g", leader)
    gen = generation(harness, "g")
    follower_sync = harness.sync("g", gen, follower)
    assert follower_sync == []
    harness.join("g")                                       # a third member arrives
    assert follower_sync[0].error == ErrorCode.REBALANCE_IN_PROGRESS
    assert waiting[0].generation_id == gen


def test_initial_rebalance_delay_waits_for_more_members(harness_factory):
    harness = harness_factory(**{"group.initial.rebalance.delay.ms": "3000"})
    first = harness.join("g")
    harness.advance(2000)
    second = harness.join("g")
    harness.advance(1000)                                   # a member arrived: wait another step
    assert first == second == []
    harness.advance(3000)
    assert first[0].generation_id == second[0].generation_id == 1
    assert {m for m, _, _ in first[0].members} == {first[0].member_id, second[0].member_id}


def test_commit_and_fetch_inside_and_outside_the_group(harness):
    [leader] = harness.form_group("g", 1)
    commit = [PartitionCommit("t", 0, 10, "m0"), PartitionCommit("t", 1, 20, None)]
    assert harness.coordinator.commit_offsets("g", leader, 1, -1, commit) == [ErrorCode.NONE] * 2
    assert harness.coordinator.commit_offsets("g", leader, 0, -1, commit) == [ErrorCode.ILLEGAL_GENERATION] * 2
    assert harness.coordinator.commit_offsets("g", "x", 1, -1, commit) == [ErrorCode.UNKNOWN_MEMBER_ID] * 2
    assert harness.coordinator.commit_offsets("g", "", -1, -1, commit) == [ErrorCode.UNKNOWN_MEMBER_ID] * 2
    error, fetched = harness.coordinator.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)])
    assert error == ErrorCode.NONE
    assert [(f.offset, f.metadata) for f in fetched] == [(10, "m0"), (20, ""), (-1, "")]
    # Outside group management: generation -1 creates an empty group holding offsets.
    assert harness.coordinator.commit_offsets("solo", "", -1, -1, commit[:1]) == [ErrorCode.NONE]
    assert harness.coordinator.fetch_offsets("solo", None)[1][0].offset == 10
    assert harness.coordinator.commit_offsets("ghost", "m", 3, -1, commit) == [ErrorCode.ILLEGAL_GENERATION] * 2
    too_long = PartitionCommit("t", 0, 1, "x" * 4097)
    assert harness.coordinator.commit_offsets("solo", "", -1, -1, [too_long, commit[1]]) == \
        [ErrorCode.OFFSET_METADATA_TOO_LARGE, ErrorCode.NONE]


def test_commit_during_completing_rebalance_is_refused(harness):
    leader, follower = harness.form_group("g", 2)
    harness.join("g")
    harness.join("g", follower)
    # Still preparing (leader has not rejoined): a member of the current generation may commit.
    assert harness.coordinator.commit_offsets("g", leader, 2, -1, [PartitionCommit("t", 0, 5, "")]) == [ErrorCode.NONE]
    harness.join("g", leader)
    assert state(harness, "g") is GroupState.COMPLETING_REBALANCE
    assert harness.coordinator.commit_offsets("g", leader, 3, -1, [PartitionCommit("t", 0, 6, "")]) == \
        [ErrorCode.REBALANCE_IN_PROGRESS]


def test_offsets_expire_by_retention_and_empty_groups_go(harness):
    coordinator = harness.coordinator
    coordinator.commit_offsets("short", "", -1, 60_000, [PartitionCommit("t", 0, 1, "")])
    coordinator.commit_offsets("long", "", -1, -1, [PartitionCommit("t", 0, 2, "")])
    [member] = harness.form_group("active", 1)
    coordinator.commit_offsets("active", member, 1, 60_000, [PartitionCommit("t", 0, 3, "")])
    harness.clock.advance(60_001)
    coordinator.heartbeat("active", member, 1)
    assert coordinator.expire_offsets(harness.clock.time_ms()) == 2
    assert coordinator.group("short") is None
    assert coordinator.group("active").offsets == {}               # 0.10.2: any group's offsets
    assert coordinator.group("active").is_(GroupState.STABLE)
    assert coordinator.fetch_offsets("long", [("t", 0)])[1][0].offset == 2
    harness.clock.advance(24 * 3600 * 1000)
    assert coordinator.expire_offsets(harness.clock.time_ms()) == 1
    assert coordinator.group("long") is None
    assert [g for g, _, _ in coordinator.list_groups()[1]] == ["active"]
    harness.restart(clean=False)
    assert harness.coordinator.group("short") is None and harness.coordinator.group("long") is None


def test_describe_and_list(harness):
    leader, follower = harness.form_group("g", 2)
    summary = harness.coordinator.describe_group("g")
    assert summary.state == "Stable" and summary.protocol == "range" and summary.protocol_type == "consumer"
    assert {(m.member_id, m.assignment) for m in summary.members} == {(leader, leader.encode()),
                                                                     (follower, follower.encode())}
    assert harness.coordinator.describe_group("nope").state == "Dead"
    harness.join("g")
    summary = harness.coordinator.describe_group("g")
    assert summary.state == "PreparingRebalance" and summary.protocol == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in summary.members)
    assert harness.coordinator.list_groups() == (ErrorCode.NONE, [("g", "consumer", "PreparingRebalance")])


def test_member_removed_while_its_join_waits_gets_an_answer(harness):
    leader, follower = harness.form_group("g", 2)
    waiting = harness.join("g", follower, protocols=[("range", b"new"), ("roundrobin", b"")])
    assert waiting == []                                   # the leader has not rejoined yet
    assert harness.coordinator.leave_group("g", follower) == ErrorCode.NONE
    assert waiting[0].error == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.join("g", leader)[0].members == ((leader, None, b"range-meta"),)


def test_coordinator_not_available_before_startup_and_after_shutdown(harness):
    harness.coordinator.shutdown()
    assert harness.join("g")[0].error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.coordinator.heartbeat("g", "m", 1) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.coordinator.fetch_offsets("g", None)[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.coordinator.find_coordinator("g") == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.coordinator.commit_offsets("g", "", -1, -1, [PartitionCommit("t", 0, 1, "")]) == \
        [ErrorCode.COORDINATOR_NOT_AVAILABLE]


def _join_v4(harness, group, member_id=""):
    """A JoinGroup v4+ of a dynamic member (KIP-394: no id yet means MEMBER_ID_REQUIRED)."""
    answers = []
    harness.coordinator.handle_join_group(group, member_id, "client", "/127.0.0.1", REBALANCE, SESSION,
                                          "consumer", [("range", b"range-meta")], answers.append,
                                          require_known_member_id=True)
    return answers


def test_an_unused_member_id_holds_the_rebalance_until_its_session_timeout(harness):
    (leader,) = harness.form_group("g", 1)
    (asked,) = _join_v4(harness, "g")
    assert asked.error == ErrorCode.MEMBER_ID_REQUIRED and asked.member_id.startswith("client-")
    assert state(harness, "g") is GroupState.STABLE    # handing out an id starts no rebalance
    rejoin = harness.join("g", leader, protocols=[("range", b"new-meta")])
    assert not rejoin and state(harness, "g") is GroupState.PREPARING_REBALANCE
    harness.advance(SESSION - 1)
    assert not rejoin     # the id handed out may still join with it
    harness.advance(1)
    assert [(a.error, a.generation_id, [m for m, _, _ in a.members]) for a in rejoin] == \
        [(ErrorCode.NONE, 2, [leader])]


def test_a_member_id_handed_out_is_joined_with_and_then_waited_for(harness):
    (asked,) = _join_v4(harness, "g")
    assert state(harness, "g") is GroupState.EMPTY and not harness.coordinator.group("g").members
    (joined,) = _join_v4(harness, "g", asked.member_id)
    assert (joined.error, joined.member_id, joined.leader_id, joined.generation_id) == \
        (ErrorCode.NONE, asked.member_id, asked.member_id, 1)
    assert _join_v4(harness, "g", "never-handed-out")[0].error == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_static_member_that_does_not_rejoin_keeps_its_place_and_loses_the_lead(harness):
    """Kafka 2.8's onCompleteJoin: when the rebalance times out, dynamic members that did not
    rejoin are removed, static ones stay (a restarting consumer comes back under its instance
    id); the leader is then one of those who did rejoin."""
    static = []
    harness.coordinator.handle_join_group("g", "", "client", "/127.0.0.1", REBALANCE, SESSION, "consumer",
                                          [("range", b"range-meta")], static.append, group_instance_id="s")
    static_id = static[0].member_id
    assert static[0].leader_id == static_id
    harness.sync("g", 1, static_id, {static_id: b"mine"})
    newcomer = harness.join("g")
    for _ in range(3):   # the static member keeps its session but does not rejoin
        harness.advance(REBALANCE // 4)
        assert harness.coordinator.heartbeat("g", static_id, 1, "s") == ErrorCode.REBALANCE_IN_PROGRESS
    harness.advance(REBALANCE // 4)
    (answer,) = newcomer
    assert (answer.error, answer.generation_id, answer.leader_id) == (ErrorCode.NONE, 2, answer.member_id)
    assert sorted(m for m, _, _ in answer.members) == sorted([static_id, answer.member_id])
    assert static_id in harness.coordinator.group("g").members


async def test_a_loading_partition_answers_each_group_api_as_kafka_does(harness_factory):
    # A cluster broker that just became the offsets partition's leader loads it in the
    # background (Kafka 2.8's validateGroupStatus callers): a heartbeat is answered NONE
    # "blindly" (aiokafka's heartbeat task treats COORDINATOR_LOAD_IN_PROGRESS as unexpected),
    # SyncGroup REBALANCE_IN_PROGRESS (the rebalance's state is lost; older clients do not
    # know the load error), an empty group id INVALID_GROUP_ID before anything else, and
    # the other APIs COORDINATOR_LOAD_IN_PROGRESS.
    harness = harness_factory(**ONE_PARTITION)
    leader, follower = harness.form_group("g", 2)
    generation_id = generation(harness, "g")
    ownership = harness.coordinator.ownership
    log = harness.coordinator.partitions[0].log
    ownership.became_leader(0, log, LedWriter(log))
    coordinator = harness.coordinator

    assert coordinator.heartbeat("g", follower, generation_id) == ErrorCode.NONE
    assert harness.sync("g", generation_id, leader)[0].error == ErrorCode.REBALANCE_IN_PROGRESS
    assert harness.join("")[0].error == ErrorCode.INVALID_GROUP_ID
    assert harness.join("g", follower)[0].error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert coordinator.leave_group("g", follower) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert coordinator.describe_group("g").error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert coordinator.fetch_offsets("g", None)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert coordinator.commit_offsets("g", follower, generation_id, -1, [PartitionCommit("t", 0, 1, "")]) == \
        [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ownership.run_loads)
        with trio.fail_after(10):
            while 0 not in ownership.partitions:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert coordinator.heartbeat("g", follower, generation_id) == ErrorCode.NONE
    assert state(harness, "g") is GroupState.STABLE
