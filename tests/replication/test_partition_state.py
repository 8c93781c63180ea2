"""The leader's ISR and high watermark decisions, event by event."""

from __future__ import annotations

import pytest

from minikafka.protocol.errors import ErrorCode
from minikafka.replication.partition_state import (
    UNKNOWN_OFFSET,
    FetchOutcome,
    LeaderState,
    NotAssignedReplica,
    acks_all_satisfied,
    enough_replicas,
)

LAG = 10_000
T0 = 1_700_000_000_000


def leader(*, isr=(1, 2, 3), assigned=(1, 2, 3), end=0, hw=0, now=T0) -> LeaderState:
    return LeaderState(leader_id=1, assigned=list(assigned), isr=list(isr), leader_epoch=4, zk_version=7,
                       leader_end_offset=end, high_watermark=hw, now_ms=now, lag_time_max_ms=LAG)


def test_alone_in_the_isr_the_leader_end_is_the_high_watermark():
    state = leader(isr=[1], assigned=[1])
    assert state.leader_appended(5) == 5
    assert state.high_watermark == 5


def test_high_watermark_is_the_minimum_over_the_isr():
    state = leader(end=10)
    assert state.follower_fetched(2, 10, 10, T0 + 1) == FetchOutcome(0, False, None)  # 3 still unknown
    outcome = state.follower_fetched(3, 6, 10, T0 + 2)
    assert outcome == FetchOutcome(6, True, None)
    assert state.follower_fetched(3, 8, 10, T0 + 3).high_watermark == 8
    assert state.follower_fetched(2, 10, 10, T0 + 4) == FetchOutcome(8, False, None)
    assert state.follower_end_offsets() == {2: 10, 3: 8}


def test_new_leader_keeps_its_checkpointed_high_watermark_until_every_isr_follower_fetched():
    # Partition.makeLeader: follower positions are unknown, the HW is the checkpointed one.
    state = leader(end=20, hw=12)
    assert state.high_watermark == 12
    assert state.follower_end_offsets() == {2: UNKNOWN_OFFSET, 3: UNKNOWN_OFFSET}
    assert state.leader_appended(25) == 12
    assert state.follower_fetched(2, 25, 25, T0 + 1).high_watermark == 12
    assert state.follower_fetched(3, 18, 25, T0 + 2) == FetchOutcome(18, True, None)


def test_checkpointed_high_watermark_above_the_log_end_is_cut_to_it():
    assert leader(isr=[1], assigned=[1], end=3, hw=9).high_watermark == 3


def test_high_watermark_never_moves_backwards():
    state = leader(isr=[1, 2], assigned=[1, 2], end=10)
    assert state.follower_fetched(2, 10, 10, T0 + 1).high_watermark == 10
    # The follower fetching from a lower offset (it truncated) does not pull the HW back.
    assert state.follower_fetched(2, 4, 10, T0 + 2) == FetchOutcome(10, False, None)
    assert state.isr_written([1, 2], 8) == 10
    assert state.high_watermark == 10


def test_slow_follower_drops_out_after_lag_time_and_hw_moves_on():
    state = leader(isr=[1, 2, 3], end=0)
    state.follower_fetched(2, 0, 0, T0)
    state.follower_fetched(3, 0, 0, T0)
    for i in range(1, 4):
        state.leader_appended(i * 10)
        state.follower_fetched(2, i * 10, i * 10, T0 + i * 3000)   # keeps up
        state.follower_fetched(3, 0, i * 10, T0 + i * 3000)        # stuck at 0
    assert state.high_watermark == 0
    assert state.shrink_isr(T0 + LAG, LAG) is None  # exactly lag_time_max_ms is still in sync
    assert state.shrink_isr(T0 + LAG + 1, LAG) == [1, 2]
    assert state.isr == [1, 2, 3]  # not applied until ZooKeeper has it
    assert state.isr_written([1, 2], 8) == 30
    assert (state.isr, state.zk_version) == ([1, 2], 8)


def test_follower_behind_but_caught_up_to_the_previous_fetch_stays_in_sync():
    # Replica.updateLogReadResult's second case: it read everything the leader had at its
    # previous fetch, so it counts as caught up as of that fetch.
    state = leader(isr=[1, 2], assigned=[1, 2], end=0)
    state.leader_appended(10)
    state.follower_fetched(2, 0, 10, T0 + 9000)
    state.leader_appended(20)
    state.follower_fetched(2, 10, 20, T0 + 15000)  # caught up as of T0 + 9000
    assert state.shrink_isr(T0 + 9000 + LAG, LAG) is None
    assert state.shrink_isr(T0 + 9001 + LAG, LAG) == [1]


def test_leader_is_never_shrunk_out():
    state = leader(isr=[1], assigned=[1, 2])
    assert state.shrink_isr(T0 + 10 * LAG) is None


def test_caught_up_follower_joins_at_the_high_watermark():
    state = leader(isr=[1], assigned=[1, 2], end=10)
    assert state.high_watermark == 10
    below = state.follower_fetched(2, 7, 10, T0 + 1)
    assert below.expand_isr_to is None
    at = state.follower_fetched(2, 10, 12, T0 + 2)
    assert at.expand_isr_to == [1, 2]
    # Kafka's rule: the replica on its way in holds the HW back, so it does not chase it.
    assert state.leader_appended(15) == 10
    assert state.isr_written([1, 2], 8) == 10
    assert state.follower_fetched(2, 15, 15, T0 + 3) == FetchOutcome(15, True, None)


def test_a_follower_joins_only_once_it_holds_what_the_leader_had_when_its_epoch_began():
    """KAFKA-7128 (simulator seed 1078 with --transactions): a leader restarted with a stale
    checkpointed high watermark (512, while 514 had been committed) let a follower at 512 into
    the ISR; that follower, elected next, truncated the committed 512-513 everywhere. The
    follower must first reach the leader's log end at the start of its epoch (Kafka 2.1+)."""
    state = leader(isr=[1, 3], assigned=[1, 2, 3], end=515, hw=512)
    assert state.follower_fetched(2, 512, 515, T0 + 1).expand_isr_to is None
    assert state.follower_fetched(2, 514, 515, T0 + 2).expand_isr_to is None
    assert state.follower_fetched(2, 515, 516, T0 + 3).expand_isr_to == [1, 3, 2]


def test_a_new_epoch_of_the_same_leader_moves_the_offset_followers_must_reach():
    state = leader(isr=[1, 3], assigned=[1, 2, 3], end=10, hw=10)
    state.leader_and_isr(assigned=[1, 2, 3], isr=[1, 3], leader_epoch=5, zk_version=8, leader_end_offset=20,
                         now_ms=T0)
    assert state.high_watermark == 10
    assert state.follower_fetched(2, 15, 20, T0 + 1).expand_isr_to is None
    assert state.follower_fetched(2, 20, 20, T0 + 2).expand_isr_to == [1, 3, 2]


def test_expansion_is_proposed_until_written():
    state = leader(isr=[1], assigned=[1, 2], end=0)
    assert state.follower_fetched(2, 0, 0, T0 + 1).expand_isr_to == [1, 2]
    assert state.follower_fetched(2, 0, 0, T0 + 2).expand_isr_to == [1, 2]
    state.isr_written([1, 2], 8)
    assert state.follower_fetched(2, 0, 0, T0 + 3).expand_isr_to is None


def test_caught_up_non_isr_replica_stops_holding_the_hw_once_it_lags():
    state = leader(isr=[1], assigned=[1, 2], end=10)
    state.follower_fetched(2, 10, 10, T0)
    assert state.leader_appended(20, T0 + LAG) == 10
    assert state.leader_appended(20, T0 + LAG + 1) == 20


def test_acks_all_completes_only_once_every_isr_member_has_the_offset():
    state = leader(end=0)
    state.follower_fetched(2, 0, 0, T0)
    state.follower_fetched(3, 0, 0, T0)
    required = 5  # a produce whose set holds offsets 0..4
    state.leader_appended(required)
    assert not acks_all_satisfied(state.high_watermark, required)
    state.follower_fetched(2, 5, 5, T0 + 1)
    assert not acks_all_satisfied(state.high_watermark, required)
    outcome = state.follower_fetched(3, 5, 5, T0 + 2)
    assert outcome.hw_moved and acks_all_satisfied(outcome.high_watermark, required)


def test_acks_all_completes_when_the_missing_follower_leaves_the_isr():
    state = leader(isr=[1, 2], assigned=[1, 2], end=0)
    state.follower_fetched(2, 0, 0, T0)
    state.leader_appended(3)
    assert not acks_all_satisfied(state.high_watermark, 3)
    shrunk = state.shrink_isr(T0 + LAG + 1, LAG)
    assert shrunk == [1]
    assert acks_all_satisfied(state.isr_written(shrunk, 9), 3)
    assert not enough_replicas(state.isr, 2)


def test_enough_replicas():
    assert enough_replicas([1, 2], 2)
    assert not enough_replicas([1], 2)
    assert enough_replicas([1], 1)


def test_fetch_from_unassigned_replica_is_refused():
    state = leader()
    with pytest.raises(NotAssignedReplica, match="replica 9 is not one of the assigned replicas") as info:
        state.follower_fetched(9, 0, 0, T0)
    assert info.value.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    with pytest.raises(NotAssignedReplica):
        state.follower_fetched(1, 0, 0, T0)  # the leader itself


def test_negative_fetch_offset_is_refused():
    with pytest.raises(ValueError, match="negative"):
        leader().follower_fetched(2, -1, 0, T0)


def test_leader_must_be_in_the_isr():
    with pytest.raises(ValueError, match="leader 1 is not in the ISR"):
        leader(isr=[2, 3])
    with pytest.raises(ValueError, match="not in the ISR"):
        leader().isr_written([2], 9)


def test_new_leader_and_isr_for_the_same_leader_keeps_follower_positions():
    state = leader(isr=[1, 2], assigned=[1, 2, 3], end=10)
    state.follower_fetched(2, 10, 10, T0)
    assert state.high_watermark == 10
    hw = state.leader_and_isr(assigned=[1, 2, 3], isr=[1, 2, 3], leader_epoch=5, zk_version=9,
                              leader_end_offset=12, now_ms=T0 + 1)
    assert hw == 10  # 3 is now in the ISR, position unknown
    assert (state.leader_epoch, state.zk_version, state.isr) == (5, 9, [1, 2, 3])
    assert state.follower_end_offsets() == {2: 10, 3: UNKNOWN_OFFSET}
    state.follower_fetched(3, 12, 12, T0 + 2)
    assert state.follower_fetched(2, 12, 12, T0 + 3).high_watermark == 12
