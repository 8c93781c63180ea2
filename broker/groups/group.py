"""In-memory state of one consumer group: its members, generation, leader and offsets.

This is data plus the rules that only look at one group (state transitions, protocol
selection, which members have rejoined). The decisions that involve time, persistence and
answering requests live in :mod:`broker.groups.membership` and :mod:`broker.groups.offsets`.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from minikafka.broker.groups.records import OffsetAndMetadata, StoredGroup, StoredMember
from minikafka.broker.groups.timers import Timer


class GroupState(enum.Enum):
    """Kafka's group states; the value is the name DescribeGroups reports.

    Kafka 0.10.2 called COMPLETING_REBALANCE "AwaitingSync"; Kafka 2.0 renamed it and current
    clients (librdkafka's ``ConsumerGroupState``, Kafka's admin tools) only know the new name.
    """

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# state -> the states it may be entered from (Kafka's GroupMetadata.validPreviousStates)
_VALID_PREVIOUS = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


@dataclass(eq=False)
class MemberMetadata:
    """One member of a group.

    ``join_callback`` / ``sync_callback`` are set while the member's JoinGroup / SyncGroup
    request waits for the rebalance to get far enough to answer it; a member with a pending
    callback is never expired by its session timeout (its rebalance timeout bounds the wait).
    """

    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_callback: Callable[[Any], None] | None = None
    sync_callback: Callable[[Any], None] | None = None
    last_heartbeat_ms: int = 0
    heartbeat_timer: Timer | None = None
    # KIP-345: a static member's id given by its user; its member id changes each time it
    # joins without one, but the member (and its assignment) stays.
    group_instance_id: str | None = None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a rejoin carries exactly the protocols (and metadata) we already have."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(eq=False)
class GroupMetadata:
    """One consumer group.

    ``persisted`` is the group metadata value last appended to (or loaded from) the log: what
    a snapshot holds for this group, which may lag the live state during a rebalance exactly
    as Kafka's log does. ``rebalance_epoch`` numbers rebalances so a timer armed for an old
    one recognises itself as stale. ``initial_delay_pending`` holds the first rebalance of a
    new group open for ``group.initial.rebalance.delay.ms``; ``new_member_added`` extends it.
    """

    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # (topic, partition) -> log offset of the commit event ``offsets`` holds, for commits
    # of this process (acknowledged in any order in a cluster).
    offset_positions: dict[tuple[str, int], int] = field(default_factory=dict)
    # Kafka's pendingOffsetCommits: (topic, partition) -> (log offset, commit) of the newest
    # commit appended but not yet committed (below the high watermark). Expiry leaves these
    # partitions and their group alone, and a snapshot taken meanwhile holds them.
    pending_commits: dict[tuple[str, int], tuple[int, OffsetAndMetadata]] = field(default_factory=dict)
    # Kafka's pendingTransactionalOffsetCommits: producer id -> (topic, partition) -> (log
    # offset, commit) of the TxnOffsetCommits of its open transaction. They enter ``offsets``
    # when its COMMIT marker is written (if newer than what is there), vanish with an ABORT.
    pending_txn_offsets: dict[int, dict[tuple[str, int], tuple[int, OffsetAndMetadata]]] = field(
        default_factory=dict)
    persisted: bytes | None = None
    rebalance_epoch: int = 0
    rebalance_timer: Timer | None = None
    initial_delay_pending: bool = False
    new_member_added: bool = False
    # group.instance.id -> member id of each static member (Kafka's staticMembers).
    static_members: dict[str, str] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED (JoinGroup v4+, KIP-394) whose member has
    # not joined with them yet, each with its expiry timer (Kafka's pendingMembers).
    pending_members: dict[str, Timer | None] = field(default_factory=dict)

    def has_offsets(self) -> bool:
        return bool(self.offsets or self.pending_commits or self.pending_txn_offsets)

    def pending_keys(self) -> set[tuple[str, int]]:
        """The partitions with a commit waiting for the high watermark or a transaction's end."""
        keys = set(self.pending_commits)
        for offsets in self.pending_txn_offsets.values():
            keys.update(offsets)
        return keys

    def has_pending_commit(self, key: tuple[str, int]) -> bool:
        """Kafka's hasPendingOffsetCommitsForTopicPartition: a commit of ``key`` waits for the
        high watermark or for its transaction to end (OffsetFetch's UNSTABLE_OFFSET_COMMIT)."""
        return key in self.pending_commits or any(key in offsets for offsets in self.pending_txn_offsets.values())

    def complete_txn_offsets(self, producer_id: int, commit: bool) -> None:
        """Kafka's completePendingTxnOffsetCommit: the transaction of ``producer_id`` ended;
        on commit each of its offsets replaces the committed one if it was appended after it."""
        pending = self.pending_txn_offsets.pop(producer_id, {})
        if not commit:
            return
        for key, (position, committed) in pending.items():
            if self.offset_positions.get(key, -1) < position:
                self.offsets[key] = committed
                self.offset_positions[key] = position

    def forget_pending_offsets(self, key: tuple[str, int]) -> None:
        """Kafka's removeOffsets for the commits still pending: ``key``'s offsets are gone."""
        self.pending_commits.pop(key, None)
        for producer_id in [pid for pid, offsets in self.pending_txn_offsets.items() if key in offsets]:
            del self.pending_txn_offsets[producer_id][key]

    def offsets_in_log(self) -> dict[tuple[str, int], OffsetAndMetadata]:
        """The offsets a fold of the log up to its end holds: the committed ones, replaced by
        any newer commit still waiting for the high watermark."""
        result = dict(self.offsets)
        for key, (position, committed) in self.pending_commits.items():
            if position > self.offset_positions.get(key, -1):
                result[key] = committed
        return result

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if member_id == self.leader_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member(self, group_instance_id: str | None) -> MemberMetadata | None:
        member_id = self.static_members.get(group_instance_id) if group_instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """Kafka's isStaticMemberFenced: the instance id belongs to another member id (the
        same instance joined again since, and this request comes from its older self)."""
        known = self.static_members.get(group_instance_id) if group_instance_id is not None else None
        return known is not None and known != member_id

    def replace_static_member(self, member: MemberMetadata, new_member_id: str) -> None:
        """Kafka's replaceGroupInstance: the static ``member`` goes on under ``new_member_id``
        (the leader too); its old id is unknown from now on."""
        del self.members[member.member_id]
        if self.leader_id == member.member_id:
            self.leader_id = new_member_id
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[member.group_instance_id] = new_member_id

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.join_callback is None]

    def all_members_joined(self) -> bool:
        """Kafka's hasAllMembersJoined: every member rejoined and no member id handed out
        with MEMBER_ID_REQUIRED still waits to be used."""
        return not self.not_yet_rejoined() and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        common = set(first.protocol_names())
        for member in members:
            common &= set(member.protocol_names())
        return common

    def supports_protocols(self, names: Iterable[str]) -> bool:
        """Whether a member offering ``names`` can join: with no members any non-empty list
        will do; otherwise it must share a protocol with everyone."""
        names = set(names)
        if not self.members:
            return bool(names)
        return bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """The protocol with most first-choice votes among the common ones; ties go to the
        one the longest-standing member prefers, so the choice is deterministic."""
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        best = max(votes.values())
        for member in self.members.values():
            choice = member.vote(candidates)
            if votes[choice] == best:
                return choice
        raise AssertionError("unreachable: some member cast the winning vote")

    def stored(self) -> StoredGroup:
        """The group metadata value of the current generation (members with assignments)."""
        members = tuple(
            StoredMember(m.member_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                         m.session_timeout_ms,
                         m.metadata(self.protocol) if self.protocol is not None else b"",
                         m.assignment, m.group_instance_id)
            for m in self.members.values())
        return StoredGroup(self.protocol_type or "", self.generation_id, self.protocol,
                           self.leader_id, members)
