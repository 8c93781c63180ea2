"""The partitions this broker serves, behind one interface chosen when the broker starts.

:class:`Partitions` is what handlers ask about topics and partitions, as Kafka's KafkaApis asks
its ReplicaManager: the leader's log of a partition or the error a client acts on, the offset a
consumer may read up to, appends with their acks. Two implementations, so that no handler
checks which mode the broker runs in (a single broker is a cluster of one):

- :class:`~broker.partitions.local.LocalPartitions` (``local.py``): one broker, no ZooKeeper;
  every partition has one replica, this broker leads it, and an append is committed at once.
- :class:`~broker.partitions.replicated.ReplicatedPartitions` (``replicated.py``): a member of a
  ZooKeeper cluster; partitions are led where the controller says, reads and appends go
  through the leader replica of ``replication.replica_manager``. Imported only in a cluster.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence

import trio

from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.storage.config import AppendResult, LogConfig
from minikafka.storage.log import Log
from minikafka.storage.producer_state import AppendOrigin
from minikafka.storage.names import InvalidTopicName, validate_topic_name

# What an append hands back to wait on until the ISR holds it: called with the produce's
# timeout in ms, it answers the partition's error code (NONE once replicated).
AcksWait = Callable[[int], Awaitable[ErrorCode]]

# How long a transaction marker's write waits for the ISR: Kafka's request.timeout.ms default,
# the timeout its WriteTxnMarkers handler gives appendRecords.
MARKER_TIMEOUT_MS = 30_000

logger = logging.getLogger(__name__)

# How much of a replica being moved to another log dir is copied per step (Kafka's
# ReplicaAlterLogDirsThread fetches replica.fetch.max.bytes, 1 MiB by default, per partition).
MOVE_CHUNK_BYTES = 1 << 20

# A request's current leader epoch when it names none (requests before KIP-320's versions, and
# clients that have no epoch from Metadata): nothing to check.
NO_EPOCH = -1


def leader_epoch_error(replica_epoch: int, current_leader_epoch: int) -> ErrorCode:
    """Whether a request that believes the partition is at ``current_leader_epoch`` may be served
    by a replica at ``replica_epoch`` (KIP-320; Kafka's Partition.checkCurrentLeaderEpoch):
    FENCED_LEADER_EPOCH when the requester is behind (its metadata is stale: it refreshes it),
    UNKNOWN_LEADER_EPOCH when it is ahead (this replica has not had its LeaderAndIsr yet: it
    retries), NONE when they agree or no epoch is named."""
    if current_leader_epoch == NO_EPOCH or current_leader_epoch == replica_epoch:
        return ErrorCode.NONE
    if current_leader_epoch < replica_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH


class TopicError(Exception):
    """A topic-level request refused with a Kafka error code and a readable message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)


class Partitions(ABC):
    """The topic and partition operations of a broker; the behaviour both kinds share."""

    # What CreateTopics' replication factor -1 means (Kafka's default.replication.factor).
    default_replication_factor: int

    def __init__(self, broker) -> None:
        self.broker = broker
        self.log_manager = broker.log_manager
        # Topics made or removed on this broker's own disk (a single broker's, and its
        # coordinator's __consumer_offsets; a cluster's go through ZooKeeper) in a worker
        # thread: one at a time, so "does it exist?" and "create it" cannot interleave.
        self.topic_admin = trio.Lock()
        # Set when a replica starts moving to another log dir, for move_replicas to wake.
        self._moves_started = trio.Event()

    # ------------------------------------------------------------------ reads

    @abstractmethod
    def leader_log(self, topic: str, partition: int, current_leader_epoch: int = NO_EPOCH) -> Log:
        """The log of ``topic-partition`` if this broker leads it, else TopicError with the
        code a client acts on (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_FOR_PARTITION,
        LEADER_NOT_AVAILABLE).

        A request that names the leader epoch it expects (Fetch v9+, ListOffsets v4+,
        OffsetForLeaderEpoch v2+) is checked against this broker's replica first, leader or
        follower (:func:`leader_epoch_error`), as Kafka's Partition.getLocalLog checks the epoch
        before the leadership: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH."""

    @abstractmethod
    def leader_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch of ``topic-partition`` as this broker's replica knows it (what
        :meth:`leader_log` checks a request's epoch against); NO_EPOCH without a replica."""

    @abstractmethod
    def high_watermark(self, log: Log) -> int:
        """The offset below which a consumer may read ``log`` (a leader log): what every
        in-sync replica holds. Followers read up to the log end instead."""

    @abstractmethod
    def last_stable_offset(self, log: Log) -> int:
        """The offset below which a READ_COMMITTED consumer may read ``log`` (a leader log):
        every transaction below it decided and its marker below the high watermark."""

    @abstractmethod
    async def follower_fetched(self, topic: str, partition: int, replica_id: int, fetch_offset: int,
                               current_leader_epoch: int = NO_EPOCH) -> None:
        """A follower at ``current_leader_epoch`` fetched ``topic-partition`` from
        ``fetch_offset``, its log end. An error, a fenced epoch included, is left for the
        fetch's read of the partition to answer."""

    def leader_throttled(self, topics: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        """Those of ``topics``' partitions whose replica here, as leader, its topic lists in
        ``leader.replication.throttled.replicas`` (KIP-73): a single broker has no followers."""
        return set()

    def held_back_from(self, replica_id: int, throttled: set[tuple[str, int]]) -> set[tuple[str, int]]:
        """Of the ``throttled`` partitions, those a fetch by follower ``replica_id`` gets no
        records of now: the leader's throttle is over its rate and the follower is not in the ISR."""
        return set()

    def record_leader_throttled(self, nbytes: int) -> None:
        """Bytes of throttled partitions a follower's fetch was answered with."""

    # ------------------------------------------------------------------ appends

    def append(self, topic: str, partition: int, records: bytes, acks: int,
               origin: AppendOrigin = AppendOrigin.CLIENT, *,
               in_place: bool = False) -> tuple[AppendResult, AcksWait | None]:
        """Append a producer's message set as the partition's leader and wake the fetches
        waiting on it (Kafka's appendRecords; ``origin``: see ``Log.append_as_leader``). Returns
        the result and, when ``acks`` asks for
        more replicas than hold the set yet, what to wait on before answering (else None).
        Raises RecordError (the set is refused and nothing is written) or TopicError."""
        def write(log: Log, leader_epoch: int) -> AppendResult:
            if records is None:
                raise RecordError(ErrorCode.CORRUPT_MESSAGE, "null message set")
            # No bytes() copy of the request's view: validation writes the set in place where
            # ``in_place`` hands it over, and copies it into the buffer it writes otherwise.
            return log.append_as_leader(records, leader_epoch, origin, in_place=in_place)

        return self._append_as_leader(topic, partition, write, acks)

    async def append_txn_marker(self, topic: str, partition: int, *, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int, commit: bool,
                                timeout_ms: int = MARKER_TIMEOUT_MS) -> ErrorCode:
        """Write the COMMIT (``commit``) or ABORT marker of ``producer_id``'s transaction to
        ``topic-partition`` as its leader, for a transaction coordinator at
        ``coordinator_epoch`` (``Log.append_txn_marker``), and answer once it is committed as an
        acks=all produce is: Kafka's appendRecords with requiredAcks -1, internal topics
        allowed, origin Coordinator, as its WriteTxnMarkers handler calls it.

        The error code: NONE; UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (not led
        here); NOT_ENOUGH_REPLICAS (ISR below ``min.insync.replicas``, nothing written),
        NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT (after ``timeout_ms``);
        INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED (a stale producer or
        coordinator epoch), UNSUPPORTED_FOR_MESSAGE_FORMAT (a magic 0/1 log);
        KAFKA_STORAGE_ERROR."""
        def write(log: Log, leader_epoch: int) -> AppendResult:
            return log.append_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                         coordinator_epoch=coordinator_epoch, commit=commit, leader_epoch=leader_epoch)

        try:
            _, acks_wait = self._append_as_leader(topic, partition, write, -1)
        except (RecordError, TopicError) as exc:
            logger.debug("marker for producer %d refused by %s-%d: %s", producer_id, topic, partition, exc)
            return exc.code
        except OSError as exc:
            logger.error("marker for producer %d not written to %s-%d: %s", producer_id, topic, partition, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE if acks_wait is None else await acks_wait(timeout_ms)

    @abstractmethod
    def _append_as_leader(self, topic: str, partition: int, write: Callable[[Log, int], AppendResult],
                          acks: int) -> tuple[AppendResult, AcksWait | None]:
        """Have ``write`` append to the log of ``topic-partition`` as its leader, at the leader
        epoch it is given, and wake the fetches waiting on the partition; what :meth:`append`
        says of ``acks`` and the result. TopicError when not led here (before ``write``)."""

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords on the partition's leader (Kafka 2.8's Partition.deleteRecordsOnLeader):
        the log start offset moves up to ``offset`` (-1: the high watermark) and is
        checkpointed at once. Returns the log start offset. TopicError: the leader_log errors,
        OFFSET_OUT_OF_RANGE below 0 or above the high watermark, POLICY_VIOLATION for a topic
        that only compacts."""
        log = self.leader_log(topic, partition)
        if not log.config.deletes_old_segments:
            raise TopicError(ErrorCode.POLICY_VIOLATION, f"Records of partition {topic}-{partition} can not be "
                                                         "deleted due to the configured policy")
        high_watermark = self.high_watermark(log)
        target = high_watermark if offset == -1 else offset
        if not 0 <= target <= high_watermark:
            raise TopicError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"Cannot increment the log start offset to {target} of partition {topic}-{partition} "
                             f"since it is larger than the high watermark {high_watermark}" if target >= 0 else
                             f"The offset {target} for partition {topic}-{partition} is not valid")
        start = await trio.to_thread.run_sync(log.increment_log_start_offset, target)
        await trio.to_thread.run_sync(self.log_manager.checkpoint_log_start_offsets)
        return start

    # ------------------------------------------------------------------ log dirs (KIP-113)

    async def alter_replica_log_dir(self, topic: str, partition: int, path: str) -> ErrorCode:
        """Move this broker's replica of ``topic-partition`` to its log dir ``path``
        (AlterReplicaLogDirs; Kafka 2.8's ReplicaManager.alterReplicaLogDirs): NONE once the
        move is under way, or when the replica is there already; LOG_DIR_NOT_FOUND for a path
        that is not one of log.dirs; INVALID_TOPIC_EXCEPTION for a name whose future directory
        cannot be named. Without a replica here, ``path`` is remembered for when it is made
        (a cluster's LeaderAndIsr, or a topic created later) and the answer is Kafka's:
        REPLICA_NOT_AVAILABLE for a partition the cluster has, else UNKNOWN_TOPIC_OR_PARTITION.
        The copying is move_replicas' work."""
        from minikafka.storage.names import fits_future_dir_name

        try:
            validate_topic_name(topic)
        except InvalidTopicName:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if partition < 0:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not fits_future_dir_name(topic, partition):
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        destination = self.log_manager.log_dir_named(path)
        if destination is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if await trio.to_thread.run_sync(self.log_manager.start_move, topic, partition, destination):
            self._moves_started.set()
            return ErrorCode.NONE
        count = self.partition_count(topic)
        return ErrorCode.REPLICA_NOT_AVAILABLE if count is not None and partition < count \
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    async def move_replicas(self) -> None:
        """Run the moves between log dirs until cancelled (Kafka's ReplicaAlterLogDirsThread):
        each future log is filled from its replica, MOVE_CHUNK_BYTES at a time in a worker
        thread, the moves in turn, at most ``replica.alter.log.dirs.io.max.bytes.per.second``
        in all (Kafka's quota for this copying); once one has caught up it replaces its
        replica (LogManager.finish_move). The replica goes on serving meanwhile."""
        from minikafka.storage.types import UnknownTopic

        while True:
            self._moves_started = trio.Event()
            futures = self.log_manager.futures()
            if not futures:
                await self._moves_started.wait()
                continue
            for future in futures:
                rate = self._move_rate()
                chunk = MOVE_CHUNK_BYTES if rate is None else max(1, min(MOVE_CHUNK_BYTES, rate))
                copied = 0
                try:
                    copied = await trio.to_thread.run_sync(self.log_manager.copy_to_future, future.topic,
                                                           future.partition, chunk)
                    if not copied and await trio.to_thread.run_sync(self.log_manager.finish_move, future.topic,
                                                                    future.partition, future):
                        logger.info("%s-%d moved to %s", future.topic, future.partition, future.dir.parent)
                except UnknownTopic:  # deleted, or the move cancelled, meanwhile
                    pass
                except Exception:
                    logger.exception("moving %s-%d to %s failed; retried", future.topic, future.partition,
                                     future.dir.parent)
                    await trio.sleep(1)
                await self._pace_move(copied)

    def _move_rate(self) -> int | None:
        # A dynamic config, read at each use: kafka-reassign-partitions.sh
        # --replica-alter-log-dirs-throttle sets it and --verify deletes it.
        return self.broker.config.replica_alter_log_dirs_io_max_bytes_per_second

    async def _pace_move(self, copied: int) -> None:
        """Wait as long as ``copied`` bytes take at the moves' rate, re-read every half second:
        one chunk holds whole batches, so may be far above the rate, and a throttle changed
        or deleted meanwhile applies to the rest of the wait."""
        owed = float(copied)
        while owed > 0:
            rate = self._move_rate()
            if rate is None:
                return
            step = min(owed / rate, 0.5)
            await trio.sleep(step)
            owed -= step * rate

    # ------------------------------------------------------------------ topics

    @abstractmethod
    def topics(self) -> dict[str, int]:
        """Every topic (internal ones included) with its partition count."""

    @abstractmethod
    def topic_exists(self, topic: str) -> bool:
        ...

    @abstractmethod
    async def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """The id (KIP-516) of each of ``topics`` that exists and has one, the same on every
        broker of a cluster."""

    async def topic_names_by_id(self) -> dict[str, str]:
        """Every topic with an id, by its id."""
        return {topic_id: topic for topic, topic_id in (await self.topic_ids(list(self.topics()))).items()}

    def partition_count(self, topic: str) -> int | None:
        return self.topics().get(topic)

    @staticmethod
    def check_topic_name(topic: str) -> None:
        """Raise TopicError(INVALID_TOPIC_EXCEPTION) for a name Kafka would refuse."""
        try:
            validate_topic_name(topic)
        except InvalidTopicName as exc:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None

    def checked_topic_overrides(self, configs: dict[str, str | None]) -> dict[str, str]:
        """CreateTopics' configs as topic overrides; TopicError(INVALID_CONFIG) for a null value
        or a name or value Kafka would refuse."""
        overrides = {}
        for name, value in configs.items():
            if value is None:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic config '{name}'.")
            overrides[name] = value
        try:
            LogConfig.from_topic_configs(self.broker.default_log_config, overrides)
        except ValueError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return overrides

    async def ensure_topic(self, topic: str, *, may_create: bool = True) -> None:
        """Make sure ``topic`` exists, creating it with ``num.partitions`` partitions when
        ``auto.create.topics.enable`` is on and the client allows it (``may_create``,
        Metadata v4+'s ``allow_auto_topic_creation``).

        Raises TopicError: INVALID_TOPIC_EXCEPTION for a bad name,
        UNKNOWN_TOPIC_OR_PARTITION when it does not exist and may not be created,
        KAFKA_STORAGE_ERROR when the disk refuses it, LEADER_NOT_AVAILABLE while a cluster
        elects the new topic's leaders.
        """
        if self.topic_exists(topic):
            return
        self.check_topic_name(topic)
        if not (may_create and self.broker.config.auto_create_topics) or self.broker.is_internal(topic):
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
        await self._auto_create(topic)

    @abstractmethod
    async def _auto_create(self, topic: str) -> None:
        """Create ``topic`` with the broker's defaults, as a Metadata request asked for it."""

    async def create_topic(self, topic: str, num_partitions: int, replication_factor: int,
                           assignments: dict[int, list[int]], configs: dict[str, str | None],
                           *, validate_only: bool = False, timeout_ms: int = 60000) -> tuple[int, int]:
        """Create a topic as CreateTopics asks (Kafka's AdminManager rules); returns its
        partition count and replication factor.

        ``num_partitions`` / ``replication_factor`` of -1 take the broker defaults
        (``num.partitions``, :attr:`default_replication_factor`), as Kafka does since KIP-464;
        with explicit ``assignments`` both must be -1. ``validate_only`` checks everything and
        creates nothing. Raises TopicError with INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS,
        INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT,
        INVALID_REQUEST, INVALID_CONFIG, or what creating it here refuses (:meth:`_create`).
        """
        self.check_topic_name(topic)
        if self.broker.is_internal(topic):
            if self.topic_exists(topic):
                raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Topic '{topic}' is internal to the broker.")
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise TopicError(ErrorCode.INVALID_REQUEST,
                                 "Both numPartitions and replicationFactor must be -1 when "
                                 "replica assignments are given.")
            if sorted(assignments) != list(range(len(assignments))):
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 "Partitions must be numbered 0 to n-1 without gaps.")
            self._check_assignments(assignments)
        else:
            if num_partitions == -1:
                num_partitions = self.broker.config.num_partitions
            if num_partitions <= 0:
                raise TopicError(ErrorCode.INVALID_PARTITIONS,
                                 f"Number of partitions must be larger than 0, got {num_partitions}.")
            if replication_factor == -1:
                replication_factor = self.default_replication_factor
            if replication_factor <= 0:
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Replication factor must be larger than 0, got {replication_factor}.")
            self._check_replication_factor(replication_factor)
        overrides = self.checked_topic_overrides(configs)
        await self._create(topic, num_partitions, replication_factor, assignments, overrides,
                           validate_only=validate_only, timeout_ms=timeout_ms)
        if assignments:
            return len(assignments), len(assignments[0])
        return num_partitions, replication_factor

    @abstractmethod
    def _check_assignments(self, assignments: dict[int, list[int]]) -> None:
        """TopicError(INVALID_REPLICA_ASSIGNMENT) unless every partition's replicas are
        brokers a partition can be placed on."""

    @abstractmethod
    def _check_replication_factor(self, replication_factor: int) -> None:
        """TopicError(INVALID_REPLICATION_FACTOR) for more replicas than brokers, where that
        is known before creating."""

    @abstractmethod
    async def _create(self, topic: str, num_partitions: int, replication_factor: int,
                      assignments: dict[int, list[int]], overrides: dict[str, str], *,
                      validate_only: bool, timeout_ms: int) -> None:
        """Create the checked topic (``assignments``, if any, replace the count and factor)."""

    async def create_partitions(self, topic: str, count: int, assignments: list[list[int]] | None, *,
                                validate_only: bool = False, timeout_ms: int = 60000) -> None:
        """Grow ``topic`` to ``count`` partitions as CreatePartitions asks (Kafka 2.8's
        AdminZkClient.addPartitions rules); ``assignments`` places each new partition's
        replicas (else they are placed as Kafka would). ``validate_only`` checks everything and
        adds nothing. Raises TopicError: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS (no
        more than now), INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST (an internal topic), or
        what adding them here refuses (:meth:`_add_partitions`)."""
        current = await self._replica_assignment(topic)
        if current is None:
            self.check_topic_name(topic)
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
        if self.broker.is_internal(topic):
            # Unlike Kafka, which lets it happen: the group coordinator maps groups to the
            # partitions of __consumer_offsets by their count, which must never change.
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Topic '{topic}' is internal to the broker.")
        old = len(current)
        if count < old:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic currently has {old} partitions, which is higher than the requested {count}.")
        if count == old:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {old} partitions.")
        if assignments is None:
            added = self._place_new_partitions(current, count - old)
        else:
            if len(assignments) != count - old:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Increasing the number of partitions by {count - old} but "
                                 f"{len(assignments)} assignments provided.")
            added = {old + i: list(replicas) for i, replicas in enumerate(assignments)}
            self._check_assignments(added)
            factor = len(current[0])
            odd = {p: len(r) for p, r in added.items() if len(r) != factor}
            if odd:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Inconsistent replication factor between partitions, partition 0 has "
                                 f"{factor} while partitions {list(odd)} have replication factors "
                                 f"{list(odd.values())}, respectively.")
        await self._add_partitions(topic, current, added, validate_only=validate_only, timeout_ms=timeout_ms)

    @abstractmethod
    async def _replica_assignment(self, topic: str) -> dict[int, list[int]] | None:
        """Each partition's replicas (preferred leader first); None if there is no such topic."""

    @abstractmethod
    def _place_new_partitions(self, current: dict[int, list[int]], added: int) -> dict[int, list[int]]:
        """Replicas for ``added`` partitions after ``current``'s, placed as Kafka would."""

    @abstractmethod
    async def _add_partitions(self, topic: str, current: dict[int, list[int]], added: dict[int, list[int]], *,
                              validate_only: bool, timeout_ms: int) -> None:
        """Add the checked partitions ``added`` to ``topic``."""

    @abstractmethod
    async def topic_overrides(self, topic: str) -> dict[str, str]:
        """The topic's config overrides; TopicError(UNKNOWN_TOPIC_OR_PARTITION) if there is no
        such topic."""

    @abstractmethod
    async def alter_topic_configs(self, topic: str, overrides: dict[str, str]) -> None:
        """Replace the topic's overrides with ``overrides`` (checked by the caller): every
        replica of the topic runs with them from now on, and keeps them across restarts.
        TopicError(UNKNOWN_TOPIC_OR_PARTITION) if there is no such topic."""

    @abstractmethod
    async def delete_topic(self, topic: str, timeout_ms: int = 60000) -> None:
        """Delete a topic and its data, and its groups' committed offsets (as Kafka 0.10.2's
        coordinator ``handleDeletedPartitions``). Raises TopicError
        (UNKNOWN_TOPIC_OR_PARTITION / INVALID_TOPIC_EXCEPTION, ...)."""

    @abstractmethod
    async def elect_leaders(self, partitions: list[tuple[str, int]] | None, unclean: bool,
                            timeout_ms: int) -> dict[tuple[str, int], ErrorCode]:
        """ElectLeaders: the preferred replica (``unclean``: any live replica of a partition
        without a leader) made leader of each partition (None: of all), with each one's
        result: NONE, ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION,
        PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE. For all partitions,
        only those an election was needed for are answered, as Kafka does. TopicError for the
        whole request (NOT_CONTROLLER, REQUEST_TIMED_OUT)."""

    @abstractmethod
    async def alter_reassignments(self, asked: dict[tuple[str, int], list[int] | None],
                                  timeout_ms: int) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments: each partition moved to the replicas given (None: its
        move in progress cancelled), with each one's (error, message): NONE once the move is
        under way, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
        NO_REASSIGNMENT_IN_PROGRESS. TopicError for the whole request (NOT_CONTROLLER,
        REQUEST_TIMED_OUT)."""

    @abstractmethod
    async def list_reassignments(self, keys: list[tuple[str, int]] | None
                                 ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """ListPartitionReassignments: (replicas, adding, removing) of each move in progress
        (among ``keys``; None: all). TopicError for the whole request (NOT_CONTROLLER)."""

    # ------------------------------------------------------------------ metadata

    @abstractmethod
    async def cluster_view(self) -> None:
        """Until this broker knows the cluster it answers Metadata from."""

    @abstractmethod
    def brokers(self, listener_name: str) -> tuple[list[dict], int]:
        """Metadata's live brokers (their addresses on ``listener_name``) and controller id."""

    @abstractmethod
    def partition_metadata(self, topic: str, count: int) -> Sequence[dict]:
        """Metadata's partitions of ``topic`` (``count`` of them): leader, replicas, ISR.
        The answer is only read."""

    # ------------------------------------------------------------------ controller requests

    @abstractmethod
    async def become_leader_or_follower(self, body) -> tuple[ErrorCode, list[tuple[str, int, ErrorCode]]]:
        """LeaderAndIsr: the error and each partition's."""

    @abstractmethod
    async def stop_replicas(self, body) -> tuple[ErrorCode, list[tuple[str, int, ErrorCode]]]:
        """StopReplica: the error and each partition's."""

    @abstractmethod
    async def update_metadata(self, body, version: int) -> ErrorCode:
        """UpdateMetadata: take the controller's view of the cluster."""

    @abstractmethod
    async def controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        """ControlledShutdown of ``broker_id``: the partitions it still leads, or TopicError."""

    @abstractmethod
    async def prepare_shutdown(self) -> None:
        """Before a clean stop of this broker."""

    # ------------------------------------------------------------------ consumer groups

    @abstractmethod
    async def find_group_coordinator(self, group_id: str,
                                     listener_name: str = "") -> tuple[ErrorCode, tuple[int, str, int] | None]:
        """FindCoordinator: ``(NONE, (node id, host, port))`` of the broker coordinating
        ``group_id`` on the listener the request came in on, or the error to answer."""
