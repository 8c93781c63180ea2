"""The group coordinator: Kafka's consumer group protocol and committed offsets.

Semantics follow Kafka's ``GroupCoordinator`` (0.10.2, with 0.11's
``group.initial.rebalance.delay.ms`` and 2.x's heartbeat during CompletingRebalance):

* JoinGroup adds a member (id ``client_id-UUID``) or updates one and starts a rebalance
  (state PreparingRebalance). The rebalance completes as soon as every known member has
  rejoined, or when the largest rebalance timeout of the members runs out (members that did
  not rejoin are removed). Completing it bumps the generation, picks the protocol with the
  most first-choice votes among those every member supports, and answers every waiting
  JoinGroup; the leader's answer lists the members and their metadata. A lone consumer in a
  new group is therefore answered at once (the initial delay defaults to 0 here).
* SyncGroup: followers wait for the leader's; the leader's assignment is stored as a group
  metadata event, then handed to every member (state Stable).
* Heartbeat keeps a member's session; one that misses its session timeout is removed and
  the group rebalances. LeaveGroup removes at once.
* OffsetCommit from a member of the current generation, or with generation -1 for a group
  without members ("simple" commits outside group management), appends offset events.
  OffsetFetch reads the in-memory state.

Where this departs from Kafka 0.10.2, and why:

* OffsetCommit v0 is stored here like v1/v2 (Kafka 0.10.2 wrote v0 commits to ZooKeeper),
  so, as a commit with generation -1, it is refused (UNKNOWN_MEMBER_ID) while the group has
  members.
* DescribeGroups names the state between JoinGroup and SyncGroup "CompletingRebalance"
  (Kafka 2.0's name; current clients do not know "AwaitingSync").
* A Heartbeat in CompletingRebalance from a member of the generation is accepted (Kafka 2.x);
  0.10.2 answered REBALANCE_IN_PROGRESS and so forced a second rebalance.
* A member removed while its JoinGroup/SyncGroup waits gets UNKNOWN_MEMBER_ID instead of
  no answer.
* A single broker coordinates every group. It creates or loads ``__consumer_offsets`` at
  the first group request (Kafka creates the topic at the first FindCoordinator), and group
  requests wait for that, so NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS never arise
  there; from shutdown on the answer is COORDINATOR_NOT_AVAILABLE.
  In a cluster a broker coordinates the groups of the offsets partitions it leads: it loads
  one when it becomes its leader (:meth:`GroupCoordinator.became_leader`; LOAD_IN_PROGRESS
  meanwhile) and drops it when it stops (:meth:`GroupCoordinator.resigned`; NOT_COORDINATOR).
* In a cluster OffsetCommit is answered once its commit is below the partition's high
  watermark, and only then enters the state OffsetFetch reads (as in Kafka); meanwhile it is
  a pending commit, which expiry leaves alone and snapshots hold. SyncGroup is answered
  once the group metadata is below the high watermark (Kafka's storeGroup with acks -1);
  expiry tombstones are not waited for (a lost one is an offset that expires again).
* As in 0.10.2, OffsetCommit is refused (REBALANCE_IN_PROGRESS) only in CompletingRebalance:
  during PreparingRebalance a member of the current generation may still commit, which is
  what consumers do just before they rejoin.

The coordinator is the front the request handlers call; the work is done in four rooms, as
Kafka splits it between GroupCoordinator and GroupMetadataManager:

* membership (:mod:`broker.groups.membership`): join, sync, heartbeat, leave, rebalance and
  session timers;
* committed offsets (:mod:`broker.groups.offsets`): commit, fetch, expiry;
* persistence (:mod:`broker.groups.store`): events in ``__consumer_offsets``, loading,
  snapshots;
* partition ownership (:mod:`broker.groups.ownership`): which partitions this broker
  coordinates, loading and dropping them as its leadership changes.

The membership is a synchronous state machine: each ``handle_*`` method takes a callback
that receives the answer, possibly later (when a rebalance completes or a timer fires). The
``async`` methods here wrap that for request handlers. Time comes from ``broker.clock``;
timers are fired by :meth:`GroupCoordinator.run` (or :meth:`poll` in tests).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from minikafka.broker.groups.config import GroupConfig
from minikafka.broker.groups.group import GroupMetadata
from minikafka.broker.groups.membership import GroupMembership, GroupSummary, JoinResult, SyncResult
from minikafka.broker.groups.offsets import CommittedOffsets, FetchedOffset, PartitionCommit
from minikafka.broker.groups.ownership import PartitionOwnership
from minikafka.broker.groups.store import GROUP_METADATA_TOPIC, GroupStore, LoadReport, OffsetsPartition
from minikafka.broker.groups.timers import TimerQueue
from minikafka.protocol.errors import ErrorCode

logger = logging.getLogger(__name__)


class _Reply:
    """A one-shot slot a request handler waits on until the state machine answers."""

    __slots__ = ("_event", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value = None

    def set(self, value) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    async def wait(self):
        await self._event.wait()
        return self._value


class GroupCoordinator:
    """Coordinates the consumer groups of this broker and stores their committed offsets.

    Lifecycle: built on first use (``Broker.group_coordinator``); :meth:`startup` after the log
    manager started (single broker, at the first group request: creates ``__consumer_offsets``
    if needed, loads snapshots, replays events;
    in a cluster partitions come and go with their leadership, see :meth:`became_leader`);
    :meth:`run` as a child of the broker nursery; :meth:`shutdown` before the log manager
    shuts down. ``load_reports`` says what start-up loaded and replayed per partition.
    """

    def __init__(self, broker) -> None:
        self.broker = broker
        self.clock = broker.clock
        self.config = GroupConfig.from_broker_config(broker.config)
        self.timers = TimerQueue(on_earlier_deadline=self._wake)
        self._wakeup: trio.Event | None = None
        self.ownership = PartitionOwnership(self.config, self.clock)
        self.store = GroupStore(broker, self.config, self.ownership)
        self.membership = GroupMembership(self.config, self.clock, self.timers, self.ownership, self.store)
        self.offsets = CommittedOffsets(self.config, self.clock, self.ownership, self.store,
                                        self.membership.schedule_heartbeat)
        self.ownership.connect(self.store, self.membership.on_group_loaded, self.membership.on_group_unloaded)

    @property
    def clustered(self) -> bool:
        return self.broker.cluster is not None

    # ================================================================ lifecycle

    def startup(self) -> None:
        """Single broker: create ``__consumer_offsets`` if missing, then load every partition
        (newest valid snapshot, then the events after it). In a cluster nothing is loaded
        here: partitions are loaded as this broker becomes their leader (:meth:`became_leader`)."""
        if self.clustered:
            self.ownership.active = True
            return
        log_manager = self.broker.log_manager
        count = log_manager.topics().get(GROUP_METADATA_TOPIC)
        if count is None:
            count = self.config.offsets_topic_num_partitions
            log_manager.create_topic(GROUP_METADATA_TOPIC, count, self.offsets_topic_configs())
            logger.info("created %s with %d partition(s)", GROUP_METADATA_TOPIC, count)
        self.ownership.load_all(log_manager, count)
        self.ownership.active = True

    def offsets_topic_configs(self) -> dict[str, str]:
        """Topic configs of ``__consumer_offsets``, on one broker as in a cluster."""
        # As in Kafka, retention never deletes from this topic; segments go only once
        # snapshots cover them (store.OffsetsPartition.snapshot_written).
        return {"cleanup.policy": "compact", "segment.bytes": str(self.config.offsets_topic_segment_bytes)}

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Fire session and rebalance timers, expire offsets, write due snapshots."""
        self._wakeup = trio.Event()
        async with trio.open_nursery() as nursery:
            self.store.start(nursery)
            if self.clustered:
                nursery.start_soon(self.ownership.run_loads)
            task_status.started()
            next_expiry = self.clock.time_ms()
            while True:
                now = self.clock.time_ms()
                self.timers.run_due(now)
                if now >= next_expiry:
                    try:
                        self.expire_offsets(now)
                    except Exception:
                        logger.exception("expiring committed offsets failed; retrying next interval")
                    next_expiry = now + self.config.offsets_retention_check_interval_ms
                deadline = self.timers.next_deadline()
                deadline = next_expiry if deadline is None else min(deadline, next_expiry)
                with trio.move_on_after(max(0, deadline - self.clock.time_ms()) / 1000):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()

    def poll(self) -> int:
        """Fire the timers due now (``run`` does this itself; for driving a fake clock)."""
        return self.timers.run_due(self.clock.time_ms())

    def shutdown(self) -> None:
        """Stop answering and write a snapshot of every partition with events after its last
        one, so the next start-up replays nothing."""
        if not self.ownership.active:
            return
        self.ownership.active = False
        self.store.snapshot_all()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # ================================================================ ownership

    def find_coordinator(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``group_id`` (a single broker coordinates all)."""
        return ErrorCode.NONE if self.ownership.active else ErrorCode.COORDINATOR_NOT_AVAILABLE

    @property
    def partitions(self) -> dict[int, OffsetsPartition]:
        return self.ownership.partitions

    @property
    def load_reports(self) -> list[LoadReport]:
        return self.ownership.load_reports

    @property
    def topic_partitions(self) -> int | None:
        return self.ownership.topic_partitions

    @topic_partitions.setter
    def topic_partitions(self, count: int) -> None:
        self.ownership.topic_partitions = count

    def partition_for(self, group_id: str) -> int:
        return self.ownership.partition_for(group_id)

    def group(self, group_id: str) -> GroupMetadata | None:
        return self.ownership.group(group_id)

    def became_leader(self, index: int, log, writer) -> None:
        self.ownership.became_leader(index, log, writer)

    def resigned(self, index: int, log) -> None:
        self.ownership.resigned(index, log)

    def served_partitions(self) -> list[int]:
        return self.ownership.served_partitions()

    def list_groups(self) -> tuple[ErrorCode, list[tuple[str, str, str]]]:
        return self.ownership.list_groups()

    # ================================================================ membership

    async def join_group(self, group_id: str, member_id: str, client_id: str, client_host: str,
                         rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], **static) -> JoinResult:
        """``static``: ``group_instance_id`` and ``require_known_member_id``, see
        :meth:`GroupMembership.handle_join_group`."""
        reply = _Reply()
        self.handle_join_group(group_id, member_id, client_id, client_host, rebalance_timeout_ms,
                               session_timeout_ms, protocol_type, protocols, reply.set, **static)
        return await reply.wait()

    def handle_join_group(self, group_id: str, member_id: str, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]],
                          respond: Callable[[JoinResult], None], **static) -> None:
        self.membership.handle_join_group(group_id, member_id, client_id, client_host, rebalance_timeout_ms,
                                          session_timeout_ms, protocol_type, protocols, respond, **static)

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         assignments: dict[str, bytes], **checks) -> SyncResult:
        """``checks``: ``group_instance_id``, ``protocol_type`` and ``protocol``, see
        :meth:`GroupMembership.handle_sync_group`."""
        reply = _Reply()
        self.handle_sync_group(group_id, generation_id, member_id, assignments, reply.set, **checks)
        return await reply.wait()

    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str,
                          assignments: dict[str, bytes],
                          respond: Callable[[SyncResult], None], **checks) -> None:
        self.membership.handle_sync_group(group_id, generation_id, member_id, assignments, respond, **checks)

    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> ErrorCode:
        return self.membership.heartbeat(group_id, member_id, generation_id, group_instance_id)

    def leave_group(self, group_id: str, member_id: str) -> ErrorCode:
        return self.membership.leave_group(group_id, member_id)

    def leave_members(self, group_id: str, leaving: list[tuple[str, str | None]]
                      ) -> tuple[ErrorCode, list[ErrorCode]]:
        return self.membership.leave_members(group_id, leaving)

    def describe_group(self, group_id: str) -> GroupSummary:
        return self.membership.describe_group(group_id)

    # ================================================================ offsets

    async def commit(self, group_id: str, member_id: str, generation_id: int,
                     retention_ms: int, commits: list[PartitionCommit],
                     group_instance_id: str | None = None) -> list[ErrorCode]:
        return await self.offsets.commit(group_id, member_id, generation_id, retention_ms, commits,
                                         group_instance_id)

    def commit_offsets(self, group_id: str, member_id: str, generation_id: int,
                       retention_ms: int, commits: list[PartitionCommit]) -> list[ErrorCode]:
        return self.offsets.commit_offsets(group_id, member_id, generation_id, retention_ms, commits)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      require_stable: bool = False) -> tuple[ErrorCode, list[FetchedOffset]]:
        return self.offsets.fetch_offsets(group_id, partitions, require_stable)

    def expire_offsets(self, now: int) -> int:
        return self.offsets.expire_offsets(now)

    def remove_deleted_partitions(self, partitions: set[tuple[str, int]]) -> int:
        return self.offsets.remove_deleted_partitions(partitions)

    def delete_group(self, group_id: str) -> ErrorCode:
        return self.offsets.delete_group(group_id)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        return self.offsets.delete_offsets(group_id, partitions)

    # ================================================================ transactions

    async def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                         group_instance_id: str | None, generation_id: int,
                         commits: list[PartitionCommit]) -> list[ErrorCode]:
        return await self.offsets.txn_commit(group_id, producer_id, producer_epoch, member_id,
                                             group_instance_id, generation_id, commits)

    def handle_txn_completion(self, producer_id: int, offsets_partitions: list[int], commit: bool) -> None:
        """Make the transactional offsets of ``producer_id`` in these ``__consumer_offsets``
        partitions visible (commit) or drop them (abort), once their marker is written."""
        self.offsets.complete_txn(producer_id, offsets_partitions, commit)
