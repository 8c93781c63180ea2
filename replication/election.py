"""Leader election as the controller decides it (Kafka 0.10.2's PartitionLeaderSelector.scala).

Each selector takes the partition's assigned replicas (preferred leader first), its current
ISR and the live brokers, and returns ``(leader, new_isr)``, or None where Kafka throws
NoReplicaOnline / StateChangeFailed. The caller bumps the leader epoch and writes the result
to ZooKeeper with the znode version it read; ZooKeeper, not this module, settles races.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

Election = tuple[int, list[int]]


def offline_leader(assigned: Sequence[int], isr: Sequence[int], live: Collection[int], *,
                   unclean: bool) -> Election | None:
    """The leader died or the partition is new: the first live ISR member in assignment order,
    ISR shrunk to its live members. With no ISR member alive, ``unclean`` (the topic's
    ``unclean.leader.election.enable``) allows the first live assigned replica, alone in the
    ISR; it may lack acknowledged messages, and the others will truncate to its log."""
    live_isr = [r for r in isr if r in live]
    if live_isr:
        leader = next((r for r in assigned if r in live_isr), None)
        return None if leader is None else (leader, live_isr)
    if not unclean:
        return None
    leader = next((r for r in assigned if r in live), None)
    return None if leader is None else (leader, [leader])


def preferred_leader(assigned: Sequence[int], isr: Sequence[int], live: Collection[int]) -> Election | None:
    """Move leadership back to the preferred replica (assigned[0]) if it is live and in sync.

    Kafka also refuses when assigned[0] already leads; the caller knows the current leader
    and skips the election then."""
    if not assigned:
        return None
    preferred = assigned[0]
    if preferred in live and preferred in isr:
        return preferred, list(isr)
    return None


def controlled_shutdown_leader(assigned: Sequence[int], isr: Sequence[int], live: Collection[int],
                               shutting_down: Collection[int]) -> Election | None:
    """A broker asked to shut down cleanly: its partitions move to the first live assigned
    replica still in the ISR once the shutting-down brokers are out of it."""
    new_isr = [r for r in isr if r not in shutting_down]
    leader = next((r for r in assigned if r in live and r in new_isr), None)
    return None if leader is None else (leader, new_isr)


def isr_without(isr: Sequence[int], dead: int, *, unclean: bool = False) -> list[int]:
    """The ISR of a partition whose follower ``dead`` went away (KafkaController.removeReplicaFromIsr).

    The last member is kept unless unclean election is enabled: with it gone the ISR
    would be empty and only an unclean election could bring the partition back, whereas
    the kept member can lead again cleanly when it returns."""
    new_isr = [r for r in isr if r != dead]
    if not new_isr and not unclean:
        return list(isr)
    return new_isr
