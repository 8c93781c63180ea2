"""Committed offsets: OffsetCommit, OffsetFetch, and removing offsets that expired or whose
topic was deleted (Kafka's GroupCoordinator.handleCommitOffsets / handleFetchOffsets with
GroupMetadataManager.storeOffsets, getOffsets and cleanupGroupMetadata).

A commit is validated against the group's membership (a member of the current generation,
or generation -1 for a group without members), appended as offset events through the
:class:`broker.groups.store.GroupStore`, and enters the state OffsetFetch reads only once it
is committed; meanwhile it is one of the group's ``pending_commits``, which expiry leaves
alone and snapshots hold.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass

import trio

from minikafka.broker.groups.group import GroupMetadata, GroupState, MemberMetadata
from minikafka.broker.groups.records import OffsetAndMetadata, group_key, offset_key, offset_value
from minikafka.broker.groups.store import STORE_ERRORS, TXN_STORE_ERRORS, Write
from minikafka.protocol.errors import ErrorCode

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionCommit:
    """One partition of an OffsetCommit; ``commit_timestamp`` -1 means "now", ``leader_epoch``
    -1 "unknown" (before OffsetCommit v6)."""

    topic: str
    partition: int
    offset: int
    metadata: str | None
    commit_timestamp: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    metadata: str
    error: ErrorCode = ErrorCode.NONE
    leader_epoch: int = -1


class CommittedOffsets:
    """The committed offsets of the groups in ``ownership``'s partitions, stored by ``store``.
    ``schedule_heartbeat`` is the membership's: a member's commit keeps its session alive."""

    def __init__(self, config, clock, ownership, store,
                 schedule_heartbeat: Callable[[GroupMetadata, MemberMetadata, int], None]) -> None:
        self.config = config
        self.clock = clock
        self.ownership = ownership
        self.store = store
        self._schedule_heartbeat = schedule_heartbeat

    async def commit(self, group_id: str, member_id: str, generation_id: int,
                     retention_ms: int, commits: list[PartitionCommit],
                     group_instance_id: str | None = None) -> list[ErrorCode]:
        """OffsetCommit: store committed offsets; one error per commit, in order, answered once
        the commit is committed in ``__consumer_offsets`` (in a cluster: below its high
        watermark, or in the leader with ``offsets.commit.required.acks`` 1).

        ``retention_ms`` -1 means ``offsets.retention.minutes``; ``generation_id`` -1 with an
        empty ``member_id`` is a commit outside group management. As in Kafka, the empty group
        id is accepted here (old clients commit under it); only the membership APIs refuse it.
        Until the commit is committed OffsetFetch still answers the previous offsets."""
        errors, write = self._commit(group_id, member_id, generation_id, retention_ms, commits, group_instance_id)
        return await self._answer_when_committed(errors, write)

    async def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                         group_instance_id: str | None, generation_id: int,
                         commits: list[PartitionCommit]) -> list[ErrorCode]:
        """TxnOffsetCommit (Kafka 2.8's handleTxnCommitOffsets): store offsets as part of the
        transaction of ``producer_id``, a transactional batch with its id and epoch in
        ``__consumer_offsets``. They stay pending, invisible to OffsetFetch, until the
        transaction's marker is written (:meth:`complete_txn`).

        KIP-447 (v3): a member id or generation, when given, must be the group's current ones
        (a zombie of an older generation is fenced); without them (v0-v2, or a producer that
        is not a group member) any group takes the commit, members or not. An older producer
        epoch is refused by the log's producer state (INVALID_PRODUCER_EPOCH)."""
        error = self.ownership.check(group_id)
        if error:
            return [error] * len(commits)
        group = self.ownership.group(group_id)
        if group is None:
            group = self.ownership.add_group(group_id)
        if group.is_(GroupState.DEAD):
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif group.is_static_member_fenced(member_id, group_instance_id):
            error = ErrorCode.FENCED_INSTANCE_ID
        elif member_id and member_id not in group.members:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif generation_id >= 0 and generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error:
            return [error] * len(commits)
        errors, write = self._store_offsets(group, -1, commits, (producer_id, producer_epoch))
        return await self._answer_when_committed(errors, write)

    def complete_txn(self, producer_id: int, partitions: list[int], commit: bool) -> None:
        """Kafka's handleTxnCompletion: the marker ending the transaction of ``producer_id`` is
        written to these ``__consumer_offsets`` partitions; its offsets in their groups become
        the committed ones (commit) or vanish (abort). A partition this broker no longer
        serves is skipped: its new coordinator reads the marker from the log when it loads; one
        it is loading gets it once loaded."""
        for index in partitions:
            self.ownership.when_loaded(index, functools.partial(self.store.apply_marker,
                                                                producer_id=producer_id, commit=commit))

    async def _answer_when_committed(self, errors: list[ErrorCode], write: Write | None) -> list[ErrorCode]:
        if write is None:
            return errors
        # Applied (or taken back) by the store's task once the append is committed or failed,
        # whatever became of the request, as Kafka's append callback: a client gone meanwhile
        # (its request cancelled) must not leave an offset in the log that this coordinator
        # does not answer with.
        settled = trio.Event()
        outcome: list[ErrorCode] = []

        def settle(error: ErrorCode) -> None:
            if error == ErrorCode.NONE:
                write.apply()
            else:
                write.discard()
            outcome.append(error)
            settled.set()

        self.store.when_committed(write, {}, settle)
        await settled.wait()
        (error,) = outcome
        if error:
            error = STORE_ERRORS.get(error, error)
            return [error if e == ErrorCode.NONE else e for e in errors]
        return errors

    def commit_offsets(self, group_id: str, member_id: str, generation_id: int,
                       retention_ms: int, commits: list[PartitionCommit]) -> list[ErrorCode]:
        """:meth:`commit` for a single broker, whose appends are committed at once."""
        errors, write = self._commit(group_id, member_id, generation_id, retention_ms, commits)
        if write is not None:
            write.apply()
        return errors

    def _commit(self, group_id: str, member_id: str, generation_id: int, retention_ms: int,
                commits: list[PartitionCommit], group_instance_id: str | None = None
                ) -> tuple[list[ErrorCode], Write | None]:
        error = self.ownership.check(group_id, validate_id=False)
        if error:
            return [error] * len(commits), None
        group = self.ownership.group(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a group we do not know: a stale generation.
                return [ErrorCode.ILLEGAL_GENERATION] * len(commits), None
            group = self.ownership.add_group(group_id)
        if group.is_(GroupState.DEAD):
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif generation_id < 0 and group.is_(GroupState.EMPTY):
            error = ErrorCode.NONE
        elif group.is_static_member_fenced(member_id, group_instance_id):
            error = ErrorCode.FENCED_INSTANCE_ID
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS
        elif member_id not in group.members:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        else:
            self._schedule_heartbeat(group, group.members[member_id], self.clock.time_ms())
        if error:
            return [error] * len(commits), None
        return self._store_offsets(group, retention_ms, commits)

    def _store_offsets(self, group: GroupMetadata, retention_ms: int, commits: list[PartitionCommit],
                       producer: tuple[int, int] | None = None) -> tuple[list[ErrorCode], Write | None]:
        """Append the commits' events; ``producer`` (id, epoch) makes them the pending offsets
        of that producer's transaction instead of pending commits."""
        now = self.clock.time_ms()
        retention = self.config.offsets_retention_ms if retention_ms == -1 else retention_ms
        errors: list[ErrorCode] = []
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        for commit in commits:
            metadata = commit.metadata if commit.metadata is not None else ""
            if len(metadata) > self.config.offset_metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            committed_at = now if commit.commit_timestamp == -1 else commit.commit_timestamp
            accepted[(commit.topic, commit.partition)] = OffsetAndMetadata(
                commit.offset, metadata, committed_at, committed_at + retention, commit.leader_epoch)
            errors.append(ErrorCode.NONE)
        if not accepted:
            return errors, None
        events = [(offset_key(group.group_id, topic, partition), offset_value(committed))
                  for (topic, partition), committed in accepted.items()]
        store_error, write = self.store.append(group.group_id, events,
                                               STORE_ERRORS if producer is None else TXN_STORE_ERRORS, producer)
        if store_error:
            return [store_error if e == ErrorCode.NONE else e for e in errors], None
        position = write.last_offset
        if producer is not None:
            return errors, self._pending_txn_write(group, producer[0], accepted, write)
        for key, committed in accepted.items():
            group.pending_commits[key] = (position, committed)

        def settle() -> None:
            for key in accepted:
                if group.pending_commits.get(key, (None,))[0] == position:
                    del group.pending_commits[key]

        def apply() -> None:
            # As Kafka's completePendingOffsetWrite: a partition no longer pending (its topic
            # was deleted meanwhile) takes no offset.
            still_pending = [key for key in accepted if key in group.pending_commits]
            settle()
            # Commits of one group may be acknowledged out of order: an offset only ever
            # replaces one appended before it.
            for key in still_pending:
                committed = accepted[key]
                if group.offset_positions.get(key, -1) < position:
                    group.offsets[key] = committed
                    group.offset_positions[key] = position

        write.apply = apply
        write.discard = settle
        return errors, write

    @staticmethod
    def _pending_txn_write(group: GroupMetadata, producer_id: int,
                           accepted: dict[tuple[str, int], OffsetAndMetadata], write: Write) -> Write:
        """Kafka's prepareTxnOffsetCommit: the offsets wait in the group for their transaction's
        marker; a write that is not committed takes back what is still its own
        (failPendingTxnOffsetCommit)."""
        position = write.last_offset
        pending = group.pending_txn_offsets.setdefault(producer_id, {})
        for key, committed in accepted.items():
            pending[key] = (position, committed)

        def discard() -> None:
            offsets = group.pending_txn_offsets.get(producer_id, {})
            for key in accepted:
                if offsets.get(key, (None,))[0] == position:
                    del offsets[key]
            if not offsets:
                group.pending_txn_offsets.pop(producer_id, None)

        write.discard = discard
        return write

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      require_stable: bool = False) -> tuple[ErrorCode, list[FetchedOffset]]:
        """Committed offsets of ``partitions`` (None: every partition the group committed);
        a partition without a commit gets offset -1 and no error, as in Kafka.
        ``require_stable`` (KIP-447): a partition with a commit still pending (waiting for
        the high watermark or for its transaction to end) answers UNSTABLE_OFFSET_COMMIT, so
        the consumer retries instead of starting from an offset about to change."""
        error = self.ownership.check(group_id, validate_id=False)
        if error:
            return error, []
        group = self.ownership.group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            group = None
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            partitions = list(offsets)
        result = []
        for topic, partition in partitions:
            committed = offsets.get((topic, partition))
            if require_stable and group is not None and group.has_pending_commit((topic, partition)):
                result.append(FetchedOffset(topic, partition, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
            elif committed is None:
                result.append(FetchedOffset(topic, partition, -1, ""))
            else:
                result.append(_fetched(topic, partition, committed))
        return ErrorCode.NONE, result

    def expire_offsets(self, now: int) -> int:
        """Remove offsets whose expire timestamp passed (Kafka 0.10.2: in any group), and
        groups left empty without offsets; tombstones go to the log. Returns offsets removed."""
        # As Kafka's removeExpiredOffsets: a partition with a commit waiting for the high
        # watermark is not expired (its tombstone would land after that commit in the log
        # and remove it at the next load).
        removed = self._remove_offsets(
            lambda group: [tp for tp, committed in group.offsets.items()
                           if committed.expire_timestamp < now and tp not in group.pending_commits])
        if removed:
            logger.info("expired %d committed offset(s)", removed)
        return removed

    def remove_deleted_partitions(self, partitions: set[tuple[str, int]]) -> int:
        """Kafka 0.10.2's handleDeletedPartitions: the offsets every group of this coordinator
        committed for partitions of a deleted topic are removed (tombstones in the log), so a
        topic re-created under the same name is consumed from its start, not from the old
        topic's offsets. Commits still waiting for the high watermark are dropped too (they
        stay behind their tombstones in the log). Returns offsets removed."""
        def deleted(group: GroupMetadata) -> list[tuple[str, int]]:
            for tp in partitions & group.pending_keys():
                group.forget_pending_offsets(tp)
            return [tp for tp in group.offsets if tp in partitions]

        removed = self._remove_offsets(deleted)
        if removed:
            logger.info("removed %d committed offset(s) of deleted partitions", removed)
        return removed

    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group (Kafka 2.8's handleDeleteGroups): an empty group goes,
        with its offsets (tombstones in the log, the group's last; commits still waiting for
        the high watermark get theirs too, else they would bring it back at the next load).
        GROUP_ID_NOT_FOUND for a group this coordinator does not have, NON_EMPTY_GROUP while it
        has members, or the coordinator's error (NOT_COORDINATOR, INVALID_GROUP_ID, ...)."""
        error = self.ownership.check(group_id)
        if error:
            return error
        group = self.ownership.group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if not group.is_(GroupState.EMPTY):
            return ErrorCode.NON_EMPTY_GROUP
        # Offsets pending in a transaction get tombstones too: its COMMIT marker, replayed
        # at a later load, would otherwise bring them back.
        partitions = set(group.offsets) | group.pending_keys()
        events = [(offset_key(group_id, topic, partition), None) for topic, partition in sorted(partitions)]
        error, _ = self.store.append(group_id, events + [(group_key(group_id), None)])
        if error:
            return error
        group.offsets.clear()
        group.offset_positions.clear()
        group.pending_commits.clear()
        group.pending_txn_offsets.clear()
        group.transition_to(GroupState.DEAD)
        del self.ownership.groups_by_partition[self.ownership.partition_for(group_id)][group_id]
        logger.info("group %s: deleted", group_id)
        return ErrorCode.NONE

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete (Kafka 2.8's handleDeleteOffsets): the group's offsets of
        ``partitions`` go (tombstones), but not those of topics its members consume
        (GROUP_SUBSCRIBED_TO_TOPIC); an empty group left without offsets goes too. The
        group-level error: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for a group with members that
        is not a consumer group, or the coordinator's."""
        error = self.ownership.check(group_id)
        if error:
            return error, {}
        group = self.ownership.group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        results: dict[tuple[str, int], ErrorCode] = {}
        if group.is_(GroupState.EMPTY):
            eligible = list(partitions)
        elif group.protocol_type == "consumer":
            subscribed = _subscribed_topics(group)
            eligible = [tp for tp in partitions if subscribed is not None and tp[0] not in subscribed]
            results = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp not in eligible}
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        pending = group.pending_keys()
        gone = [tp for tp in eligible if tp in group.offsets or tp in pending]
        events = [(offset_key(group_id, topic, partition), None) for topic, partition in gone]
        dead = group.is_(GroupState.EMPTY) and set(gone) >= set(group.offsets) | pending
        if dead:
            events.append((group_key(group_id), None))
        if events:
            error, _ = self.store.append(group_id, events)
            if error:
                return error, {}
        for tp in gone:
            group.offsets.pop(tp, None)
            group.offset_positions.pop(tp, None)
            group.forget_pending_offsets(tp)
        if dead:
            group.transition_to(GroupState.DEAD)
            del self.ownership.groups_by_partition[self.ownership.partition_for(group_id)][group_id]
        results.update({tp: ErrorCode.NONE for tp in eligible})
        return ErrorCode.NONE, results

    def _remove_offsets(self, select: Callable[[GroupMetadata], list[tuple[str, int]]]) -> int:
        """Remove the offsets ``select`` picks in each group, and groups left empty without
        offsets (none pending either); tombstones go to the log, not waited for (Kafka's
        cleanupGroupMetadata: a lost one is removed again by the next pass)."""
        if not self.ownership.active:
            return 0
        removed = 0
        for groups in self.ownership.groups_by_partition.values():
            for group in list(groups.values()):
                chosen = select(group)
                events = [(offset_key(group.group_id, topic, partition), None) for topic, partition in chosen]
                dead = (group.is_(GroupState.EMPTY) and len(chosen) == len(group.offsets)
                        and not group.pending_commits and not group.pending_txn_offsets)
                if dead:
                    events.append((group_key(group.group_id), None))
                if not events:
                    continue
                if self.store.append(group.group_id, events)[0]:
                    continue   # logged; the next pass retries
                for tp in chosen:
                    del group.offsets[tp]
                    group.offset_positions.pop(tp, None)
                removed += len(chosen)
                if dead:
                    group.transition_to(GroupState.DEAD)
                    del groups[group.group_id]
                    logger.info("group %s: removed (empty, no offsets left)", group.group_id)
        return removed


def _fetched(topic: str, partition: int, committed: OffsetAndMetadata) -> FetchedOffset:
    return FetchedOffset(topic, partition, committed.offset, committed.metadata,
                         leader_epoch=committed.leader_epoch)


def _subscribed_topics(group: GroupMetadata) -> set[str] | None:
    """The topics a consumer group's members subscribe to, from their ConsumerProtocol
    subscriptions (int16 version, then an array of int16-length topic names); None when one
    cannot be read, which counts as subscribed to everything (Kafka's isSubscribedToTopic)."""
    if group.protocol is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        data = member.metadata(group.protocol)
        try:
            (count,) = struct.unpack_from(">i", data, 2)
            position = 6
            for _ in range(count):
                (length,) = struct.unpack_from(">h", data, position)
                topics.add(data[position + 2:position + 2 + length].decode("utf-8"))
                position += 2 + length
        except (KeyError, struct.error, UnicodeDecodeError):
            return None
    return topics
