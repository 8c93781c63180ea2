"""What the leader of one partition decides: ISR membership and the high watermark
(Kafka 0.10.2's Partition.scala and Replica.scala, leader side).

Events come in as method calls with the time passed in (``now_ms``); decisions come out as
return values: the new high watermark, an ISR to write to ZooKeeper. Nothing here does I/O:
the caller writes the ISR with the znode version and reports back with ``isr_written``, and
completes waiting ``acks=-1`` produces when the high watermark passes their offsets.

High watermark rule (Partition.maybeIncrementLeaderHW): the smallest log end offset over the
leader, the ISR, and the assigned replicas that were caught up within ``lag_time_max_ms`` but
are not yet in the ISR. Counting the last ones is Kafka's: it holds the high watermark back
for a replica on its way into the ISR, so that replica does not chase a high watermark that
runs ahead with every produce, and joins the ISR already holding everything committed. With
only the leader in the ISR and no follower caught up, the high watermark is the leader's end.

A follower's log end offset is unknown until its first fetch (Partition.makeLeader resets it to
Kafka's UnknownOffset, which compares below every offset): until each replica the rule counts
has fetched once, the high watermark stays where the new leader's checkpoint left it. It only
ever moves forwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from minikafka.protocol.errors import ErrorCode

UNKNOWN_OFFSET = -1
DEFAULT_LAG_TIME_MAX_MS = 10_000  # replica.lag.time.max.ms


class NotAssignedReplica(ValueError):
    """A fetch from a replica the partition is not assigned to (Kafka's NotAssignedReplicaException,
    which 0.10.2 answers as an unknown error)."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


@dataclasses.dataclass(frozen=True)
class FetchOutcome:
    high_watermark: int
    hw_moved: bool
    expand_isr_to: list[int] | None  # write this ISR to ZooKeeper, then call isr_written


@dataclasses.dataclass
class _Follower:
    end_offset: int | None  # None: no fetch since this broker became leader
    last_caught_up_ms: int | None  # None: never caught up under this leader
    last_fetch_leader_end: int
    last_fetch_ms: int


def acks_all_satisfied(high_watermark: int, required_offset: int) -> bool:
    """An ``acks=-1`` produce whose set ends just below ``required_offset`` (its last offset + 1)
    may be answered: every ISR member has it."""
    return high_watermark >= required_offset


def enough_replicas(isr: Sequence[int], min_isr: int) -> bool:
    """``min.insync.replicas``: an ``acks=-1`` produce is refused (NOT_ENOUGH_REPLICAS) before the
    append, or answered NOT_ENOUGH_REPLICAS_AFTER_APPEND after it, when this is False."""
    return len(isr) >= min_isr


class LeaderState:
    """One partition this broker leads: follower positions, ISR, high watermark."""

    def __init__(self, *, leader_id: int, assigned: list[int], isr: list[int], leader_epoch: int,
                 zk_version: int, leader_end_offset: int, high_watermark: int, now_ms: int,
                 lag_time_max_ms: int = DEFAULT_LAG_TIME_MAX_MS) -> None:
        _check_leader_in(leader_id, isr)
        self.leader_id = leader_id
        self.lag_time_max_ms = lag_time_max_ms
        # The checkpointed high watermark may be stale but is never above what the log holds.
        self.high_watermark = max(0, min(high_watermark, leader_end_offset))
        self._followers: dict[int, _Follower] = {}
        self.leader_epoch = leader_epoch
        self._leader_end = leader_end_offset
        # The leader's log end when its current epoch began here (Kafka 2.1+'s
        # leaderEpochStartOffsetOpt, KAFKA-7128): a follower joins the ISR only once it holds
        # that much. The high watermark alone is not enough: a leader restarted with a stale
        # checkpoint (or one that took over below what was committed) would admit a follower
        # missing committed offsets, which, elected next, truncates them everywhere.
        self.epoch_start_offset = leader_end_offset
        self._now = now_ms
        self._apply_controller_state(assigned, isr, zk_version, now_ms)
        self._maybe_increment_hw(now_ms)

    # -- events ------------------------------------------------------------------------------

    def leader_and_isr(self, *, assigned: list[int], isr: list[int], leader_epoch: int, zk_version: int,
                       leader_end_offset: int, now_ms: int) -> int:
        """A LeaderAndIsr that keeps this broker leader (a new epoch, ISR or assignment):
        known follower positions stay (Kafka's makeLeader for a broker already leading).
        Returns the high watermark."""
        _check_leader_in(self.leader_id, isr)
        if leader_epoch != self.leader_epoch:
            self.epoch_start_offset = leader_end_offset
        self.leader_epoch = leader_epoch
        self._leader_end = leader_end_offset
        self._tick(now_ms)
        self._apply_controller_state(assigned, isr, zk_version, now_ms)
        self._maybe_increment_hw(now_ms)
        return self.high_watermark

    def leader_appended(self, leader_end_offset: int, now_ms: int | None = None) -> int:
        """The leader's log now ends at ``leader_end_offset``; returns the high watermark.
        ``now_ms`` defaults to the latest time any event brought."""
        self._leader_end = leader_end_offset
        now = self._tick(now_ms)
        self._maybe_increment_hw(now)
        return self.high_watermark

    def follower_fetched(self, replica_id: int, fetch_offset: int, leader_end_offset: int,
                         now_ms: int) -> FetchOutcome:
        """A follower fetched from ``fetch_offset``, so its log ends there; the leader's log
        ended at ``leader_end_offset`` when the fetch was served. Raises NotAssignedReplica."""
        follower = self._followers.get(replica_id)
        if follower is None:
            raise NotAssignedReplica(
                f"replica {replica_id} is not one of the assigned replicas {self.assigned} (leader {self.leader_id})"
            )
        if fetch_offset < 0:
            raise ValueError(f"replica {replica_id} fetched from negative offset {fetch_offset}")
        now = self._tick(now_ms)
        self._leader_end = leader_end_offset
        # Replica.updateLogReadResult: caught up if it asked for everything the leader had, or
        # for everything the leader had at its previous fetch (it was caught up then).
        if fetch_offset >= leader_end_offset:
            follower.last_caught_up_ms = _later(follower.last_caught_up_ms, now)
        elif fetch_offset >= follower.last_fetch_leader_end:
            follower.last_caught_up_ms = _later(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.end_offset = fetch_offset
        follower.last_fetch_leader_end = leader_end_offset
        follower.last_fetch_ms = now
        # Partition.maybeExpandIsr (2.8's isFollowerInSync): judged against the high watermark
        # before this fetch moves it, and the epoch's start (see __init__).
        expand = None
        if (replica_id not in self.isr and replica_id in self.assigned and fetch_offset >= self.high_watermark
                and fetch_offset >= self.epoch_start_offset):
            expand = self.isr + [replica_id]
        moved = self._maybe_increment_hw(now)
        return FetchOutcome(self.high_watermark, moved, expand)

    def shrink_isr(self, now_ms: int, lag_time_max_ms: int | None = None) -> list[int] | None:
        """The ISR without followers that were not caught up within ``lag_time_max_ms`` (default:
        the one given at construction), or None if none lag. Stuck and slow followers alike
        drop out: both show as an old last-caught-up time. The leader always stays."""
        now = self._tick(now_ms)
        lag = self.lag_time_max_ms if lag_time_max_ms is None else lag_time_max_ms
        lagging = set()
        for replica in self.isr:
            follower = self._followers.get(replica)
            if follower is None:
                continue  # the leader
            if follower.last_caught_up_ms is None or now - follower.last_caught_up_ms > lag:
                lagging.add(replica)
        if not lagging:
            return None
        return [r for r in self.isr if r not in lagging]

    def isr_written(self, isr: list[int], zk_version: int) -> int:
        """ZooKeeper now holds ``isr`` at ``zk_version``; returns the high watermark, which may move
        when a lagging follower left the ISR."""
        _check_leader_in(self.leader_id, isr)
        self.isr = list(isr)
        self.zk_version = zk_version
        for replica in self.isr:
            if replica != self.leader_id and replica not in self._followers:
                self._followers[replica] = self._new_follower(in_isr=True, now_ms=self._now)
        self._maybe_increment_hw(self._now)
        return self.high_watermark

    # -- queries -----------------------------------------------------------------------------

    def follower_end_offsets(self) -> dict[int, int]:
        """Each follower's log end offset as last fetched, UNKNOWN_OFFSET (-1) before its first fetch."""
        return {r: (UNKNOWN_OFFSET if f.end_offset is None else f.end_offset) for r, f in self._followers.items()}

    @property
    def leader_end_offset(self) -> int:
        return self._leader_end

    # -- internals ---------------------------------------------------------------------------

    def _tick(self, now_ms: int | None) -> int:
        if now_ms is not None:
            self._now = max(self._now, now_ms)
        return self._now

    def _new_follower(self, *, in_isr: bool, now_ms: int) -> _Follower:
        # Partition.makeLeader: ISR members count as caught up now, so the leader gives them
        # a full lag_time_max_ms to fetch before it drops them; others have to earn it.
        return _Follower(None, now_ms if in_isr else None, self._leader_end, now_ms)

    def _apply_controller_state(self, assigned: list[int], isr: list[int], zk_version: int, now_ms: int) -> None:
        self.assigned = list(assigned)
        self.isr = list(isr)
        self.zk_version = zk_version
        replicas = [r for r in dict.fromkeys(self.assigned + self.isr) if r != self.leader_id]
        followers = {}
        for r in replicas:
            follower = self._followers.get(r) or self._new_follower(in_isr=r in self.isr, now_ms=now_ms)
            # Replica.resetLastCaughtUpTime, on every LeaderAndIsr: the clock restarts for all.
            follower.last_caught_up_ms = now_ms if r in self.isr else None
            follower.last_fetch_leader_end = self._leader_end
            follower.last_fetch_ms = now_ms
            followers[r] = follower
        self._followers = followers

    def _maybe_increment_hw(self, now_ms: int) -> bool:
        ends = [self._leader_end]
        for replica, follower in self._followers.items():
            counted = replica in self.isr or (
                replica in self.assigned
                and follower.last_caught_up_ms is not None
                and now_ms - follower.last_caught_up_ms <= self.lag_time_max_ms
            )
            if not counted:
                continue
            if follower.end_offset is None:
                return False
            ends.append(follower.end_offset)
        new_hw = min(ends)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False


def _check_leader_in(leader_id: int, isr: Sequence[int]) -> None:
    if leader_id not in isr:
        raise ValueError(f"leader {leader_id} is not in the ISR {list(isr)}")


def _later(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)
