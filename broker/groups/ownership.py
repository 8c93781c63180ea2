"""Partition ownership: which ``__consumer_offsets`` partitions this broker coordinates, and
their groups (Kafka's GroupMetadataManager: ownedPartitions, loadingPartitions,
groupMetadataCache, partitionFor).

A group belongs to the partition ``partition_for`` names. A single broker coordinates every
partition, loaded at start-up (:meth:`PartitionOwnership.load_all`); a cluster broker those it
leads: it loads one in the background when it becomes its leader (:meth:`became_leader`;
COORDINATOR_LOAD_IN_PROGRESS meanwhile) and drops its groups when it stops
(:meth:`resigned`; NOT_COORDINATOR). Reading a partition's groups from its log and snapshots is
:class:`broker.groups.store.GroupStore`'s; what a loaded or dropped group means for its members
is the membership's (``on_group_loaded`` / ``on_group_unloaded``, Kafka's onGroupLoaded /
onGroupUnloaded).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from minikafka.broker.groups.group import GroupMetadata, GroupState
from minikafka.broker.groups.records import partition_for
from minikafka.broker.groups.store import (GROUP_METADATA_TOPIC, SNAPSHOT_DIR_NAME, LoadReport, OffsetsPartition,
                                           remove_unreplicated_snapshots)
from minikafka.protocol.errors import ErrorCode

logger = logging.getLogger(__name__)

# The wait before a failed load of a led partition is tried again, doubling up to the maximum.
LOAD_RETRY_FIRST_S = 0.5
LOAD_RETRY_MAX_S = 30.0

T = TypeVar("T")


class PartitionOwnership:
    """The ``__consumer_offsets`` partitions this broker coordinates (or is loading), their
    groups, and which partition and group a group id is.

    ``active`` is False before start-up and from shutdown on: every request is answered
    COORDINATOR_NOT_AVAILABLE.
    """

    def __init__(self, config, clock) -> None:
        self.config = config
        self.clock = clock
        self.store = None
        self._on_group_loaded: Callable[[GroupMetadata, int], None] | None = None
        self._on_group_unloaded: Callable[[GroupMetadata], None] | None = None
        # The partitions this broker coordinates (all of them on a single broker; those it
        # leads, once loaded, in a cluster) and their groups, by partition index.
        self.partitions: dict[int, OffsetsPartition] = {}
        self.groups_by_partition: dict[int, dict[str, GroupMetadata]] = {}
        # Partitions being loaded after this broker became their leader -> the load's token
        # (a load whose token is no longer here was overtaken by a leadership change).
        self._loading: dict[int, object] = {}
        # Partitions being loaded -> what must run on their groups once loaded (when_loaded).
        self._after_load: dict[int, list[Callable[[dict[str, GroupMetadata]], None]]] = {}
        self._loads_in, self._loads_out = trio.open_memory_channel(math.inf)
        self.load_reports: list[LoadReport] = []
        self.active = False
        # Partitions of __consumer_offsets once known for certain: on a single broker from
        # start-up; in a cluster from ZooKeeper, before the first partition is loaded (the
        # metadata cache fills in partition by partition, and a group placed by a partial
        # count would land in the wrong partition). It never changes afterwards.
        self.topic_partitions: int | None = None

    def connect(self, store, on_group_loaded: Callable[[GroupMetadata, int], None],
                on_group_unloaded: Callable[[GroupMetadata], None]) -> None:
        """Give the ownership what taking over and giving up partitions needs: the
        :class:`broker.groups.store.GroupStore` that loads them, and the membership's
        callbacks for each group loaded and dropped. Both read the partitions and groups
        here, so they are built after the ownership and connected to it afterwards."""
        self.store = store
        self._on_group_loaded = on_group_loaded
        self._on_group_unloaded = on_group_unloaded

    def load_all(self, log_manager, count: int) -> None:
        """Single broker: coordinate all ``count`` partitions, each loaded from its newest
        valid snapshot and the events after it."""
        self.topic_partitions = count
        self.partitions = {}
        self.groups_by_partition = {}
        self.load_reports = []
        for index in range(count):
            log = log_manager.get_log(GROUP_METADATA_TOPIC, index)
            partition = OffsetsPartition(index, log, log.dir / SNAPSHOT_DIR_NAME, self.clock)
            groups: dict[str, GroupMetadata] = {}
            self.load_reports.append(self.store.load(partition, groups))
            self._install(partition, groups)

    def _install(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata]) -> None:
        """Start coordinating a loaded partition: its groups' members get their sessions."""
        index = partition.partition
        self.partitions[index] = partition
        self.groups_by_partition[index] = groups
        now = self.clock.time_ms()
        for group in groups.values():
            self._on_group_loaded(group, now)

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

    def serves(self, index: int) -> bool:
        """Whether this broker coordinates partition ``index`` or is loading it."""
        return index in self.partitions or index in self._loading

    def resigned(self, index: int, log) -> None:
        """This broker follows (or no longer holds) ``__consumer_offsets-index``: its groups
        are dropped and their requests answered NOT_COORDINATOR; the new leader loads them."""
        self._unload(index, log)

    def when_loaded(self, index: int, action: Callable[[dict[str, GroupMetadata]], None]) -> None:
        """Run ``action`` on the groups of partition ``index``: now if it is served, once loaded
        if it is loading (the load may have read the log before what ``action`` stands for was
        appended; Kafka runs both on the coordinator's one scheduler thread), not at all if
        this broker does not coordinate it (its new coordinator reads the log)."""
        if index in self.groups_by_partition:
            action(self.groups_by_partition[index])
        elif index in self._loading:
            self._after_load.setdefault(index, []).append(action)

    def _unload(self, index: int, log) -> None:
        self._loading.pop(index, None)
        self._after_load.pop(index, None)
        self.store.forget(index)
        self.partitions.pop(index, None)
        groups = self.groups_by_partition.pop(index, {})
        for group in groups.values():
            self._on_group_unloaded(group)
        if groups:
            logger.info("%s-%d: no longer its leader: dropped %d group(s)", GROUP_METADATA_TOPIC, index,
                        len(groups))
        if log is not None:
            try:
                remove_unreplicated_snapshots(GROUP_METADATA_TOPIC, index, log)
            except OSError as exc:
                # Loading the partition removes them first, and retries until it can.
                logger.error("%s-%d: snapshots above the high watermark not removed: %s", GROUP_METADATA_TOPIC,
                             index, exc)

    async def run_loads(self) -> None:
        async with trio.open_nursery() as nursery:
            async for index, log, writer, token in self._loads_out:
                nursery.start_soon(self._load_led, index, log, writer, token)

    async def _load_led(self, index: int, log, writer, token) -> None:
        """Load a partition this broker became leader of, off the event loop; install it
        unless leadership moved meanwhile, then snapshot it if the load replayed anything."""

        async def load():
            groups: dict[str, GroupMetadata] = {}
            partition = OffsetsPartition(index, log, log.dir / SNAPSHOT_DIR_NAME, self.clock, writer,
                                         trim_bound=writer.trim_bound)
            report = await trio.to_thread.run_sync(self.store.load_led_partition, partition, groups)
            return partition, groups, report

        loaded = await load_until_done(self, GROUP_METADATA_TOPIC, index, writer, load,
                                       lambda: self._loading.get(index) is token)
        if loaded is None or self._loading.get(index) is not token:
            return
        partition, groups, report = loaded
        del self._loading[index]
        self.load_reports.append(report)
        self._install(partition, groups)
        for action in self._after_load.pop(index, []):
            action(groups)
        if partition.events_since_snapshot:
            self.store.snapshot_soon(index)

    # ---------------------------------------------------------------- lookup

    def partition_count(self) -> int:
        """Partitions of ``__consumer_offsets``: the topic's, or the count it will be created with."""
        if self.topic_partitions is not None:
            return self.topic_partitions
        return self.config.offsets_topic_num_partitions

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds ``group_id``."""
        return partition_for(group_id, self.partition_count())

    def group(self, group_id: str) -> GroupMetadata | None:
        groups = self.groups_by_partition.get(self.partition_for(group_id))
        return None if groups is None else groups.get(group_id)

    def add_group(self, group_id: str) -> GroupMetadata:
        group = GroupMetadata(group_id)
        self.groups_by_partition[self.partition_for(group_id)][group_id] = group
        return group

    def check(self, group_id: str, *, validate_id: bool = True) -> ErrorCode:
        """The coordinator-level error for a request about ``group_id`` (NONE if we serve it),
        in Kafka 2.8's validateGroupStatus order."""
        if validate_id and not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        index = self.partition_for(group_id)
        if index in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if index not in self.partitions:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def list_groups(self) -> tuple[ErrorCode, list[tuple[str, str, str]]]:
        """(group id, protocol type, state name) of every group coordinated here."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        if self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []
        return ErrorCode.NONE, [(group.group_id, group.protocol_type or "", group.state.value)
                                for groups in self.groups_by_partition.values() for group in groups.values()
                                if not group.is_(GroupState.DEAD)]


async def load_until_done(owner, topic: str, index: int, writer, load: Callable[[], Awaitable[T]],
                          still_loading: Callable[[], bool]) -> T | None:
    """A coordinator's load of ``topic``-``index``, a partition it just became leader of
    (the group coordinator's and the transaction coordinator's): first the topic's partition
    count, set on ``owner.topic_partitions`` as soon as ZooKeeper tells it (waiting for
    ZooKeeper while it is unavailable), then ``load()`` until it succeeds. A failed load is
    tried again after a wait that doubles: Kafka 2.x serves whatever a failed load got to,
    and a partial state would answer without offsets or transactions that exist. None once
    ``still_loading()`` says leadership moved on meanwhile."""
    while owner.topic_partitions is None:
        try:
            owner.topic_partitions = await writer.topic_partitions()
        except Exception as exc:  # ZooKeeper unavailable: the load waits for it
            logger.warning("%s-%d: partition count unknown (%s); retrying", topic, index, exc)
            await trio.sleep(LOAD_RETRY_FIRST_S)
        if not still_loading():
            return None
    retry_s = LOAD_RETRY_FIRST_S
    while True:
        try:
            return await load()
        except Exception:
            if not still_loading():
                return None
            logger.exception("%s-%d: loading failed; retrying in %.1f s", topic, index, retry_s)
        await trio.sleep(retry_s)
        retry_s = min(retry_s * 2, LOAD_RETRY_MAX_S)
        if not still_loading():
            return None
