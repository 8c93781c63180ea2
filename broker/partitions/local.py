"""The partitions of a single broker: one replica each, led here, with no ZooKeeper."""

from __future__ import annotations

import errno
import functools
import logging
import resource
from collections.abc import Callable, Iterable, Sequence

import trio

from minikafka.broker.partitions import NO_EPOCH, AcksWait, Partitions, TopicError, leader_epoch_error
from minikafka.protocol.errors import ErrorCode
from minikafka.storage.config import AppendResult
from minikafka.storage.log import Log
from minikafka.storage.types import TooManyPartitions, TopicAlreadyExists, UnknownTopic

logger = logging.getLogger(__name__)
# An auto-created topic of up to this many partitions is made on the event loop (see _auto_create).
INLINE_CREATION_MAX_PARTITIONS = 1


def _creation_failed(topic: str, exc: OSError) -> TopicError:
    """The disk (or the open-file limit) refused a new topic, which storage has rolled back:
    one log line and KAFKA_STORAGE_ERROR (retriable), not a handler crash."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EMFILE:
        reason += f" (open-file limit {resource.getrlimit(resource.RLIMIT_NOFILE)[0]})"
    logger.error("cannot create topic %r: %s", topic, reason)
    return TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot create topic '{topic}': {reason}.")


class LocalPartitions(Partitions):
    """Every partition in the log manager is led by this broker, which is its whole ISR.
    Topics are created and deleted on its disk, at once."""

    default_replication_factor = 1

    def leader_log(self, topic: str, partition: int, current_leader_epoch: int = NO_EPOCH) -> Log:
        log = self.log_manager.get_log(topic, partition)
        if log is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist")
        error = leader_epoch_error(_epoch_of(log), current_leader_epoch)
        if error:
            raise TopicError(error, f"{topic}-{partition} is at leader epoch {_epoch_of(log)}, "
                                    f"not {current_leader_epoch}")
        return log

    def leader_epoch(self, topic: str, partition: int) -> int:
        log = self.log_manager.get_log(topic, partition)
        return NO_EPOCH if log is None else _epoch_of(log)

    def high_watermark(self, log: Log) -> int:
        # Every appended message is fully replicated at once, also those a crash left above
        # the checkpointed high watermark.
        return log.log_end_offset

    def last_stable_offset(self, log: Log) -> int:
        # What a crash left above the checkpointed high watermark is committed too (see
        # high_watermark): the log's own is moved there, so the transactions it ends are stable.
        if log.high_watermark < log.log_end_offset:
            log.high_watermark = log.log_end_offset
        return log.last_stable_offset

    async def follower_fetched(self, topic: str, partition: int, replica_id: int, fetch_offset: int,
                               current_leader_epoch: int = NO_EPOCH) -> None:
        """No replica follows a single broker's: a fetch naming a broker id only reads to the
        log end."""

    def _append_as_leader(self, topic: str, partition: int, write: Callable[[Log, int], AppendResult],
                          acks: int) -> tuple[AppendResult, AcksWait | None]:
        log = self.leader_log(topic, partition)
        # At the epoch it leads in, which v2 batches carry.
        result = write(log, _epoch_of(log))
        # The leader is the whole ISR: what it appended is committed (and checkpointed so),
        # whatever the acks.
        log.high_watermark = log.log_end_offset
        self.broker.append_waiters.notify(topic, partition)
        return result, None

    # ------------------------------------------------------------------ topics

    def topics(self) -> dict[str, int]:
        return self.log_manager.topics()

    def topic_exists(self, topic: str) -> bool:
        return self.log_manager.has_topic(topic)

    async def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Every partition of a topic holds its id; partition 0 always exists."""
        logs = [self.log_manager.get_log(topic, 0) for topic in topics]
        return {log.topic: log.topic_id for log in logs if log is not None}

    async def _auto_create(self, topic: str) -> None:
        num_partitions = self.broker.config.num_partitions
        async with self.topic_admin:
            if self.topic_exists(topic):  # created by another request while we waited
                return
            # Made durable by the next flush pass (LogManager.flush_due), not before the
            # answer a new producer waits for: see create_topic's fsync_now.
            create = functools.partial(self.log_manager.create_topic, topic, num_partitions, {}, fsync_now=False)
            try:
                if num_partitions <= INLINE_CREATION_MAX_PARTITIONS:
                    # A handful of small file operations, as an append makes on the event
                    # loop: a worker thread's hand-off both ways (and the thread's start, on
                    # a new broker's first creation) cost more than they do.
                    create()
                else:
                    await trio.to_thread.run_sync(create)
            except TooManyPartitions as exc:
                raise TopicError(ErrorCode.INVALID_PARTITIONS, str(exc)) from None
            except OSError as exc:
                raise _creation_failed(topic, exc) from None
        logger.info("auto-created topic %r with %d partition(s)", topic, num_partitions)

    def _check_assignments(self, assignments: dict[int, list[int]]) -> None:
        node_id = self.broker.node_id
        for partition, replicas in sorted(assignments.items()):
            if list(replicas) != [node_id]:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Partition {partition} assigned to {list(replicas)}; the only "
                                 f"broker is {node_id}.")

    def _check_replication_factor(self, replication_factor: int) -> None:
        if replication_factor > 1:
            raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {replication_factor} larger than available brokers: 1.")

    async def _create(self, topic: str, num_partitions: int, replication_factor: int,
                      assignments: dict[int, list[int]], overrides: dict[str, str], *,
                      validate_only: bool, timeout_ms: int) -> None:
        """More partitions than the process can keep open (open-file limit, memory maps:
        LogManager.check_partition_room) are INVALID_PARTITIONS; a disk that refuses them
        KAFKA_STORAGE_ERROR. ``timeout_ms`` never runs out: creation is synchronous."""
        if assignments:
            num_partitions = len(assignments)
        async with self.topic_admin:
            if self.topic_exists(topic):
                raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
            try:
                self.log_manager.check_partition_room(num_partitions)
                if validate_only:
                    return
                await trio.to_thread.run_sync(self.log_manager.create_topic, topic, num_partitions, overrides)
            except TooManyPartitions as exc:
                raise TopicError(ErrorCode.INVALID_PARTITIONS, str(exc)) from None
            except TopicAlreadyExists as exc:
                raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.") from exc
            except OSError as exc:
                raise _creation_failed(topic, exc) from None
        logger.info("created topic %r with %d partition(s)%s", topic, num_partitions,
                    f", configs {overrides}" if overrides else "")

    async def _replica_assignment(self, topic: str) -> dict[int, list[int]] | None:
        count = self.partition_count(topic)
        return None if count is None else {p: [self.broker.node_id] for p in range(count)}

    def _place_new_partitions(self, current: dict[int, list[int]], added: int) -> dict[int, list[int]]:
        return {p: [self.broker.node_id] for p in range(len(current), len(current) + added)}

    async def _add_partitions(self, topic: str, current: dict[int, list[int]], added: dict[int, list[int]], *,
                              validate_only: bool, timeout_ms: int) -> None:
        """More partitions than the process can keep open are INVALID_PARTITIONS, as at
        creation; ``timeout_ms`` never runs out."""
        async with self.topic_admin:
            if self.partition_count(topic) != len(current):  # deleted or grown meanwhile
                raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic '{topic}' changed meanwhile; try again.")
            try:
                self.log_manager.check_partition_room(len(added))
                if validate_only:
                    return
                await trio.to_thread.run_sync(self.log_manager.add_partitions, topic, len(current) + len(added))
            except TooManyPartitions as exc:
                raise TopicError(ErrorCode.INVALID_PARTITIONS, str(exc)) from None
            except OSError as exc:
                raise _creation_failed(topic, exc) from None
        logger.info("topic %r now has %d partition(s)", topic, len(current) + len(added))

    async def topic_overrides(self, topic: str) -> dict[str, str]:
        try:
            return self.log_manager.topic_overrides(topic)
        except UnknownTopic:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist") from None

    async def alter_topic_configs(self, topic: str, overrides: dict[str, str]) -> None:
        """Written to each partition's ``topic-config.properties`` and applied at once."""
        async with self.topic_admin:
            try:
                await trio.to_thread.run_sync(self.log_manager.set_topic_overrides, topic, overrides)
            except UnknownTopic:
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist") from None
        logger.info("topic %r now has configs %s", topic, overrides)

    async def delete_topic(self, topic: str, timeout_ms: int = 60000) -> None:
        """Synchronous: ``timeout_ms`` never runs out."""
        async with self.topic_admin:
            count = self.partition_count(topic)
            if count is None:
                self.check_topic_name(topic)
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
            if self.broker.is_internal(topic):
                raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic {topic!r} is internal")
            await trio.to_thread.run_sync(self.log_manager.delete_topic, topic)
        for partition in range(count):
            self.broker.append_waiters.notify(topic, partition)
        logger.info("deleted topic %r", topic)
        await self._remove_committed_offsets(topic, count)

    async def _remove_committed_offsets(self, topic: str, count: int) -> None:
        # Imported here: a broker whose clients never use groups never loads the coordinator.
        from minikafka.broker.groups.coordinator import GROUP_METADATA_TOPIC

        if not self.topic_exists(GROUP_METADATA_TOPIC):
            return   # no group ever committed
        # Offsets stored by an earlier run are loaded with the coordinator: start it.
        coordinator = await self.broker.groups()
        coordinator.remove_deleted_partitions({(topic, partition) for partition in range(count)})

    async def elect_leaders(self, partitions: list[tuple[str, int]] | None, unclean: bool,
                            timeout_ms: int) -> dict[tuple[str, int], ErrorCode]:
        """The one replica of every partition is its preferred replica and leads already:
        what Kafka answers for a partition of replication factor 1."""
        if partitions is None:
            return {}
        topics = self.topics()
        return {(topic, partition): ErrorCode.ELECTION_NOT_NEEDED if 0 <= partition < topics.get(topic, 0)
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for topic, partition in partitions}

    async def alter_reassignments(self, asked: dict[tuple[str, int], list[int] | None],
                                  timeout_ms: int) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """A single broker's only possible replica set is itself: moving a partition there is
        the no-op Kafka answers NONE for; any other broker is not alive; there is never a move
        to cancel."""
        topics = self.topics()
        results = {}
        for (topic, partition), target in asked.items():
            if not 0 <= partition < topics.get(topic, 0):
                results[(topic, partition)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{partition}")
            elif target is None:
                results[(topic, partition)] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                               f"no reassignment of {topic}-{partition} is in progress")
            elif target != [self.broker.node_id]:
                results[(topic, partition)] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                               f"{target}: broker {self.broker.node_id} is the only one alive")
            else:
                results[(topic, partition)] = (ErrorCode.NONE, None)
        return results

    async def list_reassignments(self, keys: list[tuple[str, int]] | None
                                 ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        return {}

    # ------------------------------------------------------------------ metadata

    async def cluster_view(self) -> None:
        """A single broker knows its cluster, itself, from the start."""

    def brokers(self, listener_name: str) -> tuple[list[dict], int]:
        host, port = self.broker.advertised_endpoint(listener_name)
        return [{"node_id": self.broker.node_id, "host": host, "port": port, "rack": None}], self.broker.node_id

    def partition_metadata(self, topic: str, count: int) -> Sequence[dict]:
        return _single_broker_partitions(self.broker.node_id, count)

    # ------------------------------------------------------------------ controller requests

    # A single broker has no controller: every request from one is stale to it.

    async def become_leader_or_follower(self, body) -> tuple[ErrorCode, list[tuple[str, int, ErrorCode]]]:
        return ErrorCode.STALE_CONTROLLER_EPOCH, []

    async def stop_replicas(self, body) -> tuple[ErrorCode, list[tuple[str, int, ErrorCode]]]:
        return ErrorCode.STALE_CONTROLLER_EPOCH, []

    async def update_metadata(self, body, version: int) -> ErrorCode:
        return ErrorCode.STALE_CONTROLLER_EPOCH

    async def controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        raise TopicError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker.node_id} is not a cluster's controller")

    async def prepare_shutdown(self) -> None:
        """Nothing to move: no other broker could lead these partitions."""

    # ------------------------------------------------------------------ consumer groups

    async def find_group_coordinator(self, group_id: str,
                                     listener_name: str = "") -> tuple[ErrorCode, tuple[int, str, int] | None]:
        """This broker coordinates every group."""
        broker = self.broker
        here = (broker.node_id, *broker.advertised_endpoint(listener_name))
        if not broker.groups_running:
            # This broker, without starting the coordinator: the group's first request that
            # needs it does (Broker.groups). Consumers look the coordinator up first thing, also
            # those that only fetch, and their fetches share the connection behind this answer.
            return ErrorCode.NONE, here
        error = broker.group_coordinator.find_coordinator(group_id)
        return error, (None if error else here)


def _epoch_of(log: Log) -> int:
    """A single broker leads every partition in the latest epoch its cache holds: 0 from creation
    on, or the epoch a log dir brought from a cluster last led in (its appends never record a
    lower one)."""
    return max(log.leader_epoch_cache.latest_epoch, 0)


@functools.lru_cache(maxsize=64)
def _single_broker_partitions(node: int, partitions: int) -> tuple[dict, ...]:
    """The partitions of any topic of that size on one broker, which leads them all and is
    their only replica. Built once per size and shared by every answer (the encoder only
    reads them): built per request, a topic of thousands of partitions held the event loop
    for tens of milliseconds on each Metadata request naming it. The leader epoch is 0: a
    single broker's log stays in its first epoch (``Log.create``)."""
    return tuple({"error_code": ErrorCode.NONE, "partition_index": index, "leader_id": node, "leader_epoch": 0,
                  "replica_nodes": (node,), "isr_nodes": (node,), "offline_replicas": ()}
                 for index in range(partitions))
