"""What the simulator checks of its consumer groups (issue 31), from the answers members get:

* an acknowledged commit is never rewound: an OffsetFetch sent after a commit was
  acknowledged answers its value or a later one (values increase per group and partition in
  the order members send them), or -1 once the newest commit at or after it may have expired.
  Expiry is modelled from the coordinator's rule: a commit stored at ``t`` with retention
  ``r`` is removed by a pass at ``now`` when ``t + r < now``; ``t`` is not seen by the client
  but is no earlier than the commit was sent, so -1 is allowed only once ``sent + r`` has
  passed (to the millisecond of the brokers' clock);
* no partition is assigned to two members of one generation, and the members of a generation
  get what one leader proposed for that generation;
* a generation never goes back: once a SyncGroup of generation G was answered, no JoinGroup,
  SyncGroup or Heartbeat sent afterwards is answered as if an older generation were current.

A group is removed, and starts again at generation 1, once it is empty and its offsets have
expired; partition 0 is always committed with the broker's retention (a day), so the
generation checks start at a group's first acknowledged commit of it ("anchored").

Answers from a broker that ZooKeeper no longer names leader of the group's
``__consumer_offsets`` partition are a deposed coordinator's; as for produce (``Checker``),
that is a violation only when no fault kept it from being told within ``ZOMBIE_BOUND_S``. Its
reads (OffsetFetch, JoinGroup, Heartbeat) are not held to the checks above (Kafka 0.10.2's
deposed coordinator answers from its stale state too); its acknowledged commits and SyncGroup
assignments are, since both waited for the high watermark.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import trio

from minikafka.broker.groups.config import GroupConfig
from minikafka.broker.groups.coordinator import GROUP_METADATA_TOPIC
from minikafka.broker.groups.records import partition_for
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.simulation.brokers import OFFSETS_PARTITIONS


@dataclass
class Commit:
    """One OffsetCommit request, as the member saw it."""

    group: str
    generation: int
    values: dict[int, int]  # partition -> committed value
    retention_ms: int  # -1: the broker's offsets.retention.minutes
    sent_at: float
    answered_at: float | None = None
    errors: dict[int, int] = field(default_factory=dict)
    broker: int | None = None
    counted: bool = False  # answered NONE for some partition

    def acknowledged(self, partition: int) -> bool:
        return self.counted and self.errors.get(partition) == ErrorCode.NONE

    def may_expire_before(self, now: float) -> bool:
        retention = GroupConfig().offsets_retention_ms if self.retention_ms == -1 else self.retention_ms
        return int(self.sent_at * 1000) + retention < int(now * 1000)


class GroupChecker:
    def __init__(self, checker) -> None:
        self.checker = checker
        self.sim = checker.sim
        # __consumer_offsets partition -> its leaders as ZooKeeper said them (LeaderState)
        self.states: dict[int, list] = defaultdict(list)
        self._last_value: dict[tuple[str, int], int] = defaultdict(int)
        self.commits: dict[tuple[str, int], list[Commit]] = defaultdict(list)
        self.anchored_at: dict[str, float] = {}
        self.synced_top: dict[str, tuple[int, float]] = {}  # group -> (generation, answered at)
        self.owners: dict[tuple[str, int], dict[int, str]] = defaultdict(dict)
        self.proposals: dict[tuple[str, int], list[dict[str, list[int]]]] = defaultdict(list)
        self.received: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(dict)
        # What the run exercised, for the figures the command line prints.
        self.figures: Counter[str] = Counter()

    def _from_coordinator(self, group: str, broker: int) -> bool:
        """Whether ``broker`` answered as the coordinator ZooKeeper names (a violation if it
        is a deposed one that should know by now)."""
        partition = partition_for(group, OFFSETS_PARTITIONS)
        states = self.states.get(partition)
        if not states:
            return False
        if states[-1].leader == broker:
            return True
        self.figures["answers of a deposed coordinator"] += 1
        self.checker.check_deposed(broker, states, f"{GROUP_METADATA_TOPIC} p{partition}",
                                   f"answered a request of {group} as coordinator", trio.current_time())
        return False

    # ------------------------------------------------------------------ commits

    def next_value(self, group: str, partition: int) -> int:
        self._last_value[(group, partition)] += 1
        return self._last_value[(group, partition)]

    def committing(self, group: str, generation: int, values: dict[int, int], retention_ms: int) -> Commit:
        commit = Commit(group, generation, values, retention_ms, trio.current_time())
        for partition in values:
            self.commits[(group, partition)].append(commit)
        return commit

    def commit_answered(self, commit: Commit, errors: dict[int, int], broker: int) -> None:
        commit.answered_at = trio.current_time()
        commit.errors, commit.broker = errors, broker
        # An acknowledged commit waited for the high watermark: it counts whoever answered
        # (as an acknowledged acks=all produce does). An error answer (NOT_COORDINATOR above
        # all) is not a coordinator's.
        commit.counted = ErrorCode.NONE in errors.values()
        if commit.counted:
            self._from_coordinator(commit.group, broker)
        self.figures["commits acknowledged"] += any(commit.acknowledged(p) for p in commit.values)
        if commit.retention_ms == -1 and commit.acknowledged(0):
            self.anchored_at.setdefault(commit.group, commit.answered_at)

    def fetched(self, group: str, offsets: dict[int, int], broker: int, sent_at: float) -> None:
        if not self._from_coordinator(group, broker):
            return
        now = trio.current_time()
        self.figures["offset fetches checked"] += 1
        for partition, value in sorted(offsets.items()):
            commits = self.commits[(group, partition)]
            if value > self._last_value[(group, partition)]:
                self.checker.violation(("phantom-offset", group, partition, value),
                                       f"{group} p{partition}: OffsetFetch via broker {broker} answered {value}, "
                                       "which no member committed")
            acknowledged = [c for c in commits if c.acknowledged(partition) and c.answered_at <= sent_at]
            if not acknowledged:
                continue
            last = max(acknowledged, key=lambda c: c.values[partition])
            if value >= last.values[partition]:
                continue
            if value == -1 and any(c.values[partition] >= last.values[partition] and c.may_expire_before(now)
                                   for c in commits):
                self.figures["acknowledged offsets found expired"] += 1
                continue
            self.checker.violation(
                ("rewound", group, partition, last.values[partition]),
                f"{group} p{partition}: OffsetFetch sent at {sent_at:.3f} via broker {broker} answered {value}, "
                f"but {last.values[partition]} was acknowledged at {last.answered_at:.3f} by broker {last.broker} "
                f"(generation {last.generation}, retention {last.retention_ms} ms)")

    # ------------------------------------------------------------------ generations

    def generation_seen(self, group: str, generation: int, broker: int, sent_at: float, what: str) -> bool:
        """A successful answer that names ``generation`` current; False if it is not the
        ZooKeeper-named coordinator's."""
        if not self._from_coordinator(group, broker):
            return False
        top = self.synced_top.get(group)
        if top is not None and sent_at >= top[1] and generation < top[0]:
            self.checker.violation(("generation", group, generation),
                                   f"{group}: {what} sent at {sent_at:.3f} answered by broker {broker} as "
                                   f"generation {generation}, after generation {top[0]} was synced at {top[1]:.3f}")
        return True

    def proposed(self, group: str, generation: int, plan: dict[str, list[int]], sent_at: float) -> None:
        self.proposals[(group, generation)].append(plan)

    def synced(self, group: str, generation: int, member: str, owned: list[int], broker: int,
               sent_at: float) -> None:
        # A SyncGroup answer waited for the group metadata to reach the high watermark: its
        # assignment counts whoever answered.
        self.generation_seen(group, generation, broker, sent_at, "SyncGroup")
        anchored = self.anchored_at.get(group)
        if anchored is None or sent_at < anchored:
            return
        now = trio.current_time()
        if generation > self.synced_top.get(group, (-1, 0.0))[0]:
            self.synced_top[group] = (generation, now)
            self.figures["generations synced"] += 1
        key = (group, generation)
        owners = self.owners[key]
        for partition in owned:
            other = owners.setdefault(partition, member)
            if other != member:
                self.checker.violation(("owned-twice", group, generation, partition),
                                       f"{group} generation {generation}: p{partition} assigned to {other} and "
                                       f"to {member} (via broker {broker})")
        received = self.received[key]
        received[member] = owned
        if not any(all(plan.get(m) == got for m, got in received.items()) for plan in self.proposals[key]):
            self.checker.violation(("assignment", group, generation),
                                   f"{group} generation {generation}: members got {received}, which no leader "
                                   f"proposed (proposals: {self.proposals[key]})")
