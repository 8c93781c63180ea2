"""The transaction coordinator: Kafka 2.8's ``TransactionCoordinator``,
``TransactionStateManager`` and (for one broker) ``TransactionMarkerChannelManager``.

A transactional id belongs to the ``__transaction_state`` partition
``abs(hashCode) % transaction.state.log.num.partitions`` (the function groups use). Its state
(:mod:`broker.transactions.state`) changes in two steps: the new state is appended to that
partition, and only once it is there does it become the state the coordinator answers from.

* InitProducerId with a transactional id: a new id gets a producer id and epoch 0; a known one
  in Empty/Complete* gets its epoch bumped (which fences its older producers: their requests
  and batches carry the old epoch), a new producer id when the epoch is used up. With a
  transaction Ongoing, the epoch is bumped to fence the old producer, the transaction aborted
  and CONCURRENT_TRANSACTIONS answered; the producer retries. KIP-360 (v3+): a producer names
  the id and epoch it had, and gets its epoch bumped unless another producer took over.
* AddPartitionsToTxn / AddOffsetsToTxn move the id to Ongoing with the partitions added (the
  group's ``__consumer_offsets`` partition for AddOffsets).
* EndTxn writes PrepareCommit/PrepareAbort, answers, then writes the markers to every
  partition of the transaction and, once all are written, CompleteCommit/CompleteAbort.
* A request's state change runs in the coordinator's own task, not the request's: a client
  gone while its transition awaits the replicas (its connection's tasks cancelled) must not
  leave the transition half done, pending for good (Kafka's append callback runs whatever
  became of the request).
* Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, transactions open
  longer than their timeout are aborted with the epoch bumped (the producer is fenced, as in
  Kafka); every ``transaction.remove.expired.transaction.cleanup.interval.ms``, ids idle for
  ``transactional.id.expiration.ms`` outside a transaction are removed (a tombstone).

Persistence is the group coordinator's (``broker.groups.store.OffsetsPartition``): the newest
snapshot of a partition's ids, then the events after it. Start-up resumes every transaction
left in PrepareCommit/PrepareAbort by writing its markers again, as Kafka does on becoming
coordinator; one left Ongoing is aborted by the timeout like any other.

Where this differs from Kafka 2.8, and why:

* A single broker coordinates every id. It creates or loads ``__transaction_state`` at the
  first transactional request (Kafka creates the topic at the first FindCoordinator) and the
  request waits for that, so COORDINATOR_LOAD_IN_PROGRESS never arises there.
* The coordinator writes markers to its own partitions directly (the partition-level write the
  WriteTxnMarkers handler uses) rather than sending itself WriteTxnMarkers requests.
* In a cluster (``zookeeper.connect``) a broker coordinates the ids of the
  ``__transaction_state`` partitions it leads, as the group coordinator does its groups: it
  loads a partition in the background when it becomes its leader (COORDINATOR_LOAD_IN_PROGRESS
  meanwhile), resumes the markers of its prepared transactions with the partition's leader
  epoch as coordinator epoch, and drops it when it stops leading (NOT_COORDINATOR). State
  changes are appended acks=all. Markers go to each partition's leader: written here when it
  is this broker, else in a WriteTxnMarkers request (:class:`broker.transactions.markers.MarkerSender`).
  Snapshots are folded from the committed log (the newest snapshot plus the events up to the
  high watermark) by every replica, leader or follower, as the group store's followers do:
  a leader's in-memory state lags the log while an append awaits its replicas, so a snapshot
  of it at the log end could leave out an event it covers.
"""

from __future__ import annotations

import functools
import logging
import math

import trio

from minikafka.broker.groups.ownership import load_until_done
from minikafka.broker.groups.records import partition_for
from minikafka.broker.groups.store import (GROUP_METADATA_TOPIC, SNAPSHOT_DIR_NAME, STORE_ERRORS, OffsetsPartition,
                                           encode_snapshot, remove_unreplicated_snapshots)
from minikafka.broker.outliving import outlive_request
from minikafka.broker.transactions.markers import MarkerSender
from minikafka.broker.transactions.state import (MAX_EPOCH, NO_PRODUCER_EPOCH, TransactionMetadata, Transit,
                                                 TxnRecordError, TxnState, decode_txn_key, decode_txn_value,
                                                 epoch_exhausted, txn_key, txn_value)
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.storage.snapshot import SnapshotStore

logger = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
# Kafka's TransactionStateManager: a failed append of the state is a coordinator the client
# looks up again or retries.
TXN_STORE_ERRORS = {
    **STORE_ERRORS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
# Marker errors after which the partition is asked again (a leader moving, an ISR too small).
MARKER_RETRY_S = 0.1
MARKER_RETRY_MAX_S = 2.0
# Snapshot a partition after this many bytes of state changes since its last snapshot (or
# transaction.state.log.snapshot.interval.events of them).
SNAPSHOT_INTERVAL_BYTES = 10 * 1024 * 1024
# A cluster: how often each replica checks whether its partitions are due for a snapshot.
REPLAY_SNAPSHOT_CHECK_S = 1.0


def _outlives_its_request(stopped):
    """Run the decorated request method in the coordinator's nursery (``outlive_request``): a
    client that leaves then cannot interrupt a state transition between its append and its
    completion, which would leave it pending, the id answered CONCURRENT_TRANSACTIONS until the
    partition moves. ``stopped`` answers a request whose operation the coordinator's shutdown
    cut short (a retriable error)."""
    def decorate(method):
        @functools.wraps(method)
        async def run(self, *args, **kwargs):
            return await outlive_request(self._nursery, lambda: method(self, *args, **kwargs), stopped)
        return run
    return decorate


class TransactionCoordinator:
    """Coordinates the transactional ids of this broker.

    Lifecycle as the group coordinator's: :meth:`startup` (in a worker thread: creates or loads
    ``__transaction_state``), :meth:`run` in the broker's nursery (marker writes, timeouts),
    :meth:`shutdown` before the log manager shuts down (a snapshot of every partition)."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.clock = broker.clock
        config = broker.config
        self.clustered = broker.cluster is not None
        self.num_partitions = config.get("transaction.state.log.num.partitions")
        self.segment_bytes = config.get("transaction.state.log.segment.bytes")
        self.snapshot_interval_events = config.get("transaction.state.log.snapshot.interval.events")
        self.max_timeout_ms = config.get("transaction.max.timeout.ms")
        self.abort_interval_ms = config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms")
        self.expiration_ms = config.get("transactional.id.expiration.ms")
        self.expiration_interval_ms = config.get("transaction.remove.expired.transaction.cleanup.interval.ms")
        # Partitions of __transaction_state once known for certain (a single broker's at
        # start-up; a cluster's from ZooKeeper before its first partition is loaded): an id
        # placed by a guessed count would land in the wrong partition. Fixed afterwards.
        self.topic_partitions: int | None = None
        # The partitions coordinated here (every one on a single broker, those led and loaded
        # in a cluster); per partition its leader epoch when loaded (the coordinator epoch of
        # its markers) and its transactional ids.
        self.partitions: dict[int, OffsetsPartition] = {}
        self.coordinator_epochs: dict[int, int] = {}
        self.txns_by_partition: dict[int, dict[str, TransactionMetadata]] = {}
        # A cluster: partitions being loaded after this broker became their leader -> the
        # load's token (a load whose token is no longer here was overtaken by a leadership
        # change); and a lock per partition that keeps a load and a snapshot by replay from
        # reading snapshot files and segments the other one removes.
        self._loading: dict[int, object] = {}
        self._disk_locks: dict[int, trio.Lock] = {}
        self._loads_in, self._loads_out = trio.open_memory_channel(math.inf)
        self.markers = MarkerSender(broker)
        self.active = False
        self._nursery: trio.Nursery | None = None
        # Transactions whose markers are to be written once run() starts: those start-up
        # found in PrepareCommit/PrepareAbort.
        self._resume: list[str] = []
        # Partitions whose snapshot is being written in a worker thread.
        self._snapshotting: set[int] = set()
        # A cluster: the high watermark of each local partition's newest snapshot.
        self._snapshot_at: dict[int, int] = {}

    # ================================================================ lifecycle

    def topic_configs(self) -> dict[str, str]:
        return state_topic_configs(self.broker.config)

    def startup(self) -> None:
        """Single broker: create ``__transaction_state`` if missing, then load each partition:
        the newest snapshot, then the events after it. In a cluster nothing is loaded here:
        partitions are loaded as this broker becomes their leader (:meth:`became_leader`)."""
        if self.clustered:
            self.active = True
            return
        log_manager = self.broker.log_manager
        count = log_manager.topics().get(TRANSACTION_STATE_TOPIC)
        if count is None:
            count = self.num_partitions
            log_manager.create_topic(TRANSACTION_STATE_TOPIC, count, self.topic_configs())
            logger.info("created %s with %d partition(s)", TRANSACTION_STATE_TOPIC, count)
        self.topic_partitions = count
        for index in range(count):
            log = log_manager.get_log(TRANSACTION_STATE_TOPIC, index)
            partition = self._partition(index, log)
            self._install(partition, self._load(partition),
                          self.broker.partitions.leader_epoch(TRANSACTION_STATE_TOPIC, index))
        self.active = True

    def _partition(self, index: int, log, writer=None, trim_bound=None) -> OffsetsPartition:
        return OffsetsPartition(index, log, log.dir / SNAPSHOT_DIR_NAME, self.clock, writer, trim_bound=trim_bound,
                                topic=TRANSACTION_STATE_TOPIC, record_error=TxnRecordError,
                                holds="transactional ids")

    def _install(self, partition: OffsetsPartition, txns: dict[str, TransactionMetadata],
                 coordinator_epoch: int) -> None:
        """Start coordinating a loaded partition; its prepared transactions' markers are
        written (again) once :meth:`run` runs, as Kafka does on becoming coordinator."""
        index = partition.partition
        self.partitions[index] = partition
        self.txns_by_partition[index] = txns
        self.coordinator_epochs[index] = coordinator_epoch
        self._resume.extend(txn.transactional_id for txn in txns.values()
                            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT))

    def _load(self, partition: OffsetsPartition, end: int | None = None) -> dict[str, TransactionMetadata]:
        """The ids of ``partition``: its newest usable snapshot, then the events after it up to
        ``end`` (default: the log end)."""
        txns: dict[str, TransactionMetadata] = {}

        def apply(key: bytes, value: bytes | None) -> None:
            transactional_id = decode_txn_key(key)
            if value is None:
                txns.pop(transactional_id, None)
            else:
                txns[transactional_id] = decode_txn_value(transactional_id, value)

        snapshot_offset = partition.load_snapshot(apply, txns.clear)
        if snapshot_offset is not None:
            partition.snapshot_offsets = [snapshot_offset]
        start = partition.replay_start(snapshot_offset)
        replayed = 0
        for event in partition.read_events(start, end):
            try:
                apply(event.key, event.value)
            except TxnRecordError as exc:
                logger.error("%s-%d: skipping undecodable event at offset %d: %s", TRANSACTION_STATE_TOPIC,
                             partition.partition, event.offset, exc)
                continue
            replayed += 1
        partition.events_since_snapshot = replayed
        logger.info("loaded %s-%d: snapshot %s, replayed %d event(s) from offset %d, %d transactional id(s)",
                    TRANSACTION_STATE_TOPIC, partition.partition,
                    "none" if snapshot_offset is None else f"at offset {snapshot_offset}", replayed, start,
                    len(txns))
        return txns

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._resume_markers()
                if self.clustered:
                    nursery.start_soon(self._run_loads)
                    nursery.start_soon(self._replay_snapshots)
                task_status.started()
                next_expiry = self.clock.time_ms() + self.expiration_interval_ms
                while True:
                    await trio.sleep(self.abort_interval_ms / 1000)
                    now = self.clock.time_ms()
                    try:
                        self.abort_timed_out(now)
                        if now >= next_expiry:
                            next_expiry = now + self.expiration_interval_ms
                            await self.expire_ids(now)
                    except Exception:
                        logger.exception("transaction timeouts failed; retrying next interval")
        finally:
            with trio.CancelScope(shield=True):
                await self.markers.aclose()

    def _resume_markers(self) -> None:
        for transactional_id in self._resume:
            index = self.partition_for(transactional_id)
            txn = self.txns_by_partition.get(index, {}).get(transactional_id)
            if txn is not None and txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._start_markers(txn, txn.transit())
        self._resume = []

    def shutdown(self) -> None:
        """Stop answering and snapshot every partition with events after its last snapshot
        (a single broker; a cluster's replicas snapshot what is committed as they go)."""
        if not self.active:
            return
        self.active = False
        if self.clustered:
            return
        for index, partition in self.partitions.items():
            try:
                self._snapshot(partition, self.txns_by_partition[index])
            except Exception:
                logger.exception("%s-%d: snapshot at shutdown failed; start-up will replay the log",
                                 TRANSACTION_STATE_TOPIC, index)

    @staticmethod
    def _capture(partition: OffsetsPartition, txns: dict[str, TransactionMetadata]):
        """The next snapshot's offset and entries, or None if no event came since the last.
        On the event loop, between appends: the entries are then exactly the events below it
        (a transition still pending is not in the log, nor in its ``transit()``)."""
        offset = partition.begin_snapshot()
        if offset is None:
            return None
        return offset, [(txn_key(txn.transactional_id), txn_value(txn.transit())) for txn in txns.values()]

    def _snapshot(self, partition: OffsetsPartition, txns: dict[str, TransactionMetadata]) -> None:
        captured = self._capture(partition, txns)
        if captured is None:
            return
        self._write_snapshot(partition, *captured)
        partition.snapshot_written(captured[0])
        logger.info("%s-%d: wrote snapshot at offset %d", TRANSACTION_STATE_TOPIC, partition.partition, captured[0])

    @staticmethod
    def _write_snapshot(partition: OffsetsPartition, offset: int, entries) -> None:
        try:
            partition.write_snapshot(offset, encode_snapshot(partition.partition, offset, entries))
        except BaseException:
            partition.abandon_snapshot()
            raise

    async def _snapshot_in_background(self, index: int, partition: OffsetsPartition) -> None:
        captured = self._capture(partition, self.txns_by_partition[index])
        if captured is None:
            return
        try:
            await trio.to_thread.run_sync(self._write_snapshot, partition, *captured)
        except Exception:
            logger.exception("%s-%d: writing the snapshot at %d failed", TRANSACTION_STATE_TOPIC, index,
                             captured[0])
            return
        finally:
            self._snapshotting.discard(index)
        partition.snapshot_written(captured[0])
        logger.info("%s-%d: wrote snapshot at offset %d", TRANSACTION_STATE_TOPIC, index, captured[0])

    # ================================================================ cluster leadership

    def became_leader(self, index: int, log, writer) -> None:
        """This broker now leads ``__transaction_state-index``: load it in the background
        (COORDINATOR_LOAD_IN_PROGRESS for its ids until then). ``writer`` appends through the
        leader replica, says when an append is committed, and carries the leader epoch."""
        self._unload(index, log)
        token = object()
        self._loading[index] = token
        self._loads_in.send_nowait((index, log, writer, token))

    def resigned(self, index: int, log) -> None:
        """This broker follows (or no longer holds) ``__transaction_state-index``: its ids are
        dropped and answered NOT_COORDINATOR; their markers in flight stop (the new leader
        writes them again), as Kafka's removeTransactionsForTxnTopicPartition."""
        self._unload(index, log)

    def served_partitions(self) -> list[int]:
        """The partitions this broker coordinates or is loading."""
        return sorted({*self.partitions, *self._loading})

    def _unload(self, index: int, log) -> None:
        self._loading.pop(index, None)
        self.partitions.pop(index, None)
        self.coordinator_epochs.pop(index, None)
        txns = self.txns_by_partition.pop(index, {})
        if txns:
            logger.info("%s-%d: no longer its leader: dropped %d transactional id(s)", TRANSACTION_STATE_TOPIC,
                        index, len(txns))
        if log is not None:
            try:
                remove_unreplicated_snapshots(TRANSACTION_STATE_TOPIC, index, log)
            except OSError as exc:
                # Loading the partition removes them first, and retries until it can.
                logger.error("%s-%d: snapshots above the high watermark not removed: %s", TRANSACTION_STATE_TOPIC,
                             index, exc)

    def _disk_lock(self, index: int) -> trio.Lock:
        return self._disk_locks.setdefault(index, trio.Lock())

    async def _run_loads(self) -> None:
        async with trio.open_nursery() as nursery:
            async for index, log, writer, token in self._loads_out:
                nursery.start_soon(self._load_led, index, log, writer, token)

    async def _load_led(self, index: int, log, writer, token) -> None:
        """Load a partition this broker became leader of, off the event loop, and coordinate
        it unless leadership moved meanwhile (Kafka's loadTransactionsForTxnTopicPartition)."""
        partition = self._partition(index, log, writer, writer.trim_bound)

        async def load():
            async with self._disk_lock(index):
                if self._loading.get(index) is not token:
                    return None
                return await trio.to_thread.run_sync(self._load_from_committed, partition)

        txns = await load_until_done(self, TRANSACTION_STATE_TOPIC, index, writer, load,
                                     lambda: self._loading.get(index) is token)
        if txns is None or self._loading.get(index) is not token:
            return
        del self._loading[index]
        self._install(partition, txns, writer.leader_epoch)
        self._resume_markers()

    def _load_from_committed(self, partition: OffsetsPartition) -> dict[str, TransactionMetadata]:
        remove_unreplicated_snapshots(TRANSACTION_STATE_TOPIC, partition.partition, partition.log)
        return self._load(partition)

    async def _replay_snapshots(self) -> None:
        """Snapshot every local ``__transaction_state`` partition, led or followed, each time
        ``transaction.state.log.snapshot.interval.events`` offsets were committed since its
        newest snapshot: the
        newest snapshot plus the events up to the high watermark (which no truncation goes
        below) folded in a worker thread. Whichever replica leads next replays little."""
        while True:
            await trio.sleep(REPLAY_SNAPSHOT_CHECK_S)
            for log in self.broker.log_manager.logs():
                if log.topic != TRANSACTION_STATE_TOPIC:
                    continue
                index = log.partition
                newest = self._snapshot_at.get(index)
                if newest is None:
                    newest = self._snapshot_at[index] = max(
                        SnapshotStore(log.dir / SNAPSHOT_DIR_NAME).offsets(), default=0)
                if log.high_watermark - newest < self.snapshot_interval_events:
                    continue
                trim_bound = self.broker.partitions.offsets_trim_bound(index, log, TRANSACTION_STATE_TOPIC)
                try:
                    async with self._disk_lock(index):
                        if index in self._loading:
                            continue
                        self._snapshot_at[index] = await trio.to_thread.run_sync(
                            self._snapshot_by_replay, index, log, trim_bound)
                except Exception:
                    logger.exception("%s-%d: snapshot by replay failed", TRANSACTION_STATE_TOPIC, index)

    def _snapshot_by_replay(self, index: int, log, trim_bound: int) -> int:
        partition = self._partition(index, log, trim_bound=lambda: trim_bound)
        end = log.high_watermark
        txns = self._load(partition, end)
        partition.write_snapshot(end, encode_snapshot(index, end, [
            (txn_key(txn.transactional_id), txn_value(txn.transit())) for txn in txns.values()]))
        partition.snapshot_written(end)
        logger.info("%s-%d: wrote snapshot at offset %d (by replay)", TRANSACTION_STATE_TOPIC, index, end)
        return end

    # ================================================================ lookup

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.topic_partitions or self.num_partitions)

    def find_coordinator(self, transactional_id: str) -> ErrorCode:
        return ErrorCode.NONE if self.active else ErrorCode.COORDINATOR_NOT_AVAILABLE

    def _txn(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's state, if its partition is coordinated here (:meth:`_check` says so)."""
        return self.txns_by_partition.get(self.partition_for(transactional_id), {}).get(transactional_id)

    def transactions(self) -> list[TransactionMetadata]:
        return [txn for txns in self.txns_by_partition.values() for txn in txns.values()]

    def describe(self, transactional_id: str) -> tuple[ErrorCode, dict | None]:
        """DescribeTransactions' fields for one id (Kafka 3.0's handleDescribeTransactions)."""
        error = self._check(transactional_id)
        if error:
            return error, None
        txn = self._txn(transactional_id)
        if txn is None or txn.state == TxnState.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return ErrorCode.NONE, {
            "transaction_state": txn.state.display, "transaction_timeout_ms": txn.timeout_ms,
            "transaction_start_time_ms": txn.start_ms if txn.partitions else -1,
            "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
            "topics": [{"topic": topic, "partitions": partitions} for topic, partitions in by_topic.items()]}

    def list_transactions(self, states: set[str], producer_ids: set[int]
                          ) -> tuple[ErrorCode, list[str], list[tuple[str, int, str]]]:
        """(error, state filters that name no state, (id, producer id, state) of each id that
        passes the filters; an empty filter passes every one)."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
        if self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        known = {state.display for state in TxnState}
        return ErrorCode.NONE, sorted(states - known), [
            (txn.transactional_id, txn.producer_id, txn.state.display) for txn in self.transactions()
            if (not states or txn.state.display in states) and (not producer_ids or txn.producer_id in producer_ids)]

    def _check(self, transactional_id: str | None) -> ErrorCode:
        """The coordinator-level error for a request about ``transactional_id`` (NONE: its
        partition is coordinated here, and :meth:`_txn` answers for it)."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        index = self.partition_for(transactional_id)
        if index in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if index not in self.partitions:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    # ================================================================ persistence

    async def _write(self, txn: TransactionMetadata, transit: Transit) -> ErrorCode:
        """Append ``transit`` and, once it is committed, make it ``txn``'s state; on failure
        the pending transition is dropped (Kafka's appendTransactionToLog)."""
        index = self.partition_for(txn.transactional_id)
        partition = self.partitions.get(index)
        if partition is None or self.txns_by_partition[index].get(txn.transactional_id) is not txn:
            txn.pending = None
            return ErrorCode.NOT_COORDINATOR
        try:
            last_offset = partition.append([(txn_key(txn.transactional_id), txn_value(transit))])
            error = await partition.writer.committed(last_offset)
        except RecordError as exc:
            logger.warning("%s-%d: append refused: %s", TRANSACTION_STATE_TOPIC, index, exc)
            error = exc.code
        except OSError:
            logger.exception("%s-%d: append failed", TRANSACTION_STATE_TOPIC, index)
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if error:
            txn.pending = None
            return TXN_STORE_ERRORS.get(error, error)
        if self.partitions.get(index) is not partition:
            return ErrorCode.NOT_COORDINATOR
        txn.complete(transit)
        if not self.clustered and index not in self._snapshotting and partition.due_for_snapshot(
                self.snapshot_interval_events, SNAPSHOT_INTERVAL_BYTES):
            self._snapshotting.add(index)
            self._nursery.start_soon(self._snapshot_in_background, index, partition)
        return ErrorCode.NONE

    # ================================================================ requests

    @_outlives_its_request((ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1))
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int = -1,
                               expected_epoch: int = NO_PRODUCER_EPOCH) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional id. ``expected_*``
        (v3+, KIP-360): the id and epoch the producer had, -1 for none."""
        error = self._check(transactional_id)
        if error:
            return error, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        txn = self._txn(transactional_id)
        if txn is None:
            producer_id = await self.broker.producer_ids.next_id()
            # Another request may have created it meanwhile, or the partition moved away.
            error = self._check(transactional_id)
            if error:
                return error, -1, -1
            txn = self._txn(transactional_id)
            if txn is None:
                txn = TransactionMetadata(transactional_id, producer_id, timeout_ms=timeout_ms,
                                          update_ms=self.clock.time_ms())
                self.txns_by_partition[self.partition_for(transactional_id)][transactional_id] = txn
        expected = expected_producer_id >= 0
        if txn.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if expected and not (txn.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_id == txn.producer_id
                             or (expected_producer_id == txn.last_producer_id
                                 and epoch_exhausted(expected_epoch))):
            return ErrorCode.PRODUCER_FENCED, -1, -1
        now = self.clock.time_ms()
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if txn.state == TxnState.ONGOING:
            # Fence the producer of the open transaction and abort it; the epoch bumped here is
            # never handed out: the retry bumps it again.
            transit = txn.prepare_fence()
            error = await self._end(txn, transit.producer_id, transit.producer_epoch, commit=False,
                                    from_client=False)
            return error or ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if epoch_exhausted(txn.producer_epoch) and (not expected or expected_epoch == txn.producer_epoch):
            producer_id = await self.broker.producer_ids.next_id()
            error = self._check(transactional_id)
            if error:
                return error, -1, -1
            if txn.pending is not None:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            transit = txn.prepare(TxnState.EMPTY, producer_id=producer_id, epoch=0,
                                  last_epoch=txn.producer_epoch if expected else NO_PRODUCER_EPOCH,
                                  timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, now=now)
        else:
            bumped = txn.producer_epoch + 1
            if not expected:
                epochs = (bumped, NO_PRODUCER_EPOCH)
            elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
                epochs = (bumped, txn.producer_epoch)
            elif expected_epoch == txn.last_producer_epoch:
                # A retry of a bump whose answer was lost: answer the same epoch again.
                epochs = (txn.producer_epoch, txn.last_producer_epoch)
            else:
                return ErrorCode.PRODUCER_FENCED, -1, -1
            transit = txn.prepare(TxnState.EMPTY, epoch=epochs[0], last_epoch=epochs[1], timeout_ms=timeout_ms,
                                  partitions=frozenset(), start_ms=-1, now=now)
        error = await self._write(txn, transit)
        if error:
            return error, -1, -1
        logger.info("initialized transactional id %r with producer id %d epoch %d", transactional_id,
                    txn.producer_id, txn.producer_epoch)
        return ErrorCode.NONE, txn.producer_id, txn.producer_epoch

    def _check_producer(self, txn: TransactionMetadata | None, producer_id: int, epoch: int) -> ErrorCode:
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.pending is not None or txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.NONE

    @_outlives_its_request(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: set[tuple[str, int]]) -> ErrorCode:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition)."""
        error = self._check(transactional_id)
        if error:
            return error
        txn = self._txn(transactional_id)
        error = self._check_producer(txn, producer_id, epoch)
        if error:
            return error
        if txn.state == TxnState.ONGOING and partitions <= txn.partitions:
            return ErrorCode.NONE
        now = self.clock.time_ms()
        start_ms = now if txn.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) \
            else txn.start_ms
        transit = txn.prepare(TxnState.ONGOING, partitions=frozenset(txn.partitions | partitions),
                              start_ms=start_ms, now=now)
        return await self._write(txn, transit)

    @_outlives_its_request(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> ErrorCode:
        groups = await self.broker.groups()
        # Kafka's partitionFor: the topic's partition count, not the configured one.
        if self.clustered and not await self.broker.partitions.learn_partition_count(groups, GROUP_METADATA_TOPIC):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return await self.add_partitions(transactional_id, producer_id, epoch,
                                         {(GROUP_METADATA_TOPIC, groups.partition_for(group_id))})

    @_outlives_its_request(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        error = self._check(transactional_id)
        if error:
            return error
        return await self._end(self._txn(transactional_id), producer_id, epoch, commit=commit, from_client=True)

    async def _end(self, txn: TransactionMetadata | None, producer_id: int, epoch: int, *, commit: bool,
                   from_client: bool) -> ErrorCode:
        """Kafka's endTransaction: PrepareCommit/PrepareAbort written, then the markers sent in
        the background. Not from a client: an abort after an epoch fence, at the fenced epoch."""
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if (from_client and epoch != txn.producer_epoch) or epoch < txn.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.pending is not None and txn.pending != TxnState.PREPARE_EPOCH_FENCE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = txn.state
        if state == TxnState.ONGOING:
            fence = txn.pending == TxnState.PREPARE_EPOCH_FENCE
            if fence:
                if commit:
                    return ErrorCode.CONCURRENT_TRANSACTIONS
                txn.pending = None
                txn.producer_epoch = epoch
                txn.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = txn.prepare(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                                  now=self.clock.time_ms())
            error = await self._write(txn, transit)
            if error:
                if fence:
                    txn.failed_epoch_fence = True
                return error
            self._start_markers(txn, transit)
            return ErrorCode.NONE
        if state == TxnState.COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE
        if state == TxnState.COMPLETE_ABORT:
            return ErrorCode.NONE if not commit else ErrorCode.INVALID_TXN_STATE
        if state == TxnState.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        if state == TxnState.PREPARE_ABORT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if not commit else ErrorCode.INVALID_TXN_STATE
        return ErrorCode.INVALID_TXN_STATE   # Empty

    # ================================================================ markers

    def _start_markers(self, txn: TransactionMetadata, transit: Transit) -> None:
        index = self.partition_for(txn.transactional_id)
        self._nursery.start_soon(self._complete, txn, transit, index, self.coordinator_epochs[index])

    async def _complete(self, txn: TransactionMetadata, transit: Transit, index: int, coordinator_epoch: int) -> None:
        """Write the markers of a prepared transaction until every partition has its marker,
        then write CompleteCommit/CompleteAbort (Kafka's TransactionMarkerChannelManager)."""
        commit = transit.state == TxnState.PREPARE_COMMIT
        remaining = set(transit.partitions)
        retry_s = MARKER_RETRY_S
        while remaining:
            if self.txns_by_partition.get(index, {}).get(txn.transactional_id) is not txn:
                return   # no longer coordinated here: the new coordinator resumes it
            try:
                results = await self.markers.send(producer_id=transit.producer_id,
                                                  producer_epoch=transit.producer_epoch,
                                                  coordinator_epoch=coordinator_epoch, commit=commit,
                                                  partitions=sorted(remaining))
            except Exception:
                # The transaction stays prepared (and answered CONCURRENT_TRANSACTIONS) until
                # its markers are written: never give up on it, never take the broker down.
                logger.exception("writing the markers of %r failed; retrying", txn.transactional_id)
                results = {}
            topics = self.broker.partitions.topics()
            for (topic, partition), error in results.items():
                if error == ErrorCode.NONE or (error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                               and partition >= topics.get(topic, 0)):
                    remaining.discard((topic, partition))   # written, or the topic is gone
                elif error in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                    # A newer coordinator or producer epoch wrote there: this one stops (Kafka's
                    # abortSending); whoever fenced it completes the transaction.
                    logger.error("markers of %r stopped: %s-%d answered %s", txn.transactional_id, topic,
                                 partition, error.name)
                    return
                else:
                    logger.info("marker of %r to %s-%d: %s; retrying", txn.transactional_id, topic, partition,
                                error.name)
            if remaining:
                await trio.sleep(retry_s)
                retry_s = min(retry_s * 2, MARKER_RETRY_MAX_S)
        while True:
            if self.txns_by_partition.get(index, {}).get(txn.transactional_id) is not txn:
                return
            if txn.pending is None:
                complete = txn.prepare(TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                                       now=self.clock.time_ms())
                if not await self._write(txn, complete):
                    logger.debug("completed the transaction of %r (%s)", txn.transactional_id, complete.state.display)
                    return
            await trio.sleep(retry_s)
            retry_s = min(retry_s * 2, MARKER_RETRY_MAX_S)

    # ================================================================ timeouts

    def abort_timed_out(self, now: int) -> int:
        """Abort every Ongoing transaction past its timeout, fencing its producer."""
        aborted = 0
        for txn in self.transactions():
            if txn.state != TxnState.ONGOING or txn.pending is not None or txn.start_ms + txn.timeout_ms > now:
                continue
            if txn.producer_epoch >= MAX_EPOCH:
                continue   # no epoch left to fence with
            transit = txn.prepare_fence()
            logger.info("aborting the transaction of %r (producer id %d): open longer than %d ms",
                        txn.transactional_id, txn.producer_id, txn.timeout_ms)
            self._nursery.start_soon(self._abort_fenced, txn, transit)
            aborted += 1
        return aborted

    async def _abort_fenced(self, txn: TransactionMetadata, transit: Transit) -> None:
        error = await self._end(txn, transit.producer_id, transit.producer_epoch, commit=False, from_client=False)
        if error:
            if txn.pending == TxnState.PREPARE_EPOCH_FENCE:
                txn.pending = None
            logger.warning("timed-out transaction of %r not aborted: %s", txn.transactional_id, error.name)

    async def expire_ids(self, now: int) -> int:
        """Remove ids idle for ``transactional.id.expiration.ms`` outside a transaction (a
        tombstone in their partition; Kafka's removeExpiredTransactionalIds)."""
        expired = 0
        for txn in self.transactions():
            if txn.pending is not None or txn.update_ms + self.expiration_ms > now or txn.state not in (
                    TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                continue
            index = self.partition_for(txn.transactional_id)
            partition = self.partitions.get(index)
            if partition is None:
                continue   # no longer coordinated here
            txn.pending = TxnState.DEAD
            try:
                last_offset = partition.append([(txn_key(txn.transactional_id), None)])
                error = await partition.writer.committed(last_offset)
            except (RecordError, OSError) as exc:
                error = exc
            txn.pending = None
            if error:
                logger.warning("transactional id %r not expired: %s", txn.transactional_id, error)
                continue
            self.txns_by_partition.get(index, {}).pop(txn.transactional_id, None)
            expired += 1
        if expired:
            logger.info("removed %d expired transactional id(s)", expired)
        return expired


def state_topic_configs(config) -> dict[str, str]:
    """Topic configs of ``__transaction_state``, on one broker as in a cluster (Kafka's
    TransactionLog topic properties; a cluster adds the replica settings)."""
    return {"cleanup.policy": "compact", "segment.bytes": str(config.get("transaction.state.log.segment.bytes")),
            "compression.type": "uncompressed"}


def fenced_error(error: ErrorCode, version: int, first_fenced_version: int) -> ErrorCode:
    """PRODUCER_FENCED as a client of ``version`` understands it: INVALID_PRODUCER_EPOCH below
    the first version that knows PRODUCER_FENCED (Kafka 2.7, KIP-588)."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_fenced_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error

