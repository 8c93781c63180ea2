"""Where a follower truncates its log before it fetches from a new leader (KIP-101, with the
divergence case KIP-279 fixed), and which leader epochs it then records.

Truncating to the high watermark, as Kafka did before KIP-101, is wrong both ways: a follower's
high watermark lags the leader's, so it can throw away messages the leader already
acknowledged (KIP-101 scenario 1), and after a crash of every replica, or an unclean election,
it can keep messages the new leader never had, so the logs diverge (scenario 2, seed 000's
unclean election). Leader epochs fix both: an epoch is one leader's term, so two replicas
that both hold epoch e hold the same messages from its start up to where the shorter of the
two ends it. The follower truncates to that point for the latest epoch the two share.

Magic 0/1 message sets carry no epoch, and OffsetForLeaderEpoch v0 answers only an end offset
per requested epoch (LeaderEpochCache.end_offset_for: the start of the lowest epoch above e,
the log end for the latest epoch, -1 above the latest or when the leader has no epochs). One
answer cannot tell whether the leader has epoch e itself, which is how KIP-101 as first
shipped kept divergent data (KIP-279): a follower holding epoch 2 that the leader never had
was told "epoch 2 ends where epoch 3 starts" and kept its epoch-2 messages. So the follower
asks, in one request, for every epoch from just below its own first epoch up to the leader's
epoch, and rebuilds the leader's epoch map over that range from the answers: epoch k+1 exists
and starts at end(k) exactly when end(k) != end(k+1), since the cache never holds two epochs
starting at the same offset; the leader's latest epoch exists even when still empty.

The lowest epoch asked for cannot be rebuilt (its start would be the answer for the epoch
below it). It is the epoch just below the follower's first, so it does not matter, except for
epoch 0: every partition starts with epoch 0 at offset 0 (Log.create), so a leader that
answers for epoch 0 is taken to hold it from offset 0, unless that answer is 0 (a later epoch
started at 0 and replaced it). A leader whose history really starts later (its cache was
emptied, or retention moved its first epoch) then seems to share epoch 0 with the follower,
which keeps its epoch-0 messages up to where the leader's first known epoch starts: what
Kafka since KIP-279 does for any epoch below a leader's first (it answers that epoch's start).

All of this is exact only while a follower's cache describes its log: it must never hold a
message of an epoch whose start it has not recorded. Kafka since 0.11 reads the epoch off each
batch; a magic 0/1 set carries none. So a follower could fetch what its leader wrote in a new
epoch of its own before the follower's LeaderAndIsr for that epoch came (in a controlled
shutdown it never comes), and if it restarted before learning the epoch it truncated to where
the old epoch ends at the leader, below messages it holds identically, below its high
watermark (simulator seed 13). Every request of the fetcher therefore names the follower's
epoch, and the leader answers only in that epoch (KIP-320's fencing, ``replication.fetcher``).
Clamping the point at the follower's high watermark instead would not be safe: a follower that
missed a leader change takes a high watermark that covers messages only its old leader had,
and after a power loss of every in-sync replica committed messages are gone from the new leader.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from minikafka.storage.leader_epoch import UNDEFINED_EPOCH_OFFSET

EpochEntries = Sequence[tuple[int, int]]  # [(epoch, start_offset), ...] in increasing order


def truncates_on_leader_and_isr(following: int | None, following_epoch: int, leader: int, leader_epoch: int) -> bool:
    """Whether a LeaderAndIsr that makes this broker a follower of ``leader`` at ``leader_epoch``
    sends it through truncation again; ``following`` is the leader it follows now at
    ``following_epoch`` (None: it led, or had no replica).

    Only a new leader can hold a history this replica's log diverges from. The next epoch of
    the leader it already follows (an ISR change) cannot: the log was truncated against that
    leader and has only appended what it fetched from it since, a prefix of the leader's log.
    Kafka's Partition.makeFollower returns false then, and ReplicaManager.makeFollowers does
    not truncate (defect 1 of issue 23 was truncating anyway). An epoch that skips one is a
    LeaderAndIsr this broker never got (lost, or sent while it was stopped): another broker may
    have led in between, and the leader it follows may have truncated its own log below ours
    meanwhile, so it truncates (Kafka 2.1, KAFKA-7164)."""
    return following != leader or leader_epoch > following_epoch + 1


def epochs_to_query(local_entries: EpochEntries, leader_epoch: int) -> list[int]:
    """The epochs to ask the leader about in one OffsetForLeaderEpoch request, lowest first."""
    if leader_epoch < 0:
        raise ValueError(f"leader epoch {leader_epoch} must be >= 0")
    first_local = local_entries[0][0] if local_entries else 0
    lowest = min(max(0, first_local - 1), leader_epoch)
    return list(range(lowest, leader_epoch + 1))


def leader_epochs_from_answers(answers: Mapping[int, int], leader_epoch: int) -> list[tuple[int, int]]:
    """The leader's ``(epoch, start_offset)`` entries, rebuilt from its answers to the epochs of
    ``epochs_to_query`` (``{epoch: end_offset}``), for the range those answers cover.

    An epoch whose start the answers cannot give is left out (a leader that answers -1 below
    its first epoch, as Kafka before KIP-279 did, hides its first epoch's start); leaving an
    epoch out can only make the follower truncate further, never keep a divergent message.
    Raises ValueError for answers that are not the range ``epochs_to_query`` asks for, or whose
    offsets go backwards (a leader's epochs cannot end before earlier ones)."""
    epochs = _checked_range(answers, leader_epoch)
    known = [e for e in epochs if answers[e] != UNDEFINED_EPOCH_OFFSET]
    if not known:
        return []
    latest = known[-1]  # above the leader's latest epoch every answer is -1
    entries = []
    if epochs[0] == 0 and answers[0] != UNDEFINED_EPOCH_OFFSET and (answers[0] > 0 or latest == 0):
        # An answer of 0 for epoch 0 below a later epoch means that epoch replaced epoch 0
        # before anything was written in it: the cache no longer holds epoch 0.
        entries.append((0, 0))
    for epoch in epochs[1:latest - epochs[0] + 1]:
        below, end = answers[epoch - 1], answers[epoch]
        if below == UNDEFINED_EPOCH_OFFSET:
            continue
        if below != end or epoch == latest:
            entries.append((epoch, below))
    return entries


def truncation_offset(local_entries: EpochEntries, local_end_offset: int, leader_entries: EpochEntries,
                      high_watermark: int, *, leader_end_offset: int | None = None) -> int:
    """The offset the follower truncates its log to (keeping everything below it).

    The latest epoch in both maps is where the two logs last agree: the point is where the
    earlier of the two copies of that epoch ends. The end of an epoch is the start of the next
    one in that map, or the log end for the last (``leader_end_offset`` for the leader's; None
    leaves the leader's last epoch open-ended). With no shared epoch, every epoch either side
    holds from the follower's first epoch on is unknown to the other: the point is the
    earlier of where those histories start on either side. Only when either map is empty is
    there nothing to go on but the high watermark.
    Never above ``local_end_offset``."""
    if not local_entries or not leader_entries:
        return max(0, min(high_watermark, local_end_offset))
    local = dict(local_entries)
    shared = [e for e, _ in leader_entries if e in local]
    if not shared:
        first_local_epoch, first_local_start = local_entries[0]
        later = [start for e, start in leader_entries if e >= first_local_epoch]
        leader_from = later[0] if later else (float("inf") if leader_end_offset is None else leader_end_offset)
        point = min(first_local_start, leader_from)
    else:
        epoch = shared[-1]
        point = min(_end_of(local_entries, epoch, local_end_offset), _end_of(leader_entries, epoch, leader_end_offset))
    return max(0, min(point, local_end_offset))


def truncation_offset_from_answers(local_entries: EpochEntries, local_end_offset: int, answers: Mapping[int, int],
                                   leader_epoch: int, high_watermark: int) -> int:
    """``truncation_offset`` straight from the OffsetForLeaderEpoch answers: the follower's one call.

    Handles the case the rebuilt map alone cannot: a leader whose only epoch in the range is the
    lowest one asked for (it has not yet recorded ``leader_epoch``; its answer for that epoch is
    its log end): everything from the follower's first epoch on is then unknown to it."""
    leader_entries = leader_epochs_from_answers(answers, leader_epoch)
    known = [answers[e] for e in sorted(answers) if answers[e] != UNDEFINED_EPOCH_OFFSET]
    if not known or not local_entries:
        return max(0, min(high_watermark, local_end_offset))
    if not leader_entries:
        return max(0, min(local_entries[0][1], known[0], local_end_offset))
    return truncation_offset(local_entries, local_end_offset, leader_entries, high_watermark,
                             leader_end_offset=known[-1])


def epochs_to_query_below(answers: Mapping[int, int], truncation_point: int) -> list[int]:
    """The epochs below the first request's range to ask about in a second request, or [] when
    none are needed.

    They are needed only when the follower will fetch leader messages from epochs below that
    range, whose starts the first answers cannot give: when no epoch in the range holds the
    leader's messages at ``truncation_point`` (it shares no epoch with the follower, whose
    cache the truncation then empties). Merged into the first answers, the second answers give
    ``leader_epochs_from_answers`` the leader's whole map for ``epochs_to_record``; the
    truncation point stays the one the first answers gave."""
    lowest = min(answers)
    if lowest == 0:
        return []
    first_start_in_range = answers[lowest]  # where the leader's epochs above ``lowest`` start
    if first_start_in_range != UNDEFINED_EPOCH_OFFSET and truncation_point >= first_start_in_range:
        return []
    return list(range(0, lowest))


def epochs_to_record(leader_entries: EpochEntries, from_offset: int) -> list[tuple[int, int]]:
    """The leader epochs a follower that truncated to ``from_offset`` records into its own cache,
    so that its leader-epoch-checkpoint ends up as the leader's: the epoch covering
    ``from_offset`` and every later one. Record each (LeaderEpochCache.assign) once the log end
    has reached its start (``epochs_reached``): an epoch recorded beyond the log end would
    claim offsets the follower does not hold if it became leader. The covering epoch is
    normally the follower's own latest already, which ``assign`` ignores."""
    starts = [start for _, start in leader_entries]
    covering = max(bisect.bisect_right(starts, from_offset) - 1, 0)
    return list(leader_entries[covering:])


def epochs_reached(pending: EpochEntries, log_end_offset: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Split ``pending`` epochs into those to record now (start <= log end) and the rest."""
    due = [(e, s) for e, s in pending if s <= log_end_offset]
    later = [(e, s) for e, s in pending if s > log_end_offset]
    return due, later


def _end_of(entries: EpochEntries, epoch: int, log_end: int | None) -> int | float:
    i = next(i for i, (e, _) in enumerate(entries) if e == epoch)
    if i + 1 < len(entries):
        return entries[i + 1][1]
    return float("inf") if log_end is None else log_end


def _checked_range(answers: Mapping[int, int], leader_epoch: int) -> list[int]:
    epochs = sorted(answers)
    if not epochs or epochs != list(range(epochs[0], leader_epoch + 1)):
        raise ValueError(f"answers must cover a range of epochs ending at {leader_epoch}: {epochs}")
    known = [answers[e] for e in epochs if answers[e] != UNDEFINED_EPOCH_OFFSET]
    if any(a < UNDEFINED_EPOCH_OFFSET for a in answers.values()) or known != sorted(known):
        raise ValueError(f"end offsets must be -1 or non-decreasing by epoch: {dict(answers)}")
    return epochs
