"""Leader election as Kafka 0.10.2's controller decides it."""

from __future__ import annotations

from minikafka.replication.election import (
    controlled_shutdown_leader,
    isr_without,
    offline_leader,
    preferred_leader,
)


class TestOfflineLeader:
    def test_first_live_isr_member_in_assignment_order_leads(self):
        # ISR order is not assignment order: the assignment decides.
        assert offline_leader([3, 1, 2], [2, 1, 3], {1, 2}, unclean=False) == (1, [2, 1])

    def test_isr_keeps_only_live_members_in_their_order(self):
        assert offline_leader([1, 2, 3], [3, 2, 1], {2, 3}, unclean=False) == (2, [3, 2])

    def test_live_non_isr_replica_is_not_chosen_while_an_isr_member_lives(self):
        assert offline_leader([1, 2, 3], [3], {1, 2, 3}, unclean=True) == (3, [3])

    def test_no_live_isr_member_and_unclean_disabled_means_no_leader(self):
        assert offline_leader([1, 2, 3], [1], {2, 3}, unclean=False) is None

    def test_unclean_election_takes_first_live_assigned_replica_alone(self):
        assert offline_leader([1, 2, 3], [1], {3, 2}, unclean=True) == (2, [2])

    def test_nothing_alive_means_no_leader_even_unclean(self):
        assert offline_leader([1, 2], [1, 2], {5}, unclean=True) is None

    def test_live_isr_member_outside_the_assignment_cannot_lead(self):
        # Kafka would take .head of an empty list here; we decline to elect.
        assert offline_leader([1, 2], [7], {7}, unclean=False) is None


class TestPreferredLeader:
    def test_preferred_replica_in_isr_and_live_leads_isr_unchanged(self):
        assert preferred_leader([2, 1, 3], [1, 3, 2], {1, 2, 3}) == (2, [1, 3, 2])

    def test_preferred_replica_not_in_isr(self):
        assert preferred_leader([2, 1, 3], [1, 3], {1, 2, 3}) is None

    def test_preferred_replica_dead(self):
        assert preferred_leader([2, 1, 3], [1, 2, 3], {1, 3}) is None

    def test_no_assignment(self):
        assert preferred_leader([], [1], {1}) is None


class TestControlledShutdown:
    def test_leadership_moves_to_first_remaining_isr_member_in_assignment_order(self):
        assert controlled_shutdown_leader([1, 2, 3], [1, 3, 2], {1, 2, 3}, {1}) == (2, [3, 2])

    def test_dead_isr_member_is_skipped_as_leader_but_stays_in_isr(self):
        # Kafka filters only shutting-down brokers from the ISR; a dead one is left to the
        # broker-failure path.
        assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 3}, {1}) == (3, [2, 3])

    def test_only_shutting_down_brokers_in_isr(self):
        assert controlled_shutdown_leader([1, 2, 3], [1], {1, 2, 3}, {1}) is None

    def test_several_brokers_shutting_down(self):
        assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}) == (3, [3])


class TestIsrWithout:
    def test_dead_follower_leaves_the_isr(self):
        assert isr_without([1, 2, 3], 2) == [1, 3]

    def test_broker_not_in_isr_changes_nothing(self):
        assert isr_without([1, 3], 2) == [1, 3]

    def test_last_member_is_kept_without_unclean_election(self):
        assert isr_without([2], 2) == [2]

    def test_last_member_goes_when_unclean_election_is_enabled(self):
        assert isr_without([2], 2, unclean=True) == []
