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

The coordinator is a synchronous state machine: each ``handle_*`` method takes a callback
that receives the answer, possibly later (when a rebalance completes or a timer fires). The
``async`` methods wrap that for request handlers. Time comes from ``broker.clock``; timers
are fired by :meth:`GroupCoordinator.run` (or :meth:`poll` in tests).
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import trio

from minikafka.broker.groups.config import GroupConfig
from minikafka.broker.groups.group import GroupMetadata, GroupState, MemberMetadata
from minikafka.broker.groups.records import (GroupKey, GroupRecordError, OffsetAndMetadata, decode_group_value,
                                   decode_key, decode_offset_value, group_key, group_value,
                                   offset_key, offset_value, partition_for)
from minikafka.broker.groups.store import LoadReport, OffsetsPartition, encode_snapshot
from minikafka.storage.snapshot import SnapshotStore
from minikafka.broker.groups.timers import TimerQueue
from minikafka.protocol.errors import ErrorCode, RecordError

logger = logging.getLogger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"
SNAPSHOT_DIR_NAME = "group-snapshots"
# How often a cluster broker looks whether a followed partition is due for a snapshot.
FOLLOWER_SNAPSHOT_CHECK_S = 1.0
# The wait before a failed load of a led partition is tried again, doubling up to the maximum.
LOAD_RETRY_FIRST_S = 0.5
LOAD_RETRY_MAX_S = 30.0

# The line start-up logs per partition; tests and bench/ read it back from a broker process's
# log (load_reports_in) to see what was loaded and replayed, so both directions live here.
_LOAD_LINE = "loaded %s-%d: snapshot %s, replayed %d event(s) from offset %d to %d"
_LOAD_LINE_PATTERN = re.compile(
    rf"loaded {GROUP_METADATA_TOPIC}-(\d+): snapshot (?:none|at offset (\d+)), "
    r"replayed (\d+) event\(s\) from offset (\d+) to (\d+)")


def load_reports_in(text: str) -> list[LoadReport]:
    """The start-up ``LoadReport`` of every partition-load line in a broker log, in order."""
    return [LoadReport(int(partition), int(snapshot) if snapshot else None,
                       int(start), int(end), int(replayed))
            for partition, snapshot, replayed, start, end in _LOAD_LINE_PATTERN.findall(text)]


@dataclass(frozen=True, slots=True)
class JoinResult:
    """The answer to a JoinGroup; ``members`` (member id, metadata) only for the leader."""

    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol: str = ""
    leader_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class PartitionCommit:
    """One partition of an OffsetCommit; ``commit_timestamp`` -1 means "now"."""

    topic: str
    partition: int
    offset: int
    metadata: str | None
    commit_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    metadata: str
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """What DescribeGroups reports for one group."""

    error: ErrorCode
    group_id: str
    state: str = GroupState.DEAD.value
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[MemberSummary, ...] = ()


@dataclass(slots=True)
class _Write:
    """Events appended to ``partition`` up to ``last_offset``; ``apply`` puts them into the
    in-memory state once they are committed, ``discard`` forgets them when they are not."""

    partition: OffsetsPartition
    last_offset: int
    apply: Callable[[], None] = lambda: None
    discard: Callable[[], None] = lambda: None


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


# Errors of an append to __consumer_offsets, as the coordinator reports them to clients
# (Kafka's GroupMetadataManager mapping).
_STORE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.LEADER_NOT_AVAILABLE: ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}
# The same for the group metadata a SyncGroup stores (storeGroup's callback in Kafka 0.10.2):
# a timed-out store asks the members to rejoin.
_GROUP_STORE_ERRORS = {
    **_STORE_ERRORS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


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
        # The partitions this broker coordinates (all of them on a single broker; those it
        # leads, once loaded, in a cluster) and their groups, by partition index.
        self.partitions: dict[int, OffsetsPartition] = {}
        self._groups: dict[int, dict[str, GroupMetadata]] = {}
        # Partitions being loaded after this broker became their leader -> the load's token
        # (a load whose token is no longer here was overtaken by a leadership change).
        self._loading: dict[int, object] = {}
        self._loads_in, self._loads_out = trio.open_memory_channel(math.inf)
        self.load_reports: list[LoadReport] = []
        self._active = False
        self._wakeup: trio.Event | None = None
        self._snapshots_due: set[int] = set()
        self._snapshot_wakeup: trio.Event | None = None
        # run()'s nursery: tasks that wait for a group metadata append to be committed.
        self._tasks: trio.Nursery | None = None
        self._partition_cache: dict[str, int] = {}
        self._partition_cache_count = 0
        # Partitions of __consumer_offsets once known for certain: on a single broker from
        # start-up; in a cluster from ZooKeeper, before the first partition is loaded (the
        # metadata cache fills in partition by partition, and a group placed by a partial
        # count would land in the wrong partition). It never changes afterwards.
        self.topic_partitions: int | None = None
        # Followed partitions: the offset of the newest snapshot this broker holds of each.
        self._follower_snapshot_at: dict[int, int] = {}

    @property
    def clustered(self) -> bool:
        return self.broker.cluster is not None

    # ================================================================ lifecycle

    def startup(self) -> None:
        """Single broker: create ``__consumer_offsets`` if missing, then load every partition
        (newest valid snapshot, then the events after it). In a cluster nothing is loaded
        here: partitions are loaded as this broker becomes their leader (:meth:`became_leader`)."""
        if self.clustered:
            self._active = True
            return
        log_manager = self.broker.log_manager
        count = log_manager.topics().get(GROUP_METADATA_TOPIC)
        if count is None:
            count = self.config.offsets_topic_num_partitions
            log_manager.create_topic(GROUP_METADATA_TOPIC, count, self.offsets_topic_configs())
            logger.info("created %s with %d partition(s)", GROUP_METADATA_TOPIC, count)
        self.topic_partitions = count
        self.partitions = {}
        self._groups = {}
        self.load_reports = []
        for index in range(count):
            log = log_manager.get_log(GROUP_METADATA_TOPIC, index)
            partition = OffsetsPartition(index, log, log.dir / SNAPSHOT_DIR_NAME, self.clock)
            groups: dict[str, GroupMetadata] = {}
            self.load_reports.append(self._load(partition, groups))
            self._install(partition, groups)
        self._active = True

    def offsets_topic_configs(self) -> dict[str, str]:
        """Topic configs of ``__consumer_offsets``, on one broker as in a cluster."""
        # As in Kafka, retention never deletes from this topic; segments go only once
        # snapshots cover them (store.OffsetsPartition.snapshot_written).
        return {"cleanup.policy": "compact", "segment.bytes": str(self.config.offsets_topic_segment_bytes)}

    def _install(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata]) -> None:
        """Start coordinating a loaded partition: its groups' members get their sessions."""
        index = partition.partition
        self.partitions[index] = partition
        self._groups[index] = groups
        now = self.clock.time_ms()
        for group in groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(group, member, now)

    # ---------------------------------------------------------------- cluster leadership

    def became_leader(self, index: int, log, writer) -> None:
        """This broker now leads ``__consumer_offsets-index``: load it in the background and
        answer COORDINATOR_LOAD_IN_PROGRESS for its groups until then. ``writer`` appends
        through the leader replica and says when an append is committed."""
        self._unload(index, log)
        token = object()
        self._loading[index] = token
        self._loads_in.send_nowait((index, log, writer, token))

    def served_partitions(self) -> list[int]:
        """The partitions this broker coordinates or is loading."""
        return sorted({*self.partitions, *self._loading})

    def resigned(self, index: int, log) -> None:
        """This broker follows (or no longer holds) ``__consumer_offsets-index``: its groups
        are dropped and their requests answered NOT_COORDINATOR; the new leader loads them."""
        self._unload(index, log)

    def _unload(self, index: int, log) -> None:
        self._loading.pop(index, None)
        self._snapshots_due.discard(index)
        self._follower_snapshot_at.pop(index, None)
        self.partitions.pop(index, None)
        groups = self._groups.pop(index, {})
        for group in groups.values():
            self._drop_group(group)
        if groups:
            logger.info("%s-%d: no longer its leader: dropped %d group(s)", GROUP_METADATA_TOPIC, index,
                        len(groups))
        if log is not None:
            try:
                self._remove_unreplicated_snapshots(index, log)
            except OSError as exc:
                # Loading the partition removes them first, and retries until it can.
                logger.error("%s-%d: snapshots above the high watermark not removed: %s", GROUP_METADATA_TOPIC,
                             index, exc)

    @staticmethod
    def _remove_unreplicated_snapshots(index: int, log) -> None:
        # A snapshot covers events up to its offset; above the high watermark those may
        # not survive (a follower truncates to its new leader's log), and loading such a
        # snapshot later would bring back commits the cluster never acknowledged.
        removed = SnapshotStore(log.dir / SNAPSHOT_DIR_NAME).remove_newer_than(log.high_watermark)
        if removed:
            logger.info("%s-%d: removed %d snapshot(s) above the high watermark %d", GROUP_METADATA_TOPIC,
                        index, removed, log.high_watermark)

    def _load_led_partition(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata]) -> LoadReport:
        self._remove_unreplicated_snapshots(partition.partition, partition.log)
        return self._load(partition, groups)

    def _drop_group(self, group: GroupMetadata) -> None:
        """Kafka's onGroupUnloaded: waiting requests learn that this broker is not the
        coordinator any more, and no timer of the group fires again."""
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        for member in group.members.values():
            self._release(member, ErrorCode.NOT_COORDINATOR)
        group.transition_to(GroupState.DEAD)

    async def _run_loads(self) -> None:
        async with trio.open_nursery() as nursery:
            async for index, log, writer, token in self._loads_out:
                nursery.start_soon(self._load_led, index, log, writer, token)

    async def _load_led(self, index: int, log, writer, token) -> None:
        """Load a partition this broker became leader of, off the event loop; install it
        unless leadership moved meanwhile, then snapshot it if the load replayed anything."""
        while self.topic_partitions is None:
            try:
                self.topic_partitions = await writer.topic_partitions()
            except Exception as exc:  # ZooKeeper unavailable: the load waits for it
                logger.warning("%s-%d: partition count unknown (%s); retrying", GROUP_METADATA_TOPIC, index, exc)
                await trio.sleep(0.5)
                if self._loading.get(index) is not token:
                    return
        retry_s = LOAD_RETRY_FIRST_S
        while True:
            groups: dict[str, GroupMetadata] = {}
            try:
                partition = OffsetsPartition(index, log, log.dir / SNAPSHOT_DIR_NAME, self.clock, writer,
                                             trim_bound=writer.trim_bound)
                report = await trio.to_thread.run_sync(self._load_led_partition, partition, groups)
                break
            except Exception:
                if self._loading.get(index) is not token:
                    return
                # Kafka 2.x serves whatever a failed load got to; a partial state would answer
                # OffsetFetch without offsets that exist (consumers rewind). The groups stay
                # LOAD_IN_PROGRESS instead, and the load is tried again.
                logger.exception("%s-%d: loading failed; retrying in %.1f s", GROUP_METADATA_TOPIC, index,
                                 retry_s)
            await trio.sleep(retry_s)
            retry_s = min(retry_s * 2, LOAD_RETRY_MAX_S)
            if self._loading.get(index) is not token:
                return
        if self._loading.get(index) is not token:
            return
        del self._loading[index]
        self.load_reports.append(report)
        self._install(partition, groups)
        if partition.events_since_snapshot:
            self._snapshot_soon(index)

    def _snapshot_soon(self, index: int) -> None:
        self._snapshots_due.add(index)
        if self._snapshot_wakeup is not None:
            self._snapshot_wakeup.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Fire session and rebalance timers, expire offsets, write due snapshots."""
        self._wakeup = trio.Event()
        self._snapshot_wakeup = trio.Event()
        # A long replay at start-up is snapshotted at once, so the next start is quick.
        for partition in self.partitions.values():
            if partition.due_for_snapshot(self.config.snapshot_interval_events,
                                          self.config.snapshot_interval_bytes):
                self._snapshot_soon(partition.partition)
        async with trio.open_nursery() as nursery:
            self._tasks = nursery
            nursery.start_soon(self._snapshot_writer)
            if self.clustered:
                nursery.start_soon(self._run_loads)
                nursery.start_soon(self._follower_snapshots)
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
        if not self._active:
            return
        self._active = False
        for partition in self.partitions.values():
            try:
                self._snapshot_sync(partition)
            except Exception:
                logger.exception("%s-%d: snapshot at shutdown failed; start-up will replay the log",
                                 GROUP_METADATA_TOPIC, partition.partition)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # ================================================================ lookup

    def partition_count(self) -> int:
        """Partitions of ``__consumer_offsets``: the topic's, or the count it will be created with."""
        if self.topic_partitions is not None:
            return self.topic_partitions
        return self.config.offsets_topic_num_partitions

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds ``group_id``."""
        count = self.partition_count()
        if count != self._partition_cache_count:
            self._partition_cache.clear()
            self._partition_cache_count = count
        index = self._partition_cache.get(group_id)
        if index is None:
            # Java's String.hashCode is a Python loop; every request of a group needs it.
            if len(self._partition_cache) > 100_000:
                self._partition_cache.clear()
            index = self._partition_cache[group_id] = partition_for(group_id, count)
        return index

    def group(self, group_id: str) -> GroupMetadata | None:
        groups = self._groups.get(self.partition_for(group_id))
        return None if groups is None else groups.get(group_id)

    def _add_group(self, group_id: str) -> GroupMetadata:
        group = GroupMetadata(group_id)
        self._groups[self.partition_for(group_id)][group_id] = group
        return group

    def _check(self, group_id: str, *, validate_id: bool = True) -> ErrorCode:
        """The coordinator-level error for a request about ``group_id`` (NONE if we serve it)."""
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        index = self.partition_for(group_id)
        if index in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if index not in self.partitions:
            return ErrorCode.NOT_COORDINATOR
        if validate_id and not group_id:
            return ErrorCode.INVALID_GROUP_ID
        return ErrorCode.NONE

    def find_coordinator(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``group_id`` (a single broker coordinates all)."""
        return ErrorCode.NONE if self._active else ErrorCode.COORDINATOR_NOT_AVAILABLE

    # ================================================================ JoinGroup

    async def join_group(self, group_id: str, member_id: str, client_id: str, client_host: str,
                         rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]]) -> JoinResult:
        reply = _Reply()
        self.handle_join_group(group_id, member_id, client_id, client_host, rebalance_timeout_ms,
                               session_timeout_ms, protocol_type, protocols, reply.set)
        return await reply.wait()

    def handle_join_group(self, group_id: str, member_id: str, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]],
                          respond: Callable[[JoinResult], None]) -> None:
        error = self._check(group_id)
        if error:
            respond(JoinResult(error, member_id))
            return
        if not (self.config.min_session_timeout_ms <= session_timeout_ms
                <= self.config.max_session_timeout_ms):
            respond(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
            return
        group = self.group(group_id)
        if group is None:
            if member_id:
                respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return
            group = self._add_group(group_id)
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        if group.is_(GroupState.DEAD):
            # Removed while this request was on its way: the client starts over.
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        elif (not protocol_type or not protocols
              or (not group.is_(GroupState.EMPTY)
                  and (group.protocol_type != protocol_type
                       or not group.supports_protocols(name for name, _ in protocols)))):
            respond(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
        elif member_id and member_id not in group.members:
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        elif not member_id:
            self._add_member_and_rebalance(group, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, respond)
        else:
            member = group.members[member_id]
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._update_member_and_rebalance(group, member, protocols, respond)
            elif group.is_(GroupState.COMPLETING_REBALANCE):
                if member.matches(protocols):
                    # A retry of a join whose answer was lost: answer it again.
                    respond(self._join_result(group, member))
                else:
                    self._update_member_and_rebalance(group, member, protocols, respond)
            elif member_id == group.leader_id or not member.matches(protocols):
                # The leader rejoining (e.g. its subscription's topics changed) or a member
                # with new metadata: everyone needs a new assignment.
                self._update_member_and_rebalance(group, member, protocols, respond)
            else:
                # A follower rejoining with unchanged metadata keeps the current generation.
                respond(JoinResult(ErrorCode.NONE, member_id, group.generation_id,
                                   group.protocol or "", group.leader_id or ""))
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        members: tuple[tuple[str, bytes], ...] = ()
        if member.member_id == group.leader_id:
            members = tuple((m.member_id, m.metadata(group.protocol)) for m in group.members.values())
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation_id, group.protocol or "",
                          group.leader_id or "", members)

    def _add_member_and_rebalance(self, group, client_id, client_host, rebalance_timeout_ms,
                                  session_timeout_ms, protocol_type, protocols, respond) -> None:
        member = MemberMetadata(f"{client_id}-{uuid.uuid4()}", client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                join_callback=respond)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(self, group, member, protocols, respond) -> None:
        member.protocols = protocols
        member.join_callback = respond
        self._maybe_prepare_rebalance(group)

    def _maybe_prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        first_rebalance = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        group.rebalance_epoch += 1
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        epoch = group.rebalance_epoch
        now = self.clock.time_ms()
        delay = self.config.initial_rebalance_delay_ms
        if first_rebalance and delay > 0:
            # Kafka's InitialDelayedJoin: wait for more members, in steps of the delay, while
            # new ones keep arriving, for at most the rebalance timeout.
            group.new_member_added = False
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.rebalance_timer = self.timers.schedule(
                now + delay, lambda: self._on_initial_delay(group, epoch, remaining))
            group.initial_delay_pending = True
        else:
            group.initial_delay_pending = False
            group.rebalance_timer = self.timers.schedule(
                now + group.rebalance_timeout_ms(), lambda: self._on_rebalance_deadline(group, epoch))
        logger.info("group %s: preparing to rebalance (generation %d, %d member(s))",
                    group.group_id, group.generation_id, len(group.members))
        self._try_complete_join(group)

    def _on_initial_delay(self, group: GroupMetadata, epoch: int, remaining: int) -> None:
        if group.rebalance_epoch != epoch or not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining:
            group.new_member_added = False
            step = min(self.config.initial_rebalance_delay_ms, remaining)
            left = max(remaining - self.config.initial_rebalance_delay_ms, 0)
            group.rebalance_timer = self.timers.schedule(
                self.clock.time_ms() + step, lambda: self._on_initial_delay(group, epoch, left))
            return
        group.initial_delay_pending = False
        self._complete_join(group)

    def _on_rebalance_deadline(self, group: GroupMetadata, epoch: int) -> None:
        if group.rebalance_epoch == epoch and group.is_(GroupState.PREPARING_REBALANCE):
            self._complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        if (group.is_(GroupState.PREPARING_REBALANCE) and not group.initial_delay_pending
                and not group.not_yet_rejoined()):
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        for member in group.not_yet_rejoined():
            logger.info("group %s: removing member %s, which did not rejoin in time",
                        group.group_id, member.member_id)
            self._remove_member(group, member)
        if group.is_(GroupState.DEAD):
            return
        group.generation_id += 1
        group.rebalance_epoch += 1
        if group.members:
            group.protocol = group.select_protocol()
            group.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            group.protocol = None
            group.transition_to(GroupState.EMPTY)
        logger.info("group %s: generation %d with %d member(s), protocol %s, leader %s",
                    group.group_id, group.generation_id, len(group.members), group.protocol,
                    group.leader_id)
        if group.is_(GroupState.EMPTY):
            error, _ = self._store_group(group, _GROUP_STORE_ERRORS)
            if error:
                logger.warning("group %s: storing the empty group failed: %s", group.group_id, error.name)
            return
        now = self.clock.time_ms()
        for member in list(group.members.values()):
            callback = member.join_callback
            if callback is None:
                continue
            member.join_callback = None
            self._schedule_heartbeat(group, member, now)
            callback(self._join_result(group, member))

    # ================================================================ SyncGroup

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         assignments: dict[str, bytes]) -> SyncResult:
        reply = _Reply()
        self.handle_sync_group(group_id, generation_id, member_id, assignments, reply.set)
        return await reply.wait()

    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str,
                          assignments: dict[str, bytes],
                          respond: Callable[[SyncResult], None]) -> None:
        error = self._check(group_id)
        if error:
            respond(SyncResult(error))
            return
        group = self.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            respond(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif generation_id != group.generation_id:
            respond(SyncResult(ErrorCode.ILLEGAL_GENERATION))
        elif group.state in (GroupState.EMPTY, GroupState.DEAD):
            respond(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif group.is_(GroupState.PREPARING_REBALANCE):
            respond(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_(GroupState.STABLE):
            self._schedule_heartbeat(group, member, self.clock.time_ms())
            respond(SyncResult(ErrorCode.NONE, member.assignment))
        else:
            member.sync_callback = respond
            if member_id == group.leader_id:
                for each in group.members.values():
                    each.assignment = bytes(assignments.get(each.member_id, b""))
                generation = group.generation_id
                error, write = self._store_group(group, _GROUP_STORE_ERRORS)
                if error:
                    self._group_stored(group, generation, error)
                else:
                    # As Kafka's storeGroup (acks -1): the assignment is handed out only once
                    # the group metadata is replicated. A coordinator cut off from its
                    # followers (and ZooKeeper) cannot complete a generation that a new
                    # coordinator completes as well.
                    self._when_committed(write, _GROUP_STORE_ERRORS,
                                         lambda error: self._group_stored(group, generation, error))

    def _group_stored(self, group: GroupMetadata, generation: int, error: ErrorCode) -> None:
        # A member may have joined or left meanwhile: only the generation that was stored completes.
        if not group.is_(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation:
            return
        if error:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group)
        else:
            group.transition_to(GroupState.STABLE)
            self._propagate_assignment(group, ErrorCode.NONE)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        now = self.clock.time_ms()
        for member in list(group.members.values()):
            callback = member.sync_callback
            if callback is None:
                continue
            member.sync_callback = None
            # Kafka re-arms the session only on success: a member told to rejoin must do so
            # within its session or be removed.
            if not error:
                self._schedule_heartbeat(group, member, now)
            callback(SyncResult(error, member.assignment))

    # ================================================================ Heartbeat / LeaveGroup

    def heartbeat(self, group_id: str, member_id: str, generation_id: int) -> ErrorCode:
        error = self._check(group_id)
        if error:
            return error
        group = self.group(group_id)
        if group is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self._schedule_heartbeat(group, member, self.clock.time_ms())
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        # Stable, or CompletingRebalance: a member may heartbeat between its JoinGroup answer
        # and its SyncGroup (Kafka 2.x accepts this; 0.10.2's REBALANCE_IN_PROGRESS forced a
        # needless second rebalance).
        return ErrorCode.NONE

    def leave_group(self, group_id: str, member_id: str) -> ErrorCode:
        error = self._check(group_id)
        if error:
            return error
        group = self.group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        logger.info("group %s: member %s leaves", group_id, member_id)
        self._on_member_failure(group, member)
        return ErrorCode.NONE

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, now: int) -> None:
        member.last_heartbeat_ms = now
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_timer = self.timers.schedule(
            now + member.session_timeout_ms, lambda: self._on_session_deadline(group, member))

    def _on_session_deadline(self, group: GroupMetadata, member: MemberMetadata) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.join_callback is not None or member.sync_callback is not None:
            return   # waiting on the group, not on the client
        if member.last_heartbeat_ms + member.session_timeout_ms > self.clock.time_ms():
            return
        logger.info("group %s: member %s missed its session timeout of %d ms",
                    group.group_id, member.member_id, member.session_timeout_ms)
        self._on_member_failure(group, member)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.remove(member.member_id)
        # A request of the member still waiting (its LeaveGroup came on another connection)
        # is answered rather than left hanging.
        self._release(member, ErrorCode.UNKNOWN_MEMBER_ID)

    @staticmethod
    def _release(member: MemberMetadata, error: ErrorCode) -> None:
        """Stop the member's session timer and answer its waiting JoinGroup / SyncGroup with ``error``."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        join_callback, member.join_callback = member.join_callback, None
        sync_callback, member.sync_callback = member.sync_callback, None
        if join_callback is not None:
            join_callback(JoinResult(error, member.member_id))
        if sync_callback is not None:
            sync_callback(SyncResult(error))

    def _on_member_failure(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # ================================================================ offsets

    async def commit(self, group_id: str, member_id: str, generation_id: int,
                     retention_ms: int, commits: list[PartitionCommit]) -> list[ErrorCode]:
        """OffsetCommit: store committed offsets; one error per commit, in order, answered once
        the commit is committed in ``__consumer_offsets`` (in a cluster: below its high
        watermark, or in the leader with ``offsets.commit.required.acks`` 1).

        ``retention_ms`` -1 means ``offsets.retention.minutes``; ``generation_id`` -1 with an
        empty ``member_id`` is a commit outside group management. As in Kafka, the empty group
        id is accepted here (old clients commit under it); only the membership APIs refuse it.
        Until the commit is committed OffsetFetch still answers the previous offsets."""
        errors, write = self._commit(group_id, member_id, generation_id, retention_ms, commits)
        if write is None:
            return errors
        error = None
        try:
            error = await self._committed(write)
        finally:
            # Cancelled (the connection closed) counts as not committed: the commit stays in
            # the log, but this process no longer waits for it.
            if error is ErrorCode.NONE:
                write.apply()
            else:
                write.discard()
        if error:
            error = _STORE_ERRORS.get(error, error)
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
                commits: list[PartitionCommit]) -> tuple[list[ErrorCode], "_Write | None"]:
        error = self._check(group_id, validate_id=False)
        if error:
            return [error] * len(commits), None
        group = self.group(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a group we do not know: a stale generation.
                return [ErrorCode.ILLEGAL_GENERATION] * len(commits), None
            group = self._add_group(group_id)
        if group.is_(GroupState.DEAD):
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif generation_id < 0 and group.is_(GroupState.EMPTY):
            error = ErrorCode.NONE
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

    def _store_offsets(self, group: GroupMetadata, retention_ms: int,
                       commits: list[PartitionCommit]) -> tuple[list[ErrorCode], "_Write | None"]:
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
                commit.offset, metadata, committed_at, committed_at + retention)
            errors.append(ErrorCode.NONE)
        if not accepted:
            return errors, None
        events = [(offset_key(group.group_id, topic, partition), offset_value(committed))
                  for (topic, partition), committed in accepted.items()]
        store_error, write = self._append(group.group_id, events, _STORE_ERRORS)
        if store_error:
            return [store_error if e == ErrorCode.NONE else e for e in errors], None
        position = write.last_offset
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

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """Committed offsets of ``partitions`` (None: every partition the group committed);
        a partition without a commit gets offset -1 and no error, as in Kafka."""
        error = self._check(group_id, validate_id=False)
        if error:
            return error, []
        group = self.group(group_id)
        offsets = group.offsets if group is not None and not group.is_(GroupState.DEAD) else {}
        if partitions is None:
            return ErrorCode.NONE, [FetchedOffset(topic, partition, committed.offset, committed.metadata)
                                    for (topic, partition), committed in offsets.items()]
        result = []
        for topic, partition in partitions:
            committed = offsets.get((topic, partition))
            if committed is None:
                result.append(FetchedOffset(topic, partition, -1, ""))
            else:
                result.append(FetchedOffset(topic, partition, committed.offset, committed.metadata))
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
            for tp in partitions & group.pending_commits.keys():
                del group.pending_commits[tp]
            return [tp for tp in group.offsets if tp in partitions]

        removed = self._remove_offsets(deleted)
        if removed:
            logger.info("removed %d committed offset(s) of deleted partitions", removed)
        return removed

    def _remove_offsets(self, select: Callable[[GroupMetadata], list[tuple[str, int]]]) -> int:
        """Remove the offsets ``select`` picks in each group, and groups left empty without
        offsets (none pending either); tombstones go to the log, not waited for (Kafka's
        cleanupGroupMetadata: a lost one is removed again by the next pass)."""
        if not self._active:
            return 0
        removed = 0
        for groups in self._groups.values():
            for group in list(groups.values()):
                chosen = select(group)
                events = [(offset_key(group.group_id, topic, partition), None) for topic, partition in chosen]
                dead = (group.is_(GroupState.EMPTY) and len(chosen) == len(group.offsets)
                        and not group.pending_commits)
                if dead:
                    events.append((group_key(group.group_id), None))
                if not events:
                    continue
                if self._append(group.group_id, events)[0]:
                    continue   # logged; the next pass retries
                for tp in chosen:
                    del group.offsets[tp]
                removed += len(chosen)
                if dead:
                    group.transition_to(GroupState.DEAD)
                    del groups[group.group_id]
                    logger.info("group %s: removed (empty, no offsets left)", group.group_id)
        return removed

    # ================================================================ ListGroups / DescribeGroups

    def list_groups(self) -> tuple[ErrorCode, list[tuple[str, str]]]:
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        if self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []
        return ErrorCode.NONE, [(group.group_id, group.protocol_type or "")
                                for groups in self._groups.values() for group in groups.values()
                                if not group.is_(GroupState.DEAD)]

    def describe_group(self, group_id: str) -> GroupSummary:
        error = self._check(group_id, validate_id=False)
        if error:
            return GroupSummary(error, group_id)
        group = self.group(group_id)
        if group is None:
            return GroupSummary(ErrorCode.NONE, group_id)
        if group.is_(GroupState.STABLE):
            members = tuple(MemberSummary(m.member_id, m.client_id, m.client_host,
                                          m.metadata(group.protocol), m.assignment)
                            for m in group.members.values())
            protocol = group.protocol or ""
        else:
            members = tuple(MemberSummary(m.member_id, m.client_id, m.client_host, b"", b"")
                            for m in group.members.values())
            protocol = ""
        return GroupSummary(ErrorCode.NONE, group_id, group.state.value, group.protocol_type or "",
                            protocol, members)

    # ================================================================ persistence

    def _store_group(self, group: GroupMetadata, errors: dict[ErrorCode, ErrorCode]
                     ) -> tuple[ErrorCode, "_Write | None"]:
        value = group_value(group.stored())
        error, write = self._append(group.group_id, [(group_key(group.group_id), value)], errors)
        if not error:
            group.persisted = value
        return error, write

    def _append(self, group_id: str, events, errors: dict[ErrorCode, ErrorCode] = _STORE_ERRORS
                ) -> tuple[ErrorCode, "_Write | None"]:
        """Append events of ``group_id`` to its partition (which this broker coordinates);
        ``errors`` maps the append's errors to the client's. Tombstones and an empty group's
        metadata do not wait for the returned write to be committed (as in Kafka): a lost
        one is an offset that expires again, a group that empties again."""
        index = self.partition_for(group_id)
        partition = self.partitions[index]
        try:
            last_offset = partition.append(events)
        except RecordError as exc:
            logger.warning("%s-%d: append refused: %s", GROUP_METADATA_TOPIC, index, exc)
            return errors.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR), None
        except OSError:
            logger.exception("%s-%d: append failed", GROUP_METADATA_TOPIC, index)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if not self.clustered:
            # In a cluster the replica manager wakes readers as the high watermark moves.
            self.broker.append_waiters.notify(GROUP_METADATA_TOPIC, index)
        if partition.due_for_snapshot(self.config.snapshot_interval_events,
                                      self.config.snapshot_interval_bytes):
            self._snapshot_soon(index)
        return ErrorCode.NONE, _Write(partition, last_offset)

    async def _committed(self, write: "_Write") -> ErrorCode:
        """Wait until ``write`` is committed; the replication's error if it is not, and
        NOT_COORDINATOR if this broker stopped leading its partition meanwhile (the state
        it was applied to is gone)."""
        error = await write.partition.writer.committed(write.last_offset)
        if self.partitions.get(write.partition.partition) is not write.partition:
            return ErrorCode.NOT_COORDINATOR
        return error

    def _when_committed(self, write: "_Write", errors: dict[ErrorCode, ErrorCode],
                        done: Callable[[ErrorCode], None]) -> None:
        """Call ``done`` with the (mapped) error once ``write`` is committed or failed: at
        once where an append is committed on return (a single broker, acks 1), else from a
        task of :meth:`run`."""
        if write.partition.writer.commits_on_append:
            done(ErrorCode.NONE)
            return

        async def wait() -> None:
            error = await self._committed(write)
            done(errors.get(error, error))

        self._tasks.start_soon(wait)

    def _apply_event(self, groups: dict[str, GroupMetadata], key: bytes, value: bytes | None) -> None:
        """Fold one event (from a snapshot or the log) into one partition's ``groups``."""
        decoded = decode_key(key)
        group = groups.get(decoded.group_id)
        if isinstance(decoded, GroupKey):
            if value is None:
                if group is not None:
                    del groups[decoded.group_id]
                    if group.offsets:
                        # Kafka's loading: a group tombstone removes the group's metadata; its
                        # offsets not tombstoned themselves load into an empty group.
                        groups[decoded.group_id] = GroupMetadata(decoded.group_id, offsets=group.offsets)
                return
            stored = decode_group_value(value)
            if group is None:
                group = groups[decoded.group_id] = GroupMetadata(decoded.group_id)
            group.protocol_type = stored.protocol_type
            group.generation_id = stored.generation_id
            group.protocol = stored.protocol
            group.leader_id = stored.leader_id
            group.members = {
                m.member_id: MemberMetadata(m.member_id, m.client_id, m.client_host,
                                            m.rebalance_timeout_ms, m.session_timeout_ms,
                                            stored.protocol_type,
                                            [(stored.protocol or "", m.subscription)],
                                            assignment=m.assignment)
                for m in stored.members}
            group.state = GroupState.STABLE if group.members else GroupState.EMPTY
            group.persisted = value
            return
        topic_partition = (decoded.topic, decoded.partition)
        if value is None:
            if group is not None:
                group.offsets.pop(topic_partition, None)
            return
        committed = decode_offset_value(value)
        if committed.expire_timestamp == -1:
            committed = OffsetAndMetadata(committed.offset, committed.metadata, committed.commit_timestamp,
                                          committed.commit_timestamp + self.config.offsets_retention_ms)
        if group is None:
            group = groups[decoded.group_id] = GroupMetadata(decoded.group_id)
        group.offsets[topic_partition] = committed

    def _load(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata], *,
              end: int | None = None, report_line: bool = True) -> LoadReport:
        """Fold the newest valid snapshot and the events after it, up to ``end`` (default:
        the log end), into ``groups``. Touches no other state, so it may run in a worker
        thread while the partition is not served."""
        index = partition.partition
        log = partition.log
        snapshot_offset = partition.load_snapshot(lambda key, value: self._apply_event(groups, key, value),
                                                  groups.clear)
        if snapshot_offset is not None:
            partition.snapshot_offsets = [snapshot_offset]
        start = partition.replay_start(snapshot_offset)
        replayed = 0
        for offset, key, value in partition.read_events(start, end):
            try:
                self._apply_event(groups, key, value)
            except GroupRecordError as exc:
                logger.error("%s-%d: skipping undecodable event at offset %d: %s",
                             GROUP_METADATA_TOPIC, index, offset, exc)
                continue
            replayed += 1
        end = log.log_end_offset if end is None else end
        partition.events_since_snapshot = replayed
        if snapshot_offset is not None and snapshot_offset > end:
            # The log lost its tail (power loss before a flush) below a fsynced snapshot.
            # Re-anchor the state at the log end, or later events would be taken for ones the
            # snapshot already covers and skipped at the next start-up.
            logger.warning("%s-%d: snapshot at %d is past the log end %d; rewriting it at %d",
                           GROUP_METADATA_TOPIC, index, snapshot_offset, end, end)
            partition.snapshot_offsets = []
            self._snapshot_sync(partition, groups, force=True)
            partition.snapshots.remove_newer_than(end)
        report = LoadReport(index, snapshot_offset, start, end, replayed)
        if report_line:
            logger.info(_LOAD_LINE, GROUP_METADATA_TOPIC, index,
                    "none" if snapshot_offset is None else f"at offset {snapshot_offset}",
                    replayed, start, end)
        return report

    # ================================================================ snapshots

    def _capture(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata], *, force: bool = False):
        """The snapshot offset and a copy of the partition's state, or None if nothing is new."""
        offset = partition.begin_snapshot(force=force)
        if offset is None:
            return None
        return offset, self._state(groups)

    @staticmethod
    def _state(groups: dict[str, GroupMetadata]):
        # Every event below the snapshot's offset (the log end) is in it, commits still waiting
        # for the high watermark too: they are in the log the snapshot stands for.
        return [(group.group_id, group.persisted, list(group.offsets_in_log().items()))
                for group in groups.values()]

    @staticmethod
    def _entries(state):
        for group_id, persisted, offsets in state:
            if persisted is not None:
                yield group_key(group_id), persisted
            for (topic, partition), committed in offsets:
                yield offset_key(group_id, topic, partition), offset_value(committed)

    def _snapshot_sync(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata] | None = None, *,
                       force: bool = False) -> None:
        captured = self._capture(partition, self._groups[partition.partition] if groups is None else groups,
                                 force=force)
        if captured is None:
            return
        offset, state = captured
        try:
            partition.write_snapshot(offset, encode_snapshot(partition.partition, offset, self._entries(state)))
        except BaseException:
            partition.abandon_snapshot()
            raise
        partition.snapshot_written(offset)
        logger.info("%s-%d: wrote snapshot at offset %d", GROUP_METADATA_TOPIC, partition.partition, offset)

    async def _snapshot_writer(self) -> None:
        """Write due snapshots: state captured on the event loop between appends, encoded and
        written (fsync) in a worker thread, old data pruned back on the loop."""
        while True:
            await self._snapshot_wakeup.wait()
            self._snapshot_wakeup = trio.Event()
            while self._snapshots_due:
                index = self._snapshots_due.pop()
                partition = self.partitions.get(index)
                if partition is None:
                    continue
                captured = self._capture(partition, self._groups[index])
                if captured is None:
                    continue
                offset, state = captured
                try:
                    await trio.to_thread.run_sync(
                        lambda: partition.write_snapshot(
                            offset, encode_snapshot(index, offset, self._entries(state))))
                except Exception:
                    logger.exception("%s-%d: writing the snapshot at %d failed", GROUP_METADATA_TOPIC,
                                     index, offset)
                    partition.abandon_snapshot()
                    continue
                except BaseException:
                    # Cancelled (shutdown) before the write began: the shutdown snapshot
                    # must still see these events as new.
                    partition.abandon_snapshot()
                    raise
                if self.partitions.get(index) is not partition:
                    # Leadership moved while it was written: it may cover events above the
                    # high watermark that the new leader does not have (see _unload).
                    partition.snapshots.remove_newer_than(partition.log.high_watermark)
                    continue
                partition.snapshot_written(offset)
                logger.info("%s-%d: wrote snapshot at offset %d", GROUP_METADATA_TOPIC, index, offset)

    async def _follower_snapshots(self) -> None:
        """Snapshot the partitions this broker follows, so that whichever replica becomes
        leader replays little: every ``offsets.snapshot.interval.events`` committed offsets
        of the log, its newest snapshot plus the events up to the high watermark are folded
        (in a worker thread) into a snapshot at the high watermark, which no truncation
        goes below."""
        while True:
            await trio.sleep(FOLLOWER_SNAPSHOT_CHECK_S)
            log_manager = self.broker.log_manager
            for index in range(self.partition_count()):
                log = log_manager.get_log(GROUP_METADATA_TOPIC, index)
                if log is None or index in self.partitions or index in self._loading:
                    continue
                newest = self._follower_snapshot_at.get(index)
                if newest is None:
                    newest = max(SnapshotStore(log.dir / SNAPSHOT_DIR_NAME).offsets(), default=0)
                    self._follower_snapshot_at[index] = newest
                if log.high_watermark - newest < self.config.snapshot_interval_events:
                    continue
                trim_bound = self.broker.partitions.offsets_trim_bound(index, log)
                try:
                    offset = await trio.to_thread.run_sync(self._snapshot_by_replay, index, log, trim_bound)
                except Exception:
                    logger.exception("%s-%d: follower snapshot failed", GROUP_METADATA_TOPIC, index)
                    continue
                if index not in self.partitions and index not in self._loading:
                    self._follower_snapshot_at[index] = offset

    def _snapshot_by_replay(self, index: int, log, trim_bound: int) -> int:
        partition = OffsetsPartition(index, log, log.dir / SNAPSHOT_DIR_NAME, self.clock,
                                     trim_bound=lambda: trim_bound)
        end = log.high_watermark
        groups: dict[str, GroupMetadata] = {}
        report = self._load(partition, groups, end=end, report_line=False)
        partition.write_snapshot(end, encode_snapshot(index, end, self._entries(self._state(groups))))
        partition.snapshot_written(end)
        logger.info("%s-%d: follower wrote snapshot at offset %d (replayed %d event(s) from offset %d)",
                    GROUP_METADATA_TOPIC, index, end, report.events_replayed, report.replay_start_offset)
        return end
