"""One partition's log: its segments (``storage.segments``) in ``<log dir>/<topic>-<partition>/``.

Directory contents::

    00000000000000000000.log        segments, named by base offset (see storage.segment)
    00000000000000000000.index
    00000000000000000000.timeindex
    00000000000000000000.txnindex   the transactions aborted in it, once one is (see storage.txn_index)
    00000000000000052138.log ...
    leader-epoch-checkpoint         see storage.leader_epoch
    00000000000000052138.snapshot   producer state at that offset, see storage.producer_state
    partition.metadata              the topic id, see storage.partition_metadata
    topic-config.properties         topic overrides, written by the LogManager
    *.deleted                       segments on their way out (file.delete.delay.ms)
    *.cleaned, *.swap               the log cleaner's segments being written / swapped in
                                    (storage.cleaner; a load finishes or discards them)

Only the last segment (the *active* one) is appended to. A segment rolls by size, by
``segment.ms`` between message timestamps (KIP-33), on a full index, or when offsets would
not fit 4 relative bytes; rolling reports it to ``on_segment_closed``. The rolled segment is
fsynced later, off the append path, by :meth:`Log.flush_rolled_segments` (as Kafka's
scheduled flush): the broker appends on its event loop, where an fsync of a whole segment
would stall every connection. The recovery point moves only when that fsync is done.
Retention judges a segment by its largest message timestamp (a message without one counts
at its append time, see storage.segment), never by file times, so a restart or a copied
directory changes nothing. Every public method takes the log's lock: the broker may run
storage calls in worker threads.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Callable, Iterator

from minikafka.protocol.entries import MAGIC_POSITION
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import RECORD_BATCH_MAGIC, build_end_txn_marker
from minikafka.protocol.records import ValidatedSet, validate_and_assign, validate_given_offsets
from minikafka.storage.checkpoint import fsync_dir
from minikafka.storage.clock import Clock
from minikafka.storage.config import LogConfig
from minikafka.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache, LeaderEpochCheckpointFile
from minikafka.storage.partition_metadata import new_topic_id, read_topic_id, write_topic_id
from minikafka.protocol.records import iter_records
from minikafka.storage.producer_state import AppendOrigin, ProducerStateManager
from minikafka.storage.segment import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX,
                                       TIME_INDEX_SUFFIX, LogSegment, iter_headers, segment_file_stem)
from minikafka.storage.segments import LogSegments
from minikafka.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from minikafka.storage.types import (
    AppendResult,
    CorruptPartitionMetadata,
    FileSlice,
    OffsetOutOfRange,
    SegmentInfo,
    UnknownTopic,
)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734

logger = logging.getLogger(__name__)


def _segment_base(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)]
    if name.endswith(suffix) and len(stem) == 20 and stem.isascii() and stem.isdigit():
        return int(stem)
    return None


class Log:
    """A partition's segments, offsets, retention and recovery (see the module docstring).

    Opening a ``Log`` loads an existing directory (or starts an empty one): stray files of
    interrupted deletions are removed, indexes that are missing or fail their sanity check
    are rebuilt, and with ``needs_recovery`` (no clean-shutdown marker) every segment from
    the one holding ``recovery_point`` on is scanned and cut at its first invalid entry.

    ``topic_id`` is the id the directory's ``partition.metadata`` must hold: a directory
    without the file gets it (or, with no ``topic_id`` given, a new one); one holding another
    id raises CorruptPartitionMetadata. ``Log.topic_id`` is the id in effect.
    """

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        clock: Clock,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        needs_recovery: bool = False,
        topic_id: str | None = None,
        just_made: bool = False,
    ) -> None:
        """``just_made``: the caller has just made ``directory`` with nothing in it but the
        partition.metadata of ``topic_id`` and a leader-epoch checkpoint of epoch 0 from
        offset 0 (LogManager.create_topic's partitions), so the log is opened without
        reading back, cleaning or recovering any of it: ~0.2 ms of a new topic's creation,
        which an auto-creating Metadata waits for. Any other directory is loaded."""
        self.dir = Path(directory)
        self.topic = topic
        self.partition = partition
        self.config = config
        self.on_segment_closed: Callable[[SegmentInfo], None] | None = None
        self._clock = clock
        self._lock = threading.RLock()
        self._validation_config = config.validation_config()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._unflushed_rolled: list[LogSegment] = []  # rolled, not yet fsynced, oldest first
        self._truncations = 0  # tells a flush outside the lock that segments changed under it
        self._lowest_truncation: int | None = None  # since the cleaner last asked (take_truncation)
        self._closed = False
        # The copy of this replica being made in another log dir (AlterReplicaLogDirs), kept
        # a prefix of this log: see copy_to_future.
        self.future: "Log | None" = None
        if just_made:
            assert topic_id is not None, "a just-made directory holds the topic id given"
            self.topic_id = topic_id
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.topic_id = self._settle_topic_id(topic_id)
        self._segments: LogSegments
        recovered = self._load(recovery_point, log_start_offset, needs_recovery, empty=just_made)
        self.leader_epoch_cache = LeaderEpochCache(
            LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT), lambda: self.log_end_offset,
            entries=[(0, 0)] if just_made else None,
        )
        self.leader_epoch_cache.fit_to_loaded_log(self.log_start_offset, self.log_end_offset)
        self.producer_state = ProducerStateManager(f"{topic}-{partition}", self.dir, config.producer_id_expiration_ms,
                                                   snapshots=[] if just_made else None)
        if not just_made:
            self.producer_state.remove_stray_snapshots(segment.base_offset for segment in self._segments)
        self._load_producer_state(clean_shutdown=not needs_recovery, rebuilt=recovered)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        self._last_flush_ms = clock.time_ms()

    @classmethod
    def create(cls, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock,
               *, topic_id: str | None = None) -> "Log":
        """A new, empty partition of the topic ``topic_id`` (default: a new id): epoch 0 starts at offset 0."""
        log = cls(directory, topic, partition, config, clock, topic_id=topic_id)
        log.leader_epoch_cache.assign(0, 0)
        fsync_dir(log.dir.parent)
        return log

    def _settle_topic_id(self, expected: str | None) -> str:
        stored = read_topic_id(self.dir)
        if stored is None:
            stored = expected or new_topic_id()
            write_topic_id(self.dir, stored)
        elif expected is not None and stored != expected:
            raise CorruptPartitionMetadata(f"{self.dir}: topic id {stored} where {expected} was expected")
        return stored

    def _info(self, segment: LogSegment, *, closed: bool) -> SegmentInfo:
        return segment.info(self.topic, self.partition, closed=closed)._replace(topic_id=self.topic_id)

    # -- offsets -----------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._segments.active.next_offset

    @property
    def high_watermark(self) -> int:
        """The offset below which every in-sync replica holds the log (the partition layer
        sets it: the leader's ISR, a follower's leader)."""
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        with self._lock:
            self._high_watermark = offset
            # Transactions whose markers it passed are stable now (Kafka's updateHighWatermarkMetadata).
            self.producer_state.on_high_watermark_updated(offset)

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided and its marker committed (Kafka's
        ``Log.lastStableOffset``): the first unstable offset (never below the log start), or
        the high watermark when that is lower or no transaction is unstable."""
        with self._lock:
            first = self.producer_state.first_unstable_offset()
            if first is None or first >= self._high_watermark:
                return self._high_watermark
            return max(first, self.log_start_offset)

    @property
    def size_in_bytes(self) -> int:
        return self._segments.size_in_bytes

    # -- loading -----------------------------------------------------------------------------

    def _load(self, recovery_point: int, log_start_offset: int, needs_recovery: bool, *,
              empty: bool = False) -> frozenset[int]:
        """Load the segments (``empty``: the directory is known to hold none); returns the base
        offsets of those recovered (scanned, their indexes rebuilt), whose transaction indexes
        the producer state replay rebuilds."""
        bases = [] if empty else self._clean_directory()
        if not bases:
            segment = LogSegment.create_for_append(self.dir, log_start_offset, self.config)
            self._segments = LogSegments([segment])
            self.log_start_offset = self.recovery_point = log_start_offset
            return frozenset()
        segments = [LogSegment(self.dir, base, self.config, create=False) for base in bases]
        # With needs_recovery, segments from the one holding the recovery point are rebuilt
        # by the scan anyway; the others only get the cheap index check.
        now = self._clock.time_ms()
        first_unflushed = max(bisect.bisect_right(bases, recovery_point) - 1, 0) if needs_recovery else len(bases)
        recovered: dict[int, int] = {}  # segment position -> bytes its recovery truncated

        def finish_if_closed(i: int) -> None:
            # Now, not after every segment is recovered: a rebuilt index holds disk space
            # reserved ahead of its entries (storage.index), which on a disk just freed from
            # full need not be there for every segment at once.
            if i < len(segments) - 1:
                segments[i].finish()
                segments[i].release_index_maps()

        for i, segment in enumerate(segments[:first_unflushed]):
            if not segment.indexes_look_sane():
                logger.warning("%s-%d: rebuilding indexes of segment %d", self.topic, self.partition,
                               segment.base_offset)
                recovered[i] = segment.recover(now)
                if recovered[i]:
                    # Below the recovery point this is damage, not a torn write. Later segments
                    # are kept, as Kafka keeps them, so the log has a gap: say where.
                    following = f", the next segment starts at {bases[i + 1]}" if i + 1 < len(bases) else ""
                    logger.warning("%s-%d: segment %d is damaged: %d bytes from offset %d on truncated%s",
                                   self.topic, self.partition, segment.base_offset, recovered[i],
                                   segment.next_offset, following)
                finish_if_closed(i)
        if needs_recovery:
            for i in range(first_unflushed, len(segments)):
                recovered[i] = segments[i].recover(now)
                if recovered[i]:
                    logger.warning("%s-%d: recovery truncated %d invalid bytes from segment %d",
                                   self.topic, self.partition, recovered[i], segments[i].base_offset)
                    for doomed in segments[i + 1:]:
                        doomed.close()
                        doomed.delete_files()
                    del segments[i + 1:]
                    break
                finish_if_closed(i)
        for i, segment in enumerate(segments[:-1]):
            if i not in recovered:
                segment.next_offset = segments[i + 1].base_offset
                segment.release_index_maps()
        # What recovery scanned may be neither fsynced nor as recovery left it on disk (it may
        # have truncated it): like rolled segments, the recovery point passes these closed
        # ones only after the flush duty has fsynced them (Kafka's flush fsyncs every segment
        # from the recovery point on).
        self._unflushed_rolled = segments[first_unflushed:-1]
        active = segments[-1]
        if len(segments) - 1 not in recovered and not active.load_tail_state():
            # Bytes after the last whole entry: appends must not go after them (consumers
            # would meet a bad CRC there, and the next recovery would cut from there on,
            # acknowledged records included), however sane the indexes looked.
            recovered[len(segments) - 1] = truncated = active.recover(now)
            logger.warning("%s-%d: truncated %d bytes of a partial entry at the end of segment %d",
                           self.topic, self.partition, truncated, active.base_offset)
        active.open_for_append()
        self._segments = LogSegments(segments)
        end = self.log_end_offset
        self.recovery_point = min(recovery_point, end) if needs_recovery else end
        self.log_start_offset = min(max(log_start_offset, segments[0].base_offset), end)
        return frozenset(segments[i].base_offset for i in recovered if i < len(segments))

    def _load_producer_state(self, *, clean_shutdown: bool, rebuilt: frozenset[int] = frozenset()) -> None:
        """Bring producer state up to the log end, as Kafka 2.8's ``rebuildProducerState``: from
        the newest snapshot at or below it, replaying the batches after it, then a snapshot at
        the end. A log of magic 0/1 (no producer ids) or without any snapshot that was shut down
        cleanly (written before producer state was kept: Kafka's upgrade case) is not replayed;
        snapshots at the bases of its last two segments and at its end spare every later load
        (a follower's truncation included) the scan of the whole log. A map already empty and
        at or past the end (a truncation of a log no producer with an id wrote) needs none.

        ``rebuilt`` are the segments whose transaction indexes recovery emptied: the replay
        then starts from the newest snapshot at or below the first of them (from the log start
        if there is none) and writes their aborted transactions again, as Kafka's
        ``recoverSegment`` replays a recovered segment into producer state."""
        state = self.producer_state
        end = self.log_end_offset
        snapshot_at = {segment.base_offset for segment in list(self._segments)[-2:]} | {end}
        if self.config.record_magic < 2 or (state.latest_snapshot_offset is None and clean_shutdown):
            # Snapshots past the end go (a truncation's; Kafka leaves them).
            state.truncate_and_reload(self.log_start_offset, end, self._clock.time_ms())
            for offset in sorted(snapshot_at):
                state.update_map_end_offset(offset)
                self._take_producer_snapshot()
            return
        was_empty = state.is_empty() and state.map_end_offset >= end
        now = self._clock.time_ms()
        state.truncate_and_reload(self.log_start_offset, end, now)
        if rebuilt and state.map_end_offset > min(rebuilt):
            state.reload_at_or_below(min(rebuilt), self.log_start_offset, now)
        if end > state.map_end_offset and not was_empty:
            for segment in self._segments.from_offset(state.map_end_offset):
                start = max(segment.base_offset, state.map_end_offset, self.log_start_offset)
                state.update_map_end_offset(start)
                if segment.base_offset in snapshot_at:
                    self._take_producer_snapshot()
                ended = state.update_all(state.analyze(segment.producer_batches(start, end), AppendOrigin.REPLICATION))
                if segment.base_offset in rebuilt:
                    for txn, last_stable_offset in ended:
                        segment.update_txn_index(txn, last_stable_offset)
        state.update_map_end_offset(end)
        self._take_producer_snapshot()

    def _take_producer_snapshot(self) -> None:
        """A snapshot at the producer map's end. Snapshots only shorten a later load's replay,
        so one the disk refuses (full) is logged and the log goes on without it."""
        try:
            self.producer_state.take_snapshot()
        except OSError as exc:
            logger.warning("%s-%d: cannot write the producer snapshot at %d: %s", self.topic, self.partition,
                           self.producer_state.map_end_offset, exc)

    def _clean_directory(self) -> list[int]:
        """Remove leftovers of interrupted work and finish an interrupted swap of cleaned
        segments; return the base offsets of the segments."""
        swaps = []
        for name in os.listdir(self.dir):
            if (base := _segment_base(name, LOG_SUFFIX + SWAP_SUFFIX)) is not None:
                swaps.append(base)
            elif name.endswith((DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX, SWAP_SUFFIX)):
                # A swapped-in segment's indexes are rebuilt from its log, as Kafka does.
                (self.dir / name).unlink(missing_ok=True)
        for base in sorted(swaps):
            self._finish_swap(base)
        names = os.listdir(self.dir)
        logs = {base for name in names if (base := _segment_base(name, LOG_SUFFIX)) is not None}
        for name in names:
            if any((base := _segment_base(name, suffix)) is not None and base not in logs
                   for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
                (self.dir / name).unlink(missing_ok=True)
        return sorted(logs)

    def _finish_swap(self, base: int) -> None:
        """Complete the swap a crash interrupted (Kafka's loadSegments): a ``.swap`` file is
        whole (written and fsynced as ``.cleaned`` before its rename), so the segments whose
        base offsets lie in its offset range, the remains of the group it was cleaned from,
        go, and it takes its plain name. A crash in here leaves the ``.swap`` to do it again.
        An empty one replaces just the segment of its own base offset."""
        swap = self.dir / (segment_file_stem(base) + LOG_SUFFIX + SWAP_SUFFIX)
        fd = os.open(swap, os.O_RDONLY)
        try:
            last = base
            for head in iter_headers(fd, 0, os.fstat(fd).st_size):
                last = head.offset
        finally:
            os.close(fd)
        for name in os.listdir(self.dir):
            old = _segment_base(name, LOG_SUFFIX)
            if old is not None and base <= old <= last:
                for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):
                    (self.dir / (segment_file_stem(old) + suffix)).unlink(missing_ok=True)
        os.replace(swap, self.dir / (segment_file_stem(base) + LOG_SUFFIX))
        fsync_dir(self.dir)
        logger.info("%s-%d: finished the swap of cleaned segment %d", self.topic, self.partition, base)

    @contextlib.contextmanager
    def _open(self) -> Iterator[None]:
        """The log's lock, for a log that is neither closed nor deleted."""
        with self._lock:
            if self._closed:
                raise UnknownTopic(f"{self.topic}-{self.partition} is closed or deleted")
            yield

    # -- appending ---------------------------------------------------------------------------

    def append_as_leader(self, records: bytes, leader_epoch: int = 0,
                         origin: AppendOrigin = AppendOrigin.CLIENT, *, in_place: bool = False) -> AppendResult:
        """Validate a produced set, assign its offsets from the log end, append it.

        Raises ``RecordError`` (nothing is written) for any invalid set. A coordinator's
        set (``origin``: the group coordinator's transactional offsets) carries no sequence
        numbers of its own, so only a client's is checked for duplicates and sequence (Kafka's
        ``analyzeAndValidateProducerState``). ``in_place``: ``records`` is handed over and
        may be assigned in place (``validate_and_assign``).
        """
        with self._open():
            now = self._clock.time_ms()
            validated = validate_and_assign(records, self.log_end_offset, now, self._validation_config, leader_epoch,
                                            in_place=in_place)
            self._check_set_size(validated)
            if self.config.compacts:
                self._check_keys(validated)
            producers = []
            if validated.producer_batches:
                duplicate = None
                if origin is AppendOrigin.CLIENT:
                    duplicate = self.producer_state.find_duplicate_of_any(validated.producer_batches)
                if duplicate is not None:
                    # Kafka's answer to a retried batch: success with the offsets it was given,
                    # nothing appended. (Kafka also reports the batch's max timestamp as its log
                    # append time; here that is only so under LogAppendTime, where the two agree,
                    # so CreateTime producers keep their own timestamps.)
                    append_time = duplicate.timestamp if validated.log_append_time >= 0 else -1
                    return AppendResult(duplicate.first_offset, duplicate.last_offset, append_time,
                                        duplicate.last_offset - duplicate.first_offset + 1)
                producers = self.producer_state.analyze(validated.producer_batches, origin)
            self.leader_epoch_cache.assign(leader_epoch, validated.first_offset)
            return self._append(validated, now, producers)

    def append_txn_marker(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          leader_epoch: int = 0) -> AppendResult:
        """Append the COMMIT or ABORT marker (``build_end_txn_marker``) that a transaction
        coordinator at ``coordinator_epoch`` writes to end ``producer_id``'s transaction here,
        as the leader at ``leader_epoch`` (Kafka's appendAsLeader with origin Coordinator).

        Raises ``RecordError`` (nothing is written): INVALID_PRODUCER_EPOCH for an epoch below
        the producer's, TRANSACTION_COORDINATOR_FENCED for a coordinator epoch below the last
        marker's, UNSUPPORTED_FOR_MESSAGE_FORMAT on a log of magic 0/1 (Kafka's WriteTxnMarkers
        check of the message format)."""
        with self._open():
            if self.config.record_magic < RECORD_BATCH_MAGIC:
                raise RecordError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                                  f"{self.topic}-{self.partition} is of magic {self.config.record_magic}, "
                                  "which holds no transaction markers")
            now = self._clock.time_ms()
            offset = self.log_end_offset
            marker = build_end_txn_marker(commit=commit, coordinator_epoch=coordinator_epoch, producer_id=producer_id,
                                          producer_epoch=producer_epoch, base_offset=offset, timestamp=now,
                                          partition_leader_epoch=leader_epoch)
            validated = validate_given_offsets(marker, offset, self._validation_config)
            producers = self.producer_state.analyze(validated.producer_batches, AppendOrigin.COORDINATOR)
            self.leader_epoch_cache.assign(leader_epoch, offset)
            return self._append(validated, now, producers)

    def append_as_follower(self, records: bytes | memoryview) -> AppendResult:
        """Append a leader's set keeping its offsets (strictly increasing, >= log end),
        checked shallowly (see ``validate_given_offsets``: ``first_offset`` and
        ``record_count`` of the result are the first shallow entry's offset and the number
        of shallow entries).

        A record batch carries the epoch its leader wrote it in: an epoch above the cache's
        latest starts at the batch's base offset (Kafka 0.11+'s Log.append), so a follower's
        cache describes what it holds whatever it has been told. Magic 0/1 sets carry none:
        their epochs come from the leader's OffsetForLeaderEpoch answers (replication.fetcher).
        Recorded once the set is appended, so the cache never names an offset the log lacks."""
        with self._open():
            validated = validate_given_offsets(records, self.log_end_offset, self._validation_config)
            if not validated.record_count:
                end = self.log_end_offset
                return AppendResult(end, end - 1, -1, 0)
            self._check_set_size(validated)
            producers = self.producer_state.analyze(validated.producer_batches, AppendOrigin.REPLICATION)
            result = self._append(validated, self._clock.time_ms(), producers)
            for epoch, start in validated.leader_epoch_starts:
                self.leader_epoch_cache.assign(epoch, start)
            return result

    def _check_keys(self, validated: ValidatedSet) -> None:
        # Kafka 0.10.2's LogValidator answers CORRUPT_MESSAGE (2.8 INVALID_RECORD, which
        # Produce before v8 cannot carry): the cleaner could only drop such a record.
        keyless = tuple(
            (index, f"Compacted topic cannot accept message without key in topic partition "
                    f"{self.topic}-{self.partition}.")
            for index, record in enumerate(iter_records(validated.buffer)) if record.key is None)
        if keyless:
            raise RecordError(ErrorCode.CORRUPT_MESSAGE, "One or more records have been rejected", keyless)

    def reconfigure(self, config: LogConfig) -> None:
        """Run with ``config`` from now on (a topic's configs altered while it is served):
        the next append validates, rolls and flushes by it, the next retention pass deletes by
        it. Index files already made keep their size; segments made from now on take the new one."""
        with self._lock:
            self.config = config
            self._validation_config = config.validation_config()
            for segment in self._segments:
                segment.config = config

    def _check_set_size(self, validated: ValidatedSet) -> None:
        if len(validated.buffer) > self.config.segment_bytes:
            raise RecordError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"message set of {len(validated.buffer)} bytes exceeds segment.bytes {self.config.segment_bytes}",
            )

    def _append(self, validated: ValidatedSet, now: int, producers=()) -> AppendResult:
        """Write a validated set; ``producers`` are the producer state updates its batches make
        (``ProducerStateManager.analyze``), applied once it is written."""
        segment = self._segments.active
        set_timestamp = validated.max_timestamp if validated.max_timestamp >= 0 else now
        # Unlike Kafka, a format change (message.format.version) also starts a segment: a read
        # never leaves its segment, so no fetch answer spans the change, which aiokafka
        # (0.14's C reader takes every entry of a buffer for the first one's magic) cannot
        # parse. A fetch may always return less; this costs one byte compared per append.
        if segment.should_roll(len(validated.buffer), set_timestamp, validated.last_offset) or \
                segment.ends_in_other_format(validated.buffer[MAGIC_POSITION]):
            segment = self._roll(now)
        segment.append(validated, now)
        for txn, last_stable_offset in self.producer_state.update_all(producers):
            segment.update_txn_index(txn, last_stable_offset)
        self.producer_state.update_map_end_offset(self.log_end_offset)
        every = self.config.flush_interval_messages
        if every is not None and self.log_end_offset - self.recovery_point >= every:
            self._flush(now)
        return AppendResult(validated.first_offset, validated.last_offset, validated.log_append_time,
                            validated.record_count)

    def roll(self) -> None:
        """Close the active segment now (no-op if it is empty)."""
        with self._open():
            self._roll(self._clock.time_ms())

    def _roll(self, now: int, base_offset: int | None = None) -> LogSegment:
        active = self._segments.active
        if active.size == 0:
            return active
        # The new segment first: if its files cannot be made (no inode left, the open-file
        # limit), the active segment is still whole and open for appends, so the partition
        # goes on and the roll is tried again by the next append that needs it.
        base = active.next_offset if base_offset is None else max(base_offset, active.next_offset)
        segment = LogSegment.create_for_append(self.dir, base, self.config)
        try:
            active.finish()
        except BaseException:
            segment.close()
            segment.delete_files()
            active.open_for_append()
            raise
        self._segments.add(segment)
        self._unflushed_rolled.append(active)
        # Producer state as of the new segment's base, so that recovering it starts there.
        self.producer_state.update_map_end_offset(segment.base_offset)
        self._take_producer_snapshot()
        if self.on_segment_closed is not None:
            try:
                self.on_segment_closed(self._info(active, closed=True))
            except Exception:
                logger.exception("%s-%d: on_segment_closed failed", self.topic, self.partition)
        return segment

    # -- durability --------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended so far; the recovery point moves to the log end."""
        with self._open():
            self._flush(self._clock.time_ms())

    def flush_rolled_segments(self) -> int:
        """fsync the segments closed by rolls since the last flush (and the directory that
        names them), then move the recovery point past them; returns how many.

        The fsyncs run without the log's lock, so appends, reads and retention go on
        meanwhile. Meant for a background duty (LogManager.flush_due)."""
        with self._lock:
            if self._closed or not self._unflushed_rolled:
                return 0
            rolled = list(self._unflushed_rolled)
            truncations = self._truncations
            # Descriptors, not paths: retention or a topic deletion may rename them meanwhile.
            fds = [os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)]
            try:
                for segment in rolled:
                    if segment in self._segments:  # else retention has already deleted it
                        fds.extend(segment.open_for_fsync())
            except OSError:
                for fd in fds:
                    os.close(fd)
                raise
        try:
            for fd in fds:
                os.fsync(fd)
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            if self._closed or truncations != self._truncations:
                return 0  # a truncation may have rewritten them: the next pass flushes again
            self._unflushed_rolled = [s for s in self._unflushed_rolled if s not in rolled]
            self.recovery_point = max(self.recovery_point, min(rolled[-1].next_offset, self.log_end_offset))
            return len(rolled)

    def flush_if_due(self) -> bool:
        """Flush if ``flush.ms`` has passed since the last flush with data unflushed."""
        with self._lock:
            if self._closed:
                return False
            interval = self.config.flush_interval_ms
            now = self._clock.time_ms()
            if interval is None or self.log_end_offset <= self.recovery_point or now - self._last_flush_ms < interval:
                return False
            self._flush(now)
            return True

    def _flush(self, now: int) -> None:
        if self._unflushed_rolled:
            for segment in self._unflushed_rolled:
                if segment in self._segments:
                    segment.flush()
            fsync_dir(self.dir)
            self._unflushed_rolled = []
        self._segments.active.flush()
        self.recovery_point = self.log_end_offset
        self._last_flush_ms = now

    # -- reading -----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True, cut_first_entry: bool = True) -> FileSlice:
        """Stored bytes from the entry holding ``offset`` (a compressed wrapper's start if the
        offset is inside one), at most ``max_bytes`` (but the whole first entry with
        ``min_one_message``), ending before the entry holding ``max_offset`` (the high
        watermark). Length 0 at the log end. The slice ends after the last whole entry within
        ``max_bytes``; only where none fits does it end inside one, at ``max_bytes``, as
        Kafka's fetch responses always may (see ``LogSegment._whole_entries_within``), or,
        without ``cut_first_entry``, is empty (Kafka's answer to a v3+ fetch then: the
        consumer moves on to other partitions rather than being sent bytes it must drop).
        Raises OffsetOutOfRange outside [log start, log end].
        """
        with self._open():
            return self._read(offset, max_bytes, max_offset, min_one_message, cut_first_entry)[0]

    def read_committed(self, offset: int, max_bytes: int, max_offset: int, min_one_message: bool = True,
                       cut_first_entry: bool = True) -> tuple[FileSlice, list[AbortedTxn]]:
        """:meth:`read` for a READ_COMMITTED consumer, ``max_offset`` its last stable offset,
        with the aborted transactions whose records it may return: those the transaction
        indexes from the segment read on list as overlapping the offsets from ``offset`` to
        the end of what was read (Kafka's Log.read with addAbortedTransactions; its bound is
        the next segment's base, which a read never passes)."""
        with self._open():
            found, segment = self._read(offset, max_bytes, max_offset, min_one_message, cut_first_entry)
            if not found.length:
                return found, []
            return found, self._collect_aborted_transactions(segment, offset, min(max_offset, segment.next_offset))

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)`` (Kafka's
        ``Log.collectAbortedTransactions``)."""
        with self._open():
            return self._collect_aborted_transactions(self._segments.from_offset(start_offset)[0], start_offset,
                                                      upper_bound_offset)

    def _collect_aborted_transactions(self, first: LogSegment, start_offset: int,
                                      upper_bound_offset: int) -> list[AbortedTxn]:
        """From the transaction index of ``first`` on, until an entry says no later one can
        overlap the range."""
        aborted = []
        for segment in self._segments.from_offset(first.base_offset):
            txns, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            aborted += txns
            if complete:
                break
        return aborted

    def aborted_transactions(self) -> list[AbortedTxn]:
        """Every entry of the segments' transaction indexes, in log order."""
        with self._open():
            return [txn for segment in self._segments for txn in segment.txn_index.entries()]

    def _read(self, offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool,
              cut_first_entry: bool = True) -> tuple[FileSlice, LogSegment | None]:
        """:meth:`read`'s slice and the segment it lies in (None for none)."""
        end = self.log_end_offset
        active = self._segments.active
        if offset == end:
            return FileSlice(active.file, active.size, 0), None
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRange(
                f"offset {offset} is outside [{self.log_start_offset}, {end}] of {self.topic}-{self.partition}"
            )
        for segment in self._segments.from_offset(offset):
            found = segment.read(offset, max_bytes, max_offset, min_one_message, cut_first_entry)
            if found is not None:
                return found, segment
        return FileSlice(active.file, active.size, 0), None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first message whose timestamp is >= ``timestamp``
        (KIP-33: no later message is older than the target); None if none is.

        ListOffsets' special values: -1 (latest) gives ``(log end, -1)``, -2 (earliest)
        ``(log start, -1)``, -3 (KIP-734) the first record with the largest timestamp.
        """
        with self._open():
            if timestamp == LATEST_TIMESTAMP:
                return self.log_end_offset, -1
            if timestamp == EARLIEST_TIMESTAMP:
                return self.log_start_offset, -1
            if timestamp == MAX_TIMESTAMP:
                return self._record_with_max_timestamp()
            for segment in self._segments:
                if segment.max_timestamp >= timestamp and segment.next_offset > self.log_start_offset:
                    found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                    if found is not None:
                        return found
            return None

    def _record_with_max_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or above the log start offset with
        the largest timestamp (None if none has one). Segments are visited by their largest
        timestamp, an upper bound of their records' (it may be an untimed message's append
        time), until none left can hold a larger one."""
        best = None
        live = [s for s in self._segments if s.next_offset > self.log_start_offset and s.max_timestamp >= 0]
        for segment in sorted(live, key=lambda s: -s.max_timestamp):
            if best is not None and segment.max_timestamp < best[1]:
                break
            found = segment.record_with_max_timestamp(self.log_start_offset)
            if found is not None and (best is None or (found[1], -found[0]) > (best[1], -best[0])):
                best = found
        return best

    def closed_segments(self) -> list[SegmentInfo]:
        with self._open():
            return [self._info(s, closed=True) for s in self._segments.closed()]

    def segments(self) -> list[SegmentInfo]:
        """Every segment, the active one last (``closed=False``)."""
        with self._open():
            return self.closed_segments() + [self._info(self._segments.active, closed=False)]

    # -- truncation --------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every message at or above ``offset`` (follower truncation)."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._open():
            if offset >= self.log_end_offset:
                # No message goes, but an epoch starting here still does: a follower that led
                # an epoch without writing in it holds an entry the new leader never had.
                self.leader_epoch_cache.truncate_from_end(offset)
                return
            if offset < self._segments.first.base_offset:
                self._truncate_fully_and_start_at(offset)
                return
            now = self._clock.time_ms()
            self._truncated_to(offset)
            self._schedule_deletion(self._segments.remove_after(offset), now)
            active = self._segments.active
            if not active.truncate_to(offset):
                active.load_tail_state()
            active.open_for_append()
            self._after_truncation()
            self._load_producer_state(clean_shutdown=False)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything; the log restarts empty at ``offset`` (a follower far behind)."""
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        with self._open():
            self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._truncated_to(offset)
        segment = self._segments.at_base(offset)
        if segment is not None:  # a segment already has that name: empty it and keep it
            doomed = [s for s in self._segments if s is not segment]
            segment.truncate_to(offset)
        else:
            segment = LogSegment(self.dir, offset, self.config, create=True)
            doomed = list(self._segments)
        segment.open_for_append()
        self._segments = LogSegments([segment])
        self._schedule_deletion(doomed, self._clock.time_ms())
        self.log_start_offset = offset
        self.leader_epoch_cache.clear_and_flush()
        self.producer_state.truncate_fully_and_start_at(offset)
        self._after_truncation()

    def _truncated_to(self, offset: int) -> None:
        future = self.future
        if future is not None and offset < future.log_end_offset:
            # What the future copied from here above ``offset`` is no longer this log's: a
            # follower's truncation is followed by other records at the same offsets. Kafka's
            # ReplicaAlterLogDirsThread finds the divergence by leader epochs; being in the
            # same process, the truncation itself is passed on, which cannot miss.
            future.truncate_to(offset)
        self._truncations += 1
        self._lowest_truncation = offset if self._lowest_truncation is None else min(self._lowest_truncation, offset)

    def _after_truncation(self) -> None:
        closed = self._segments.closed()
        self._unflushed_rolled = [s for s in self._unflushed_rolled if s in closed]
        end = self.log_end_offset
        self.recovery_point = min(self.recovery_point, end)
        self.log_start_offset = min(self.log_start_offset, end)
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset), end)
        self.leader_epoch_cache.truncate_from_end(end)

    # -- moving to another log dir (AlterReplicaLogDirs, KIP-113) -----------------------------

    def copy_to_future(self, max_bytes: int) -> int:
        """Copy up to ``max_bytes`` of this log, from where :attr:`future` ends, into the
        future (kept with this log's start offset, and never past this log's end); returns the
        bytes copied, 0 once the future has caught up (or there is none).

        The record sets are copied as stored, appended as a follower appends them, so the
        future rebuilds its own indexes, transaction index, producer state and leader epochs
        from them, as Kafka's ReplicaAlterLogDirsThread does by fetching from the current
        replica. Done under this log's lock, so no append or truncation comes in between."""
        with self._open():
            future = self.future
            if future is None:
                return 0
            return self._copy_to_future(future, max_bytes)

    def _copy_to_future(self, future: "Log", max_bytes: int) -> int:
        end = self.log_end_offset
        if future.log_end_offset > end:
            future.truncate_to(end)
        if self.log_start_offset > future.log_end_offset:
            future.truncate_fully_and_start_at(self.log_start_offset)
        elif self.log_start_offset > future.log_start_offset:
            future.increment_log_start_offset(self.log_start_offset)
        copied = 0
        if future.log_end_offset < end:
            found = self._read(future.log_end_offset, max_bytes, None, True)[0]
            data = found.read_bytes() if found.length else b""
            if data:
                first = int.from_bytes(data[:8], "big", signed=True)  # an entry's offset field
                if first < future.log_end_offset == future.log_start_offset:
                    # The log start is inside the first batch (DeleteRecords): the future starts
                    # at the batch's base, then at the same log start, as Kafka's
                    # Partition.appendRecordsToFollowerOrFutureReplica does.
                    future.truncate_fully_and_start_at(first)
                future.append_as_follower(data)
                if self.log_start_offset > future.log_start_offset:
                    future.increment_log_start_offset(self.log_start_offset)
                copied = len(data)
            else:
                # Nothing left to copy below the end: the cleaner removed the last batches of
                # a closed segment, and the active one is empty. The future ends there too.
                future.advance_end_to(end)
                copied = 1
        future.high_watermark = min(max(self.high_watermark, future.log_start_offset), future.log_end_offset)
        return copied

    def detach_future(self) -> "Log | None":
        """Forget :attr:`future` (a move cancelled) and return it; no copy step is under way
        once this returns."""
        with self._lock:
            future, self.future = self.future, None
            return future

    def advance_end_to(self, offset: int) -> None:
        """Start a segment at ``offset`` (above the log end) holding nothing yet, so that the
        log ends there (see _copy_to_future)."""
        with self._open():
            if offset <= self.log_end_offset:
                return
            if self._segments.active.size == 0 and len(self._segments) == 1:
                self._truncate_fully_and_start_at(offset)
            else:
                self._roll(self._clock.time_ms(), base_offset=offset)

    def replace_with_future(self, publish: Callable[[], Path]) -> None:
        """Make :attr:`future`, caught up first, this log (the last step of a move).

        Under this log's lock throughout, so every append lands in the copy before it is
        published, or after it in the log that replaced it: none is lost or written twice.
        The future is caught up, given this log's leader epochs and high watermark, flushed
        and closed; ``publish()`` then renames the directories (LogManager) and returns the
        future's final directory, which is opened again and taken over by this ``Log``
        object, so that whoever holds it (fetch sessions, the replica manager, the group
        coordinator) goes on with the moved replica. The old segments' files stay open for
        reads under way (their directory goes, their data when the last reader lets go)."""
        with self._open():
            future = self.future
            if future is None:
                raise RuntimeError(f"{self.topic}-{self.partition} has no future log")
            while self._copy_to_future(future, 1 << 20):
                pass
            # Fitted to the same log start already (truncate_from_start).
            future.leader_epoch_cache.replace(self.leader_epoch_cache.entries)
            future.flush()
            end, start = future.log_end_offset, future.log_start_offset
            future.close()
            try:
                directory = publish()
                moved = Log(directory, self.topic, self.partition, self.config, self._clock, recovery_point=end,
                            log_start_offset=start, high_watermark=self.high_watermark, topic_id=self.topic_id)
            except BaseException:
                # Between the renames or after them (a full disk, no descriptor left), this
                # log's files may be those the next start removes: no append may be taken
                # (and acknowledged) into them. The replica is served again after a restart,
                # from whichever directory the renames left (LogManager._load_futures).
                self._closed = True
                raise
            self.future = None
            self.dir = moved.dir
            self._segments = moved._segments
            self.log_start_offset, self.recovery_point = moved.log_start_offset, moved.recovery_point
            self.leader_epoch_cache = LeaderEpochCache(
                LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT), lambda: self.log_end_offset,
                entries=moved.leader_epoch_cache.entries)
            self.producer_state = moved.producer_state
            self._pending_deletes, self._unflushed_rolled = [], []
            # A cleaning under way read the old segments: its result must not be swapped in
            # (what was cleaned stays clean: the cleaner's checkpoint needs no change).
            self._truncations += 1
            self.high_watermark = self.high_watermark  # tells the new producer state

    # -- cleaning (storage.cleaner) -----------------------------------------------------------

    def cleaning_snapshot(self) -> tuple[list[LogSegment], int]:
        """The closed segments, oldest first, and the truncation count that
        :meth:`replace_segments` checks: the cleaner reads closed segments without the lock,
        as nothing but a truncation rewrites one (retention only renames it)."""
        with self._open():
            return self._segments.closed(), self._truncations

    def last_data_offsets_of_producers(self) -> dict[int, int]:
        """Producer id -> offset of its last data record, for every producer the log's state
        holds (Kafka's ``lastRecordsOfActiveProducers``): the cleaner keeps the batch holding
        it even when it empties it, so producer state rebuilt from the log still has it."""
        with self._open():
            return {producer_id: entry.last_data_offset for producer_id, entry in self.producer_state.producers.items()
                    if entry.last_data_offset >= 0}

    def marker_epochs_of_producers(self) -> dict[int, int]:
        """Producer id -> epoch, for the producers the log's state holds with no data offset,
        only a transaction marker: the cleaner keeps such a marker, emptied, so producer
        state rebuilt from the log still fences their older epochs (Kafka's
        ``lastRecordsOfActiveProducers`` without a data offset)."""
        with self._open():
            return {producer_id: entry.epoch for producer_id, entry in self.producer_state.producers.items()
                    if entry.last_data_offset < 0}

    def take_truncation(self) -> int | None:
        """The lowest offset the log was truncated to since the last call, if it was: the
        cleaner's checkpoint must not stay above it (what is appended there again is dirty;
        Kafka's maybeTruncateCheckpoint)."""
        with self._lock:
            lowest, self._lowest_truncation = self._lowest_truncation, None
            return lowest

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment], truncations: int) -> bool:
        """Swap ``cleaned`` (its files named ``.cleaned``, written and fsynced) in for the
        consecutive closed segments ``old``, crash-safely as Kafka's ``replaceSegments``:
        ``.cleaned`` becomes ``.swap``, the old segments are scheduled for deletion (renamed
        ``.deleted``; reads in flight finish), the ``.swap`` takes the plain name; a load
        finishes or discards a swap cut short at any step (see ``_clean_directory``).

        Returns False, and removes ``cleaned``'s files, when the log changed under the
        cleaner: closed, truncated, or one of ``old`` gone (retention)."""
        with self._lock:
            if (self._closed or truncations != self._truncations
                    or any(segment not in self._segments for segment in old)):
                cleaned.close()
                cleaned.delete_files()
                return False
            cleaned.rename_files(SWAP_SUFFIX)
            fsync_dir(self.dir)
            self._segments.replace(old, cleaned)
            self._schedule_deletion(old, self._clock.time_ms())
            cleaned.rename_files("")
            fsync_dir(self.dir)
            self._unflushed_rolled = [s for s in self._unflushed_rolled if s not in old]
            return True

    # -- retention ---------------------------------------------------------------------------

    def delete_expired_segments(self, may_delete: Callable[[SegmentInfo], bool] | None = None) -> int:
        """Apply retention.ms and retention.bytes; returns the number of segments deleted.

        A segment expires when ``now - its largest message timestamp > retention.ms``
        (messages without a timestamp count at their append time, see storage.segment). The
        active segment is never deleted, but once all of it is past retention it is rolled,
        so a quiet topic still expires on the next pass. Deletion takes the oldest segments
        in order and stops at the first one that is not due or that ``may_delete`` (the
        export hand-off) refuses. Deleted segments are renamed to ``.deleted`` and unlinked
        ``file.delete.delay.ms`` later by a later pass, so reads in flight finish.
        """
        with self._lock:
            if self._closed:
                return 0
            now = self._clock.time_ms()
            self._purge_deleted(now)
            if not self.config.deletes_old_segments:
                return 0
            retention_ms = self.config.retention_ms
            deleted = 0
            if retention_ms >= 0:
                active = self._segments.active
                if active.size and active.max_timestamp >= 0 and now - active.max_timestamp > retention_ms:
                    self._roll(now)
                # An empty closed segment (a cleaned one whose records all went) has no
                # timestamp to judge, and holds nothing to keep.
                deleted += self._delete_oldest(
                    lambda s: s.size == 0 or (s.max_timestamp >= 0 and now - s.max_timestamp > retention_ms),
                    may_delete, now,
                )
            if self.config.retention_bytes >= 0:
                excess = self.size_in_bytes - self.config.retention_bytes

                def over_size(segment: LogSegment) -> bool:
                    nonlocal excess
                    if excess - segment.size < 0:
                        return False
                    excess -= segment.size
                    return True

                deleted += self._delete_oldest(over_size, may_delete, now)
            return deleted

    def delete_segments_below(self, offset: int) -> int:
        """Delete the closed segments that end at or below ``offset`` and advance the log
        start offset past them (Kafka's log-start-offset breach; used for logs whose
        history is covered by snapshots, whatever their retention settings)."""
        with self._lock:
            if self._closed:
                return 0
            now = self._clock.time_ms()
            self._purge_deleted(now)
            return self._delete_oldest(lambda segment: segment.next_offset <= offset, None, now)

    def increment_log_start_offset(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords; a follower taking its
        leader's): reads, time lookups and the earliest offset start there at once, and the
        segments wholly below it are deleted now. A lower ``offset`` changes nothing. Returns
        the log start offset. ValueError above the log end."""
        with self._open():
            if offset > self.log_end_offset:
                raise ValueError(f"log start offset {offset} is above the log end {self.log_end_offset}")
            if offset > self.log_start_offset:
                now = self._clock.time_ms()
                self.log_start_offset = offset
                self.high_watermark = max(self.high_watermark, offset)
                self.leader_epoch_cache.truncate_from_start(offset)
                self._purge_deleted(now)
                self._delete_oldest(lambda segment: segment.next_offset <= offset, None, now)
            return self.log_start_offset

    def _delete_oldest(self, due: Callable[[LogSegment], bool],
                       may_delete: Callable[[SegmentInfo], bool] | None, now: int) -> int:
        count = 0
        for segment in self._segments.closed():
            if not due(segment):
                break
            if may_delete is not None and not may_delete(self._info(segment, closed=True)):
                break
            count += 1
        if count:
            doomed = self._segments.remove_oldest(count)
            self.log_start_offset = max(self.log_start_offset, self._segments.first.base_offset)
            self._schedule_deletion(doomed, now)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
            self.producer_state.delete_snapshots_before(self._segments.first.base_offset)
            self.producer_state.on_log_start_offset_incremented(self.log_start_offset)
        return count

    def remove_expired_producers(self) -> None:
        """Forget the producers idle for ``producer.id.expiration.ms`` (their last batch's
        timestamp that old) with no open transaction."""
        with self._lock:
            if not self._closed:
                self.producer_state.remove_expired_producers(self._clock.time_ms())

    def _schedule_deletion(self, segments: list[LogSegment], now: int) -> None:
        for segment in segments:
            segment.rename_to_deleted()
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, segment))

    def _purge_deleted(self, now: int) -> None:
        keep = []
        for due, segment in self._pending_deletes:
            if due <= now:
                segment.delete_files()
            else:
                keep.append((due, segment))
        self._pending_deletes = keep

    # -- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Clean close: indexes trimmed and finished, files released, pending deletions done."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._take_producer_snapshot()  # the next load starts from the end, without replaying
            for segment in self._segments:
                segment.close()
            for _, segment in self._pending_deletes:
                segment.delete_files()
            self._pending_deletes = []

    def delete(self) -> None:
        """Remove the partition's directory and everything in it."""
        with self._lock:
            self.future = None
            self._closed = True
            for segment in [*self._segments, *(s for _, s in self._pending_deletes)]:
                segment.delete_files()
            self._pending_deletes = []
            shutil.rmtree(self.dir, ignore_errors=True)
