"""The log cleaner: ``cleanup.policy=compact`` keeps the latest record of every key.

Kafka 0.10.2's design (``LogCleaner``, ``LogCleanerManager``, ``OffsetMap``) on this log:

* **Which log**: of the logs whose policy includes ``compact``, the filthiest, if its dirty
  ratio (bytes from the cleaner checkpoint to the first uncleanable offset, over those bytes
  plus the clean ones before) exceeds ``min.cleanable.dirty.ratio``. The first uncleanable
  offset is the active segment's base, the base of the first segment not yet older than
  ``min.compaction.lag.ms`` (by its largest timestamp), and the last stable offset (Kafka
  2.8's bound: a follower's records above the high watermark may still be truncated, and a
  transaction not yet decided cannot be cleaned as committed or aborted). Where each log's clean part ends is kept per log dir in
  ``cleaner-offset-checkpoint`` (storage.checkpoint's format).
* **A pass**: an :class:`OffsetMap` of key -> last offset over the dirty range, bounded by
  ``log.cleaner.dedupe.buffer.size``; when it fills, the pass cleans up to where it got.
  Then every segment below that end, the clean ones too, is rewritten, in groups that
  stay within ``segment.bytes``, the index size and 2^31 relative offsets, each group into one
  ``<base>.log.cleaned`` segment that keeps the first segment's base offset, swapped in by
  ``Log.replace_segments`` (crash-safe; a load finishes or discards a swap). Offsets never
  change. A record is kept if it is past the map's end, or it has a key that no later
  offset of the map holds and it is not a tombstone (null value) older than the delete
  horizon: the largest timestamp of the last clean segment minus ``delete.retention.ms``
  (Kafka uses that segment's file modification time; this log never judges by file times).
  A record without a key is dropped (Kafka counts it invalid), which produce refuses anyway.
* **Per entry**, the format decides (``protocol.records.retained_entry`` for magic 0/1 and
  their compressed wrappers, and magic 2 batches). A batch all of whose records go stays,
  emptied, if it holds the last data offset of a producer the log's state still holds
  (Kafka 2.8's ``BatchRetention.RETAIN_EMPTY``): producer state rebuilt from the log (a
  recovery without snapshots, a new replica) then still knows that producer's last sequence. The cleaned segment's indexes are built as it is written;
  entries without a timestamp keep the time their source's time index gave them.
* **Transactions** (Kafka 2.8's ``CleanedTransactionMetadata``, :class:`CleanedTransactions`):
  the batches of aborted transactions (the transaction indexes say which) are neither mapped
  nor kept; an ABORT marker stays while batches of its transaction were still met in this pass
  (its entry goes into the cleaned segment's transaction index), a COMMIT marker likewise,
  and once none are left a marker goes as a tombstone does, from segments past the delete
  horizon. A producer's last batch stays emptied whatever (compaction's rule), a marker too
  when it is all the log's state knows of its producer.

**Where it runs**: a pass's CPU work (reading the closed segments, the offset map, writing
each group's ``.cleaned`` files) is done by a worker process (:class:`CleaningPass`), so the
broker's interpreter does not share its GIL with it; the broker keeps what needs the live
log (:class:`Cleaner`): the range, the producers' and transactions' state the pass needs, the
swap of each group under the log's lock, and the checkpoint. The worker reads closed segments
only, which nothing rewrites but a truncation; a log truncated, closed or changed by
retention meanwhile refuses the swap and the pass ends. :meth:`LogCleaner.abort` kills the
worker (the broker's shutdown does not wait for a pass); a worker that dies otherwise leaves
the log as it was, and the pass is tried again in a new one.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import os
import resource
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

from minikafka.protocol.entries import LOG_OVERHEAD, MAGIC_POSITION, Entry, iter_entries
from minikafka.protocol.record_batch import RECORD_BATCH_MAGIC, batch_header, end_txn_marker
from minikafka.protocol.errors import RecordError
from minikafka.protocol.records import Record, iter_records, retained_entry
from minikafka.storage.checkpoint import CorruptCheckpoint, OffsetCheckpointFile
from minikafka.storage.clock import Clock
from minikafka.storage.config import LogConfig
from minikafka.storage.log import Log
from minikafka.storage.segment import CLEANED_SUFFIX, MAX_RELATIVE_OFFSET, LogSegment
from minikafka.storage.txn_index import AbortedTxn, TransactionIndex
from minikafka.storage.types import SegmentInfo, UnknownTopic

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

logger = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


class CleanerConfig(NamedTuple):
    """The broker-wide cleaner settings (Kafka's ``log.cleaner.*`` name in each comment)."""

    dedupe_buffer_size: int = 128 * 1024 * 1024       # log.cleaner.dedupe.buffer.size
    dedupe_buffer_load_factor: float = 0.9             # log.cleaner.io.buffer.load.factor
    io_buffer_size: int = 512 * 1024                   # log.cleaner.io.buffer.size
    max_io_bytes_per_second: float = float("inf")     # log.cleaner.io.max.bytes.per.second
    threads: int = 1                                   # log.cleaner.threads: worker processes


class CleanerStats(NamedTuple):
    """What one pass did, for its log line and for tests."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    bytes_read: int
    bytes_written: int
    entries_read: int   # shallow entries (messages and compressed wrappers) rewritten
    entries_kept: int
    keys: int
    seconds: float
    worker_peak_rss: int  # bytes: the largest resident set of the worker process so far


class Aborted(Exception):
    """The pass was stopped (shutdown) or the log changed under it; nothing was swapped."""


class OffsetMap:
    """Key -> last offset over a dirty range, as Kafka's ``SkimpyOffsetMap``: a key is held
    as its 16-byte MD5, and the map takes at most ``buffer_size / 24 * load_factor`` keys
    (24 bytes a slot in Kafka: the hash and an 8-byte offset). A Python dict spends some
    five times that per key, so the bound on keys is Kafka's and the bound on memory is
    proportional to it, not equal."""

    SLOT_BYTES = 24

    def __init__(self, buffer_size: int, load_factor: float = 0.9) -> None:
        self.capacity = max(int(buffer_size // self.SLOT_BYTES * load_factor), 1)
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # every record up to here was mapped

    def __len__(self) -> int:
        return len(self._offsets)

    def put(self, key: bytes, offset: int) -> bool:
        """Map ``key`` to ``offset``; False, changing nothing, when a new key finds it full."""
        digest = hashlib.md5(key).digest()
        if len(self._offsets) >= self.capacity and digest not in self._offsets:
            return False
        self._offsets[digest] = offset
        return True

    def get(self, key: bytes) -> int:
        """The last offset mapped for ``key``, -1 if none."""
        return self._offsets.get(hashlib.md5(key).digest(), -1)


class Throttler:
    """Holds the cleaner's I/O to ``bytes_per_second`` by sleeping (its worker process only),
    as Kafka's ``Throttler``: checked against the bytes counted since the window began, the
    window starting anew each second."""

    def __init__(self, bytes_per_second: float, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = bytes_per_second
        self._monotonic, self._sleep = monotonic, sleep
        self._start = monotonic()
        self._bytes = 0

    def __call__(self, count: int) -> None:
        if self.rate == float("inf"):
            return
        self._bytes += count
        elapsed = self._monotonic() - self._start
        ahead = self._bytes / self.rate - elapsed
        if ahead > 0:
            self._sleep(ahead)
        if elapsed > 1:  # a new window, so a long idle spell is not credited to a burst
            self._start, self._bytes = self._monotonic(), 0


class PassJob(NamedTuple):
    """One pass as the broker hands it to a worker process: where the log's files are and
    what only the broker's log knows (its producers, its transaction indexes, which segments
    are closed). Segments are ``(base offset, next offset)``, the closed ones, oldest first."""

    directory: Path
    config: LogConfig
    segments: list[tuple[int, int]]
    first_dirty: int
    first_uncleanable: int
    aborted_in_range: list[AbortedTxn]       # overlapping [first_dirty, first_uncleanable)
    aborted_by_segment: list[list[AbortedTxn]]  # overlapping each segment's offsets
    producers: dict[int, int]
    marker_epochs: dict[int, int]


class CleaningFailed(Exception):
    """The pass met data it cannot clean (the worker's traceback is the message)."""


class WorkerBug(Exception):
    """The pass failed on something other than the data (the worker's traceback is the
    message): it propagates, as it would from a pass in this process."""


class WorkerDied(Exception):
    """The worker process ended in the middle of a pass; nothing of that group was swapped."""


class Cleaner:
    """One pass over one log's cleanable range (see the module docstring), its CPU work in a
    worker process of its own, started at the first pass: the broker's interpreter would
    otherwise share its GIL with the pass, and its requests wait on it. The broker's side
    keeps what needs the live log: the range, the swap under the log's lock, and the abort."""

    def __init__(self, config: CleanerConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None
        self._stopped = False
        self._last_exitcode: int | None = None

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id, None until a pass starts one."""
        process = self._process
        return None if process is None else process.pid

    def abort(self) -> None:
        """Kill the worker (its pass in progress ends with ``Aborted``) and start no other."""
        with self._lock:
            self._stopped = True
            if self._process is not None:
                self._process.kill()

    def clean(self, log: Log, first_dirty: int, first_uncleanable: int) -> CleanerStats:
        """Map ``[first_dirty, first_uncleanable)`` and rewrite every segment below the map's
        end; returns the stats (``end_offset`` is the new cleaner checkpoint). Raises
        ``Aborted`` if the log changed under the pass or the cleaner was aborted,
        ``WorkerDied`` if its worker ended otherwise; segments swapped in before that stay
        (each swap is whole), and the ``.cleaned`` files of the group in progress go."""
        started = time.monotonic()
        segments, truncations = log.cleaning_snapshot()
        bounds = [(segment.base_offset, segment.next_offset) for segment in segments]
        job = PassJob(log.dir, log.config, bounds, first_dirty, first_uncleanable,
                      log.collect_aborted_transactions(first_dirty, first_uncleanable),
                      [log.collect_aborted_transactions(base, next_offset) for base, next_offset in bounds],
                      log.last_data_offsets_of_producers(), log.marker_epochs_of_producers())
        connection = self._worker()
        try:
            return self._converse(connection, job, log, segments, truncations, started)
        except (Aborted, CleaningFailed, WorkerBug):
            raise  # the worker is done with this job and waits for the next
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._discard_worker(log)
            if self._stopped:
                raise Aborted("the cleaner is stopping") from None
            raise WorkerDied(f"its worker process ended with exit code {self._last_exitcode}") from None
        except BaseException:
            self._discard_worker(log)  # it may be waiting for an answer it will not get
            raise

    def _converse(self, connection: Connection, job: PassJob, log: Log,
                  segments: list[LogSegment], truncations: int, started: float) -> CleanerStats:
        """Send the job, swap in each group the worker has written, return its stats."""
        by_base = {segment.base_offset: segment for segment in segments}
        written = 0
        connection.send(job)
        while True:
            kind, *detail = connection.recv()
            if kind == "group":
                [bases] = detail
                group = [by_base[base] for base in bases]
                cleaned = LogSegment(log.dir, bases[0], log.config, create=False, suffix=CLEANED_SUFFIX)
                # As a loaded closed segment's: its offsets run to the next segment's base.
                cleaned.next_offset = group[-1].next_offset
                cleaned.release_index_maps()
                swapped = log.replace_segments(cleaned, group, truncations)
                connection.send(swapped)
                if not swapped:
                    raise Aborted(f"{log.topic}-{log.partition} changed while it was cleaned")
                written += cleaned.size
            elif kind == "done":
                end, read, kept, bytes_read, keys, peak_rss = detail
                return CleanerStats(log.topic, log.partition, job.first_dirty, end, bytes_read, written,
                                    read, kept, keys, time.monotonic() - started, peak_rss)
            elif kind == "changed":
                raise Aborted(f"{log.topic}-{log.partition} changed while it was cleaned: {detail[0]}")
            elif kind == "failed":
                raise CleaningFailed(detail[0])
            else:
                raise WorkerBug(detail[0])

    def _worker(self) -> Connection:
        with self._lock:
            if self._stopped:
                raise Aborted("the cleaner is stopping")
            if self._process is None:
                # Imported here: a broker without a compacted log never needs it (start-up).
                import multiprocessing

                # Forked from a server process started afresh, not from the broker (it has
                # threads and a trio loop, which a plain fork copies half-alive), with this
                # module already imported there: a worker costs a fork, not an interpreter.
                processes = multiprocessing.get_context("forkserver")
                processes.set_forkserver_preload([__name__])
                connection, worker_end = processes.Pipe()
                process = processes.Process(target=_worker_main, args=(worker_end, self.config),
                                             name="minikafka log cleaner", daemon=True)
                process.start()
                worker_end.close()
                self._process, self._connection = process, connection
            return self._connection

    def _discard_worker(self, log: Log) -> None:
        """Kill the worker (if it is not dead yet) and remove the ``.cleaned`` files it may
        have been writing for ``log``; the next pass starts another."""
        with self._lock:
            process, self._process = self._process, None
            self._connection.close()
            process.kill()
            process.join()
            self._last_exitcode = process.exitcode
        for path in log.dir.glob("*" + CLEANED_SUFFIX):
            path.unlink(missing_ok=True)


def _worker_main(connection: Connection, config: CleanerConfig) -> None:
    """A worker process: the passes it is sent, one at a time, until the broker goes."""
    # Background work: where cores are short the broker's requests go first (on a spare core
    # the pass runs as fast either way).
    os.nice(10)
    throttle = Throttler(config.max_io_bytes_per_second)
    parent = os.getppid()
    while True:
        try:
            job = connection.recv()
        except EOFError:
            return
        CleaningPass(job, config, throttle, parent, connection).run()


class CleaningPass:
    """The work of one pass, in the worker process: it reads the closed segments (which
    nothing rewrites but a truncation, which refuses the swap), writes each group's
    ``.cleaned`` segment and asks the broker to swap it in before the next."""

    def __init__(self, job: PassJob, config: CleanerConfig, throttle: Throttler, parent: int,
                 connection: Connection) -> None:
        self.job = job
        self.config = config
        self._throttle = throttle
        self._parent = parent
        self._connection = connection
        self._bytes_read = 0

    def run(self) -> None:
        job = self.job
        segments: list[LogSegment] = []
        try:
            for base, next_offset in job.segments:
                segment = LogSegment(job.directory, base, job.config, create=False)
                segment.next_offset = next_offset
                segments.append(segment)
        except FileNotFoundError as exc:  # retention renamed it since the snapshot
            self._connection.send(("changed", str(exc)))
            return
        try:
            self._clean(segments)
        except (RecordError, OSError, ValueError):
            self._connection.send(("failed", traceback.format_exc()))
        except Exception:
            self._connection.send(("crashed", traceback.format_exc()))
        finally:
            for segment in segments:
                segment.file.close()
                segment.release_index_maps()

    def _clean(self, segments: list[LogSegment]) -> None:
        job = self.job
        offset_map = OffsetMap(self.config.dedupe_buffer_size, self.config.dedupe_buffer_load_factor)
        self._build_offset_map(segments, offset_map)
        end = offset_map.latest_offset + 1
        clean_before = [segment for segment in segments if segment.base_offset < job.first_dirty]
        horizon = clean_before[-1].max_timestamp - job.config.delete_retention_ms if clean_before else 0
        aborted = {segment.base_offset: txns for segment, txns in zip(segments, job.aborted_by_segment)}
        transactions = CleanedTransactions()  # carried from group to group, as Kafka's
        read = kept = 0
        for group in group_segments([s for s in segments if s.base_offset < end],
                                    job.config.segment_bytes, job.config.segment_index_bytes):
            group_read, group_kept = self._clean_group(group, aborted, offset_map, horizon, transactions)
            self._connection.send(("group", [segment.base_offset for segment in group]))
            if not self._connection.recv():
                return  # the log changed: the broker refused the swap
            read += group_read
            kept += group_kept
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self._connection.send(("done", end, read, kept, self._bytes_read, len(offset_map), peak_rss))

    # -- the offset map ----------------------------------------------------------------------

    def _build_offset_map(self, segments: list[LogSegment], offset_map: OffsetMap) -> None:
        start, end = self.job.first_dirty, self.job.first_uncleanable
        transactions = CleanedTransactions()
        transactions.add_aborted(self.job.aborted_in_range)
        for segment in segments:
            if segment.next_offset <= start or segment.base_offset >= end:
                continue
            position = segment.offset_index.lookup(start)[1] if start > segment.base_offset else 0
            for entry, data in self._read_entries(segment, position):
                if entry.offset < start:
                    continue
                if data[MAGIC_POSITION] == RECORD_BATCH_MAGIC:
                    batch = batch_header(data)
                    if batch.base_offset >= end:
                        return
                    if batch.is_control:
                        transactions.on_control_batch(batch, data)
                        unmapped = True
                    else:
                        unmapped = transactions.on_batch(batch)
                    if unmapped:
                        # A marker holds no key to map, an aborted transaction's batch none that
                        # may hide an older value; the map covers them all the same.
                        offset_map.latest_offset = entry.offset
                        continue
                for record in iter_records(data):
                    if record.offset < start:
                        continue
                    if record.offset >= end:
                        return
                    if record.key is not None and not offset_map.put(record.key, record.offset):
                        return  # full: this pass cleans up to the last record mapped
                    offset_map.latest_offset = record.offset

    # -- rewriting a group -------------------------------------------------------------------

    def _clean_group(self, group: list[LogSegment], aborted: dict[int, list[AbortedTxn]], offset_map: OffsetMap,
                     horizon: int, transactions: "CleanedTransactions") -> tuple[int, int]:
        """Write ``group`` cleaned as ``.cleaned`` files (closed here, the broker loads them);
        returns the entries read and kept."""
        job = self.job
        cleaned = LogSegment(job.directory, group[0].base_offset, job.config, create=True, suffix=CLEANED_SUFFIX)
        transactions.cleaned_index = cleaned.txn_index
        read = kept = 0
        try:
            cleaned.open_for_append()
            for source in group:
                # The whole segment's aborted transactions: the cleaned index gets every one
                # whose marker stays.
                transactions.add_aborted(aborted[source.base_offset])
                retain_deletes = source.max_timestamp > horizon
                keep = _retention_rule(offset_map, retain_tombstones=retain_deletes)
                untimed_times = source.time_index.all_entries() or [(source.max_timestamp, source.base_offset)]
                out = bytearray()
                last_offset = -1
                for _, data in self._read_entries(source, 0):
                    read += 1
                    discard = False
                    if data[MAGIC_POSITION] == RECORD_BATCH_MAGIC:
                        discard = transactions.may_discard(batch_header(data), data, retain_markers=retain_deletes)
                    retained = retained_entry(data, keep, job.producers, discard=discard,
                                              marker_epochs_of_producers=job.marker_epochs)
                    if retained is None:
                        continue
                    kept += 1
                    out += retained
                    last_offset = next(iter_entries(retained)).offset
                    if len(out) >= self.config.io_buffer_size:
                        self._write(cleaned, out, last_offset, untimed_times)
                        out = bytearray()
                if out:
                    self._write(cleaned, out, last_offset, untimed_times)
            cleaned.finish()
            cleaned.flush()
            cleaned.close()
        except BaseException:
            cleaned.close()
            cleaned.delete_files()
            raise
        return read, kept

    def _write(self, cleaned: LogSegment, out: bytearray, last_offset: int,
               untimed_times: list[tuple[int, int]]) -> None:
        self._throttle(len(out))
        cleaned.append_entries(memoryview(out), last_offset, -1, untimed_times)

    def _read_entries(self, segment: LogSegment, position: int) -> Iterator[tuple[Entry, memoryview]]:
        """The shallow entries of a closed segment from ``position``, read in chunks of
        ``log.cleaner.io.buffer.size`` (or one whole entry larger than that)."""
        fd = segment.file.fileno()
        end = segment.size
        read_size = self.config.io_buffer_size
        while position < end:
            if os.getppid() != self._parent:
                sys.exit("the broker is gone")  # its forkserver went with it: nobody would swap this
            chunk = os.pread(fd, min(read_size, end - position), position)
            self._throttle(len(chunk))
            self._bytes_read += len(chunk)
            view = memoryview(chunk)
            consumed = position
            for entry in iter_entries(chunk, base=position):
                consumed = entry.position + entry.size
                yield entry, view[entry.position - position:consumed - position]
            if consumed == position:
                if len(chunk) < LOG_OVERHEAD:
                    return
                needed = LOG_OVERHEAD + int.from_bytes(chunk[8:12], "big", signed=True)
                if needed <= len(chunk) or position + needed > end:
                    return  # nothing readable here: the rest is not whole entries
                read_size = needed
                continue
            read_size = self.config.io_buffer_size
            position = consumed


class CleanedTransactions:
    """Kafka 2.8's ``CleanedTransactionMetadata``: what a pass, reading the log in order,
    knows of the transactions it goes through, to tell which batches and markers it may drop
    (see the module docstring). ``cleaned_index`` is the transaction index of the segment
    being written."""

    def __init__(self) -> None:
        self._aborted: list[tuple[int, AbortedTxn]] = []  # heap by first offset: not reached yet
        self._ongoing_aborted: dict[int, list] = {}  # producer -> [its aborted txn, a batch of it met]
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._aborted, (txn.first_offset, txn))

    def _reach(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            _, txn = heapq.heappop(self._aborted)
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, False])

    def on_control_batch(self, batch, data) -> bool:
        """A marker met: whether the pass may drop it (its transaction has no batch left)."""
        self._reach(batch.base_offset + batch.last_offset_delta)
        if not batch.record_count:
            return True  # emptied by an earlier pass
        marker = end_txn_marker(data)
        if marker is None:
            return False  # a control record of another kind
        if marker.commit:
            if batch.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(batch.producer_id)
                return False
            return True
        ongoing = self._ongoing_aborted.pop(batch.producer_id, None)
        if ongoing is not None and ongoing[1]:
            if self.cleaned_index is not None:
                self.cleaned_index.append(ongoing[0])
            return False
        return True

    def on_batch(self, batch) -> bool:
        """A data batch met: whether it belongs to an aborted transaction."""
        self._reach(batch.base_offset + batch.last_offset_delta)
        if not batch.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            ongoing[1] = True
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False

    def may_discard(self, batch, data, *, retain_markers: bool) -> bool:
        """Kafka's ``shouldDiscardBatch``: an aborted transaction's batch, or a marker no batch
        needs any more outside the delete horizon."""
        if batch.is_control:
            return self.on_control_batch(batch, data) and not retain_markers
        return self.on_batch(batch)


def _retention_rule(offset_map: OffsetMap, *, retain_tombstones: bool) -> Callable[[Record], bool]:
    latest = offset_map.latest_offset
    get = offset_map.get

    def keep(record: Record) -> bool:
        if record.offset > latest:
            return True
        if record.key is None:
            return False
        if record.offset < get(record.key):
            return False
        return retain_tombstones or record.value is not None

    return keep


def group_segments(segments: list[LogSegment], max_bytes: int, max_index_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments in groups each cleaned into one segment (Kafka's
    ``groupSegmentsBySize``): a group's log bytes stay within ``max_bytes``, its offset and
    time index bytes each within ``max_index_bytes``, its offsets within 2^31 of its base, and
    no group across a change of format."""
    groups: list[list[LogSegment]] = []
    for segment in segments:
        if groups:
            group = groups[-1]
            if (sum(s.size for s in group) + segment.size <= max_bytes
                    and sum(s.offset_index.entries for s in group) + segment.offset_index.entries
                    <= max_index_bytes // 8
                    and sum(s.time_index.entries for s in group) + segment.time_index.entries
                    <= max_index_bytes // 12
                    and segment.next_offset - 1 - group[0].base_offset <= MAX_RELATIVE_OFFSET
                    # A format change starts a segment (no read may span one: aiokafka 0.14
                    # parses a fetched buffer in its first entry's magic); keep them apart.
                    and not _format_changes(group[-1], segment)):
                group.append(segment)
                continue
        groups.append([segment])
    return groups


def _format_changes(segment: LogSegment, following: LogSegment) -> bool:
    magic = following.first_magic()
    return magic is not None and segment.ends_in_other_format(magic)


class CleanableRange(NamedTuple):
    log: Log
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_range(log: Log, checkpoint: int, now: int,
                    may_rewrite: Callable[[SegmentInfo], bool] | None = None) -> CleanableRange:
    """Where ``log``'s dirty part starts and ends, and the bytes on each side (Kafka's
    ``LogCleanerManager.cleanableOffsets`` and ``LogToClean``). A closed segment that
    ``may_rewrite`` refuses (the export hand-off, until it has exported it) ends the range
    too."""
    segments, _ = log.cleaning_snapshot()
    first_dirty = max(checkpoint, log.log_start_offset)
    first_uncleanable = min(segments[-1].next_offset if segments else log.log_start_offset, log.last_stable_offset)
    if may_rewrite is not None:
        refused = next((info for info in log.closed_segments() if not may_rewrite(info)), None)
        if refused is not None:
            first_uncleanable = min(first_uncleanable, refused.base_offset)
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for segment in segments:
            if segment.base_offset >= first_dirty and segment.max_timestamp > now - lag:
                first_uncleanable = min(first_uncleanable, segment.base_offset)
                break
    first_dirty = min(first_dirty, first_uncleanable)
    clean = sum(s.size for s in segments if s.next_offset <= first_dirty)
    dirty = sum(s.size for s in segments if s.next_offset > first_dirty and s.base_offset < first_uncleanable)
    return CleanableRange(log, first_dirty, first_uncleanable, clean, dirty)


class LogCleaner:
    """Picks the filthiest compacted log, cleans it, and keeps each log dir's
    ``cleaner-offset-checkpoint``. ``log.cleaner.threads`` passes run at once, over distinct
    logs, each in a worker process of its own, which gets its share of the dedupe buffer (as
    Kafka's CleanerThread its offset map) and of the I/O rate (Kafka's threads share one
    throttler; processes cannot, so each holds to its part)."""

    def __init__(self, logs: Callable[[], list[Log]], config: CleanerConfig, clock: Clock,
                 may_rewrite: Callable[[SegmentInfo], bool] | None = None) -> None:
        self._logs = logs
        self._may_rewrite = may_rewrite
        self._clock = clock
        self._aborted = threading.Event()
        threads = max(config.threads, 1)
        share = config._replace(dedupe_buffer_size=config.dedupe_buffer_size // threads,
                                max_io_bytes_per_second=config.max_io_bytes_per_second / threads)
        self._cleaners = [Cleaner(share) for _ in range(threads)]
        # Guards what the passes' threads share: the checkpoints, the logs being cleaned.
        self._lock = threading.Lock()
        self._in_progress: set[tuple[str, int]] = set()  # (topic id, partition)
        self._checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        # The topic id each checkpoint entry this process wrote belongs to: a topic deleted and
        # created again under the same name starts dirty (the file has no ids).
        self._topic_ids: dict[tuple[str, int], str] = {}
        # Logs a pass failed on (damaged data): skipped until the broker restarts, as Kafka
        # marks them uncleanable rather than stop the cleaner.
        self._uncleanable: set[tuple[str, int]] = set()  # (topic id, partition)

    def abort(self) -> None:
        """Stop the pass in progress (its worker process is killed), and every later one."""
        self._aborted.set()
        for cleaner in self._cleaners:
            cleaner.abort()

    def worker_pids(self) -> list[int]:
        """The ids of the worker processes running (started at their first pass)."""
        return [cleaner.worker_pid for cleaner in self._cleaners if cleaner.worker_pid is not None]

    def _checkpoint(self, log_dir: Path) -> dict[tuple[str, int], int]:
        if log_dir not in self._checkpoints:
            try:
                self._checkpoints[log_dir] = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).read()
            except CorruptCheckpoint as exc:
                logger.warning("cleaning every compacted log from its start: %s", exc)
                self._checkpoints[log_dir] = {}
        return self._checkpoints[log_dir]

    def _first_dirty(self, log: Log) -> int:
        """The log's cleaner checkpoint, lowered to a truncation since it was written."""
        key = (log.topic, log.partition)
        offsets = self._checkpoint(log.dir.parent)
        if self._topic_ids.get(key, log.topic_id) != log.topic_id:
            offsets.pop(key, None)
        truncated = log.take_truncation()
        if truncated is not None and offsets.get(key, 0) > truncated:
            offsets[key] = truncated
        return offsets.get(key, 0)

    def filthiest(self) -> CleanableRange | None:
        """The compacted log most worth cleaning, if one's dirty ratio exceeds its
        ``min.cleanable.dirty.ratio`` (none a pass is cleaning already)."""
        now = self._clock.time_ms()
        best = None
        for log in self._logs():
            if (not log.config.compacts or (log.topic_id, log.partition) in self._uncleanable
                    or (log.topic_id, log.partition) in self._in_progress):
                continue
            try:
                candidate = cleanable_range(log, self._first_dirty(log), now, self._may_rewrite)
            except UnknownTopic:  # closed or deleted meanwhile
                continue
            if candidate.dirty_bytes and candidate.ratio > log.config.min_cleanable_dirty_ratio and (
                    best is None or candidate.ratio > best.ratio):
                best = candidate
        return best

    def clean_filthiest(self) -> CleanerStats | None:
        """One pass over the filthiest log; None if none is due, or the pass did not finish
        (aborted, the log changed, or it failed: then the log is marked uncleanable)."""
        with self._lock:
            target = None if self._aborted.is_set() else self.filthiest()
        return None if target is None else self._clean(target, self._cleaners[0])

    def clean_until_idle(self) -> list[CleanerStats]:
        """Clean while some log is due (the broker's background duty), a pass per worker at
        a time; at most one pass per compacted log, so a log that stays dirty cannot hold
        the thread."""
        passes: list[CleanerStats] = []
        budget = [sum(1 for log in self._logs() if log.config.compacts)]

        def clean_with(cleaner: Cleaner) -> None:
            while True:
                with self._lock:
                    target = None if self._aborted.is_set() or budget[0] <= 0 else self.filthiest()
                    if target is None:
                        return
                    budget[0] -= 1
                    key = (target.log.topic_id, target.log.partition)
                    self._in_progress.add(key)
                try:
                    stats = self._clean(target, cleaner)
                finally:
                    with self._lock:
                        self._in_progress.discard(key)
                if stats is not None:
                    passes.append(stats)

        others = [threading.Thread(target=clean_with, args=(cleaner,), name="log cleaner", daemon=True)
                  for cleaner in self._cleaners[1:]]
        for thread in others:
            thread.start()
        clean_with(self._cleaners[0])
        for thread in others:
            thread.join()
        return passes

    def _clean(self, target: CleanableRange, cleaner: Cleaner) -> CleanerStats | None:
        log = target.log
        try:
            stats = cleaner.clean(log, target.first_dirty, target.first_uncleanable)
        except (Aborted, UnknownTopic) as exc:  # the broker stops, or the log changed or went
            logger.info("cleaning %s-%d stopped: %s", log.topic, log.partition, exc)
            return None
        except WorkerDied as exc:
            logger.warning("cleaning %s-%d stopped: %s; the log is as it was and the pass is retried",
                           log.topic, log.partition, exc)
            return None
        except (RecordError, OSError, ValueError, CleaningFailed):
            logger.exception("cleaning %s-%d failed: it is not cleaned again until the broker restarts",
                             log.topic, log.partition)
            self._uncleanable.add((log.topic_id, log.partition))
            return None
        with self._lock:
            self._topic_ids[(log.topic, log.partition)] = log.topic_id
            self._write_checkpoint(log.dir.parent, (log.topic, log.partition), stats.end_offset)
        logger.info("cleaned %s-%d offsets [%d, %d): %.1f MB read, %.1f MB written, %d of %d entries kept, "
                    "%d keys, %.2f s (%.1f MB/s)", stats.topic, stats.partition, stats.first_dirty_offset,
                    stats.end_offset, stats.bytes_read / 1e6, stats.bytes_written / 1e6, stats.entries_kept,
                    stats.entries_read, stats.keys, stats.seconds,
                    stats.bytes_read / 1e6 / stats.seconds if stats.seconds else 0.0)
        return stats

    def _write_checkpoint(self, log_dir: Path, key: tuple[str, int], offset: int) -> None:
        offsets = self._checkpoint(log_dir)
        offsets[key] = offset
        present = {(log.topic, log.partition) for log in self._logs() if log.dir.parent == log_dir}
        for gone in [k for k in offsets if k not in present]:
            del offsets[gone]
        OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write(offsets)
