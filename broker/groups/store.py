"""The group coordinator's persistence: its events in ``__consumer_offsets`` and snapshots (KIP-630).

:class:`GroupStore` appends the events of the coordinator's groups (and says when they are
committed), loads a partition's groups back (the newest snapshot, then the events after it)
and writes snapshots; :class:`OffsetsPartition` is one partition's event log and snapshot
files. Which partitions are loaded, and when, is :mod:`broker.groups.ownership`'s business.

The coordinator's state is a fold over events (see :mod:`broker.groups.records`): offset
commits, group metadata after each completed rebalance, tombstones for expired offsets and
removed groups. Events are appended to the partition's log on our own storage; the state
lives in memory. Every ``offsets.snapshot.interval.events`` events or
``offsets.snapshot.interval.bytes`` bytes, the partition's state is written as a snapshot named
by the log offset it covers (every event below that offset is in it). Start-up loads the newest
valid snapshot and replays only the events from its offset on.

Why a committed offset is never lost
-------------------------------------
* An OffsetCommit is answered only after its event is in the log (page cache: survives a
  killed process, like any Kafka append; ``log.flush.*`` settings decide fsync) and, in a
  cluster, in the partition's in-sync replicas (below the high watermark: the partition's
  writer, see :class:`LocalWriter`).
* A snapshot is written to a temporary file, fsynced, then renamed (``SnapshotStore``), so it
  is either whole or absent; a file damaged later fails its checksum and is skipped. One whose
  checksum holds but which cannot be decoded (a format from another version) is set aside as
  ``<name>.unreadable`` and skipped the same way (:meth:`OffsetsPartition.load_snapshot`).
* When a snapshot is taken the log is rolled, so the events it covers end exactly at a
  segment boundary.
* The two newest snapshots are kept. Log segments are deleted, and older snapshots removed,
  only up to the offset of the OLDER of the two (in a cluster also only below the high
  watermark while every replica is in sync: see ``trim_bound``; and each replica trims only
  below its own snapshots: a follower does not take its leader's log start for these logs,
  ``FetcherSettings.snapshot_trimmed_topics``). So if the newest snapshot turns out damaged,
  the older one plus the log after it still holds every event: start-up falls back to it
  and replays more. Before the second snapshot exists nothing is deleted, so the fallback for
  a damaged first snapshot is a full replay.
* Losing events would take both retained snapshots damaged or unreadable at once. Then the log
  no longer reaches back to what a replay needs, and start-up says so in an error naming the
  lost range and the snapshot files (set-aside ones stay on disk) rather than passing a
  partial replay off as the state.

Snapshot payload (inside the checksummed file of :class:`storage.snapshot.SnapshotStore`)::

    4 bytes magic "MKGS" | int16 format version (1 or 2) | int32 partition
    | int64 covered offset | int32 entry count | entries...
    | version 2: int32 pending count | pending entries...
    entry: int32 key length | key | int32 value length | value
    pending entry: int64 producer id | int64 log offset of the commit | entry

Each entry is exactly the key and value of the newest event for one key (what log
compaction would keep), so loading a snapshot and replaying the log share one code path.
A pending entry is an offset a TxnOffsetCommit appended in a transaction whose marker is not
below the snapshot's offset (its transaction was open when the snapshot was taken): it
becomes committed or vanishes when the replay meets the marker. Snapshots therefore need no
stable point, which a steady exactly-once workload (always some transaction open) may never
offer. Offsets a committed transaction made visible are plain entries.
"""

from __future__ import annotations

import functools
import logging
import re
import struct
from collections.abc import Callable, Iterable, Iterator
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import trio

from minikafka.broker.groups.group import GroupMetadata, GroupState, MemberMetadata
from minikafka.broker.groups.records import (GroupKey, GroupRecordError, decode_group_value,
                                   decode_key, decode_offset_value, group_key, group_value,
                                   offset_key, offset_value)
from minikafka.protocol.entries import CONTROL_BIT, TRANSACTIONAL_BIT, iter_entries
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import NO_PRODUCER_ID, RECORD_BATCH_MAGIC, build_record_batch, producer_batches
from minikafka.protocol.records import build_message_set, iter_records
from minikafka.storage.producer_state import AppendOrigin
from minikafka.storage.snapshot import SnapshotStore

logger = logging.getLogger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"
SNAPSHOT_DIR_NAME = "group-snapshots"
# How often a cluster broker looks whether a followed partition is due for a snapshot.
FOLLOWER_SNAPSHOT_CHECK_S = 1.0

SNAPSHOT_MAGIC = b"MKGS"
SNAPSHOT_VERSION = 1
# Version 2 appends the offsets pending in open transactions; written only when there are some.
TXN_SNAPSHOT_VERSION = 2
_PENDING_HEAD = struct.Struct(">qq")   # producer id, log offset of the commit
SNAPSHOTS_KEPT = 2
_HEADER = struct.Struct(">4shiqi")
_LENGTH = struct.Struct(">i")
REPLAY_READ_BYTES = 8 * 1024 * 1024

Event = tuple[bytes, bytes | None]


class LogEvent(NamedTuple):
    """One event read back from the log: a record, or (``marker``) a transaction marker.

    ``producer_id`` is the producer whose transaction the record belongs to, or the one the
    marker ends (``commit`` or abort); NO_PRODUCER_ID for a record outside a transaction."""

    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int = NO_PRODUCER_ID
    marker: bool = False
    commit: bool = False


def _log_events(chunk) -> Iterator[LogEvent]:
    """The records and transaction markers of ``chunk``, whole entries read from the log (a
    truncated last one is skipped), in log order. A control batch without a marker (emptied
    by the cleaner) is an event with neither key nor marker: it only moves the reader on."""
    view = memoryview(chunk)
    plain_from = 0   # the run of entries outside transactions goes to iter_records whole
    for entry in iter_entries(view):
        if entry.magic != RECORD_BATCH_MAGIC or not entry.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT):
            continue
        yield from _plain_events(view[plain_from:entry.position])
        data = view[entry.position:entry.position + entry.size]
        plain_from = entry.position + entry.size
        [batch] = producer_batches(data, entry.size)
        if batch.is_control:
            marker = batch.marker
            yield LogEvent(batch.first_offset, None, None, batch.producer_id, marker is not None,
                           marker is not None and marker.commit)
        else:
            for record in iter_records(data):
                yield LogEvent(record.offset, record.key, record.value, batch.producer_id)
    yield from _plain_events(view[plain_from:])


def _plain_events(data) -> Iterator[LogEvent]:
    for record in iter_records(data):
        yield LogEvent(record.offset, record.key, record.value)


class SnapshotFormatError(ValueError):
    """A snapshot that passed its checksum but does not hold what its name says."""


class SnapshotEntry(NamedTuple):
    """One snapshot entry: an event's key and value, and for an offset pending in an open
    transaction (format version 2) its producer id and its commit's log offset."""

    key: bytes
    value: bytes
    producer_id: int = NO_PRODUCER_ID
    position: int = -1


def _encode_entry(body: bytearray, key: bytes, value: bytes) -> None:
    body += _LENGTH.pack(len(key))
    body += key
    body += _LENGTH.pack(len(value))
    body += value


def encode_snapshot(partition: int, offset: int, entries: Iterable[tuple[bytes, bytes]],
                    pending: Iterable[SnapshotEntry] = ()) -> bytes:
    """``pending``: the offsets of open transactions (version 2; without any the snapshot is
    version 1, which older versions of this broker read)."""
    body = bytearray()
    count = 0
    for key, value in entries:
        _encode_entry(body, key, value)
        count += 1
    pending_body = bytearray()
    pending_count = 0
    for entry in pending:
        pending_body += _PENDING_HEAD.pack(entry.producer_id, entry.position)
        _encode_entry(pending_body, entry.key, entry.value)
        pending_count += 1
    version = TXN_SNAPSHOT_VERSION if pending_count else SNAPSHOT_VERSION
    head = _HEADER.pack(SNAPSHOT_MAGIC, version, partition, offset, count)
    if not pending_count:
        return head + bytes(body)
    return head + bytes(body) + _LENGTH.pack(pending_count) + bytes(pending_body)


def decode_snapshot(partition: int, offset: int, data: bytes) -> Iterator[SnapshotEntry]:
    """Yield the entries of a snapshot written by :func:`encode_snapshot`, the pending
    offsets of open transactions last."""
    if len(data) < _HEADER.size:
        raise SnapshotFormatError("snapshot shorter than its header")
    magic, version, stored_partition, stored_offset, count = _HEADER.unpack_from(data)
    if magic != SNAPSHOT_MAGIC or version not in (SNAPSHOT_VERSION, TXN_SNAPSHOT_VERSION):
        raise SnapshotFormatError(f"not a group snapshot (magic {magic!r}, version {version})")
    if stored_partition != partition or stored_offset != offset:
        raise SnapshotFormatError(
            f"snapshot says partition {stored_partition} offset {stored_offset}, "
            f"expected partition {partition} offset {offset}")
    view = memoryview(data)
    pos = _HEADER.size

    def entry(producer_id: int = NO_PRODUCER_ID, position: int = -1) -> SnapshotEntry:
        nonlocal pos
        try:
            key_size = _LENGTH.unpack_from(data, pos)[0]
            pos += 4
            key = bytes(view[pos:pos + key_size])
            pos += key_size
            value_size = _LENGTH.unpack_from(data, pos)[0]
        except struct.error:
            raise SnapshotFormatError("snapshot entry runs past the end") from None
        pos += 4
        value = bytes(view[pos:pos + value_size])
        pos += value_size
        if key_size < 0 or value_size < 0 or pos > len(data):
            raise SnapshotFormatError("snapshot entry runs past the end")
        return SnapshotEntry(key, value, producer_id, position)

    for _ in range(count):
        yield entry()
    if version == TXN_SNAPSHOT_VERSION:
        try:
            (pending_count,) = _LENGTH.unpack_from(data, pos)
            pos += 4
            for _ in range(pending_count):
                producer_id, position = _PENDING_HEAD.unpack_from(data, pos)
                pos += _PENDING_HEAD.size
                yield entry(producer_id, position)
        except struct.error:
            raise SnapshotFormatError("snapshot entry runs past the end") from None
    if pos != len(data):
        raise SnapshotFormatError(f"{len(data) - pos} bytes after the last snapshot entry")


def _open_txn_offsets(group: GroupMetadata) -> list[tuple[int, int, tuple[str, int], OffsetAndMetadata]]:
    """(producer id, log offset, partition, commit) of ``group``'s offsets pending in open
    transactions, for a snapshot. One appended before the offset the group holds for its
    partition can never replace it, so it is left out: the positions of the committed offsets
    a snapshot holds are not kept, and every pending one loaded back counts as newer."""
    positions = dict(group.offset_positions)
    for key, (position, _) in group.pending_commits.items():
        positions[key] = max(position, positions.get(key, -1))
    return [(producer_id, position, key, committed)
            for producer_id, offsets in group.pending_txn_offsets.items()
            for key, (position, committed) in offsets.items()
            if positions.get(key, -1) < position]


def _marker_in_flight(partition: OffsetsPartition, groups: dict[str, GroupMetadata]) -> bool:
    """Whether a group holds offsets of a transaction whose marker is already in the log:
    written by the transaction coordinator, but not applied until it is committed
    (``handle_txn_completion``). A snapshot taken then would cover the marker without its
    effect, and the replay after it would never meet it. The log's producer state knows
    which transactions are still open in it."""
    producers = partition.log.producer_state
    for group in groups.values():
        for producer_id in group.pending_txn_offsets:
            entry = producers.last_entry(producer_id)
            if entry is None or entry.current_txn_first_offset is None:
                return True
    return False


class LocalWriter:
    """How the coordinator appends to a partition on a single broker: as the leader, which is
    the whole ISR, so an append is committed as soon as it is in the log.

    A cluster's writer (``broker.partitions.replicated.CoordinatorLogWriter``) has the same two methods:
    ``append`` goes through the partition's leader replica at its leader epoch, and
    ``committed`` waits for the high watermark."""

    # An append is committed when ``append`` returns: ``committed`` need not be awaited.
    commits_on_append = True

    def __init__(self, log) -> None:
        self.log = log

    def append(self, message_set: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
        """Append and return the last offset; raises what the log raises (RecordError, OSError)."""
        return self.log.append_as_leader(message_set, origin=origin).last_offset

    async def committed(self, last_offset: int) -> ErrorCode:
        return ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What start-up did for one partition: the snapshot it used (None: full replay from
    the log start), and the events it replayed from the log after it."""

    partition: int
    snapshot_offset: int | None
    replay_start_offset: int
    replay_end_offset: int
    events_replayed: int


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


class OffsetsPartition:
    """One ``__consumer_offsets`` partition: append events, read them back, keep snapshots.

    ``snapshot_offsets`` lists the retained snapshots this process knows to be valid (the
    one loaded at start-up, then every one written), oldest first.

    The transaction coordinator keeps ``__transaction_state`` the same way: ``topic`` names
    the partition's topic and ``holds`` its state in what is logged, ``record_error`` is what
    its state raises for an event it cannot decode.
    """

    def __init__(self, partition: int, log, snapshot_dir: Path, clock, writer=None, *,
                 trim_bound: Callable[[], int] | None = None, topic: str = GROUP_METADATA_TOPIC,
                 record_error: type[Exception] = GroupRecordError,
                 holds: str = "committed offsets and groups") -> None:
        self.partition = partition
        self.topic = topic
        self.record_error = record_error
        self.holds = holds
        self.log = log
        # Segments may be deleted only below this offset (None: wherever snapshots cover
        # them, a single broker). A replica has no way to fetch a snapshot (KRaft's
        # FetchSnapshot), so one that had to fetch the log from below another's start would
        # start over there without the events in between: a cluster trims only what every
        # replica already holds (ReplicatedPartitions.offsets_trim_bound).
        self.trim_bound = trim_bound
        self.writer = writer if writer is not None else LocalWriter(log)
        self.snapshots = SnapshotStore(snapshot_dir)
        self.clock = clock
        self.snapshot_offsets: list[int] = []
        self.events_since_snapshot = 0
        self.bytes_since_snapshot = 0
        self._begun_counts = (0, 0)

    # ------------------------------------------------------------------ events

    def append(self, events: list[Event], producer: tuple[int, int] | None = None) -> int:
        """Append events as one message set (all or nothing) and return its last offset;
        raises what the writer raises (RecordError, OSError). Plain events are a magic-1 set;
        a transaction's (``producer``: its id and epoch) a transactional v2 batch, as Kafka's
        storeOffsets writes a TxnOffsetCommit (sequence 0: a coordinator's append has none
        that counts, see ``AppendOrigin.COORDINATOR``)."""
        now = self.clock.time_ms()
        if producer is None:
            message_set = build_message_set([(key, value, now) for key, value in events], magic=1)
            last_offset = self.writer.append(message_set)
        else:
            producer_id, producer_epoch = producer
            message_set = bytes(build_record_batch([(key, value, now, ()) for key, value in events],
                                                   producer_id=producer_id, producer_epoch=producer_epoch,
                                                   base_sequence=0, transactional=True))
            last_offset = self.writer.append(message_set, AppendOrigin.COORDINATOR)
        self.events_since_snapshot += len(events)
        self.bytes_since_snapshot += len(message_set)
        return last_offset

    def read_events(self, start_offset: int, end: int | None = None) -> Iterator[LogEvent]:
        """Yield every event (and transaction marker) from ``start_offset`` to ``end``
        (default: the log end)."""
        offset = start_offset
        end = self.log.log_end_offset if end is None else end
        while offset < end:
            chunk = self.log.read(offset, REPLAY_READ_BYTES).read_bytes()
            if not chunk:
                break
            next_offset = offset
            for event in _log_events(chunk):
                if event.offset < offset:
                    continue   # inner messages of a wrapper that straddles start_offset
                if event.offset >= end:
                    return
                next_offset = event.offset + 1
                if event.key is not None or event.marker:
                    yield event
            if next_offset == offset:
                raise RuntimeError(f"{self.topic}-{self.partition}: no progress reading at offset {offset}")
            offset = next_offset

    # --------------------------------------------------------------- snapshots

    def load_snapshot(self, apply: Callable[..., None], reset: Callable[[], None]) -> int | None:
        """Fold the newest usable snapshot into the state and return its offset (None: none).

        Each entry goes to ``apply`` as (key, value), an offset pending in a transaction as
        (key, value, log offset, producer id); ``apply`` raises ``record_error`` for one it
        cannot decode.
        A snapshot that fails to decode part way is undone with ``reset``, set aside, and the
        next older one is tried: with the log kept from the older retained snapshot on, that
        one plus the replay still holds every event, where a full replay would not."""
        for offset, data in self.snapshots.newest_first():
            try:
                for entry in decode_snapshot(self.partition, offset, data):
                    if entry.producer_id == NO_PRODUCER_ID:
                        apply(entry.key, entry.value)
                    else:
                        apply(entry.key, entry.value, entry.position, entry.producer_id)
            except (SnapshotFormatError, self.record_error) as exc:
                reset()
                aside = self.snapshots.set_aside(offset)
                logger.error("%s-%d: snapshot at %d passed its checksum but cannot be "
                             "decoded (%s); set aside as %s, trying the next older snapshot",
                             self.topic, self.partition, offset, exc, aside)
                continue
            return offset
        return None

    def replay_start(self, snapshot_offset: int | None) -> int:
        """Where replay begins after loading the snapshot at ``snapshot_offset`` (None: none).

        Replay needs the log from the snapshot's offset, or from 0 without one. If the log
        starts later, the events in between are gone and so is the state only they held:
        that is logged as an error naming the range, never passed over silently."""
        needed = 0 if snapshot_offset is None else snapshot_offset
        log_start = self.log.log_start_offset
        if log_start > needed:
            logger.error(
                "%s-%d: %s, but the log starts at %d: the events at offsets %d to %d "
                "are gone, and the %s only they held are LOST. Snapshot "
                "files found damaged or set aside (*.unreadable) in %s may still hold them.",
                self.topic, self.partition,
                "no usable snapshot" if snapshot_offset is None else f"the newest usable snapshot is at {snapshot_offset}",
                log_start, needed, log_start - 1, self.holds, self.snapshots.directory)
        return max(log_start, needed)

    def due_for_snapshot(self, interval_events: int, interval_bytes: int) -> bool:
        return (self.events_since_snapshot >= interval_events
                or self.bytes_since_snapshot >= interval_bytes)

    def begin_snapshot(self, *, force: bool = False) -> int | None:
        """Mark the current log end as the next snapshot's offset and roll the log there.

        Must run on the thread that appends, between appends, together with capturing the
        state (so the state is exactly the fold of the events below the returned offset).
        Returns None when no event arrived since the last snapshot (unless ``force``)."""
        if not force and not self.events_since_snapshot:
            return None
        offset = self.log.log_end_offset
        if self.events_since_snapshot:
            # The covered events then end at a segment boundary, so the segments below a
            # snapshot can later be deleted whole.
            self.log.roll()
        self._begun_counts = (self.events_since_snapshot, self.bytes_since_snapshot)
        self.events_since_snapshot = 0
        self.bytes_since_snapshot = 0
        return offset

    def abandon_snapshot(self) -> None:
        """The snapshot begun last was not written (it failed, or shutdown cancelled it): its
        events count as not snapshotted again, so the next snapshot (at shutdown at the
        latest) still covers them instead of seeing nothing new."""
        events, size = self._begun_counts
        self._begun_counts = (0, 0)
        self.events_since_snapshot += events
        self.bytes_since_snapshot += size

    def write_snapshot(self, offset: int, data: bytes) -> None:
        """Write the snapshot file (tmp + fsync + rename). Safe to run in a worker thread."""
        self.snapshots.write(offset, data)

    def snapshot_written(self, offset: int) -> None:
        """Record a durable snapshot and drop what the retained snapshots make redundant:
        older snapshots, and log segments wholly below the OLDER retained snapshot."""
        self.snapshot_offsets.append(offset)
        if len(self.snapshot_offsets) < SNAPSHOTS_KEPT:
            return
        del self.snapshot_offsets[:-SNAPSHOTS_KEPT]
        keep_from = self.snapshot_offsets[0]
        self.snapshots.remove_older_than(keep_from)
        if self.trim_bound is not None:
            keep_from = min(keep_from, self.trim_bound())
        deleted = self.log.delete_segments_below(keep_from)
        if deleted:
            logger.info("%s-%d: removed %d segment(s) below offset %d, covered by snapshots %s",
                        self.topic, self.partition, deleted, keep_from, self.snapshot_offsets)


# Errors of an append to __consumer_offsets, as the coordinator reports them to clients
# (Kafka's GroupMetadataManager mapping).
STORE_ERRORS = {
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
# The same for a TxnOffsetCommit, whose producer the log may refuse (Kafka passes these on).
TXN_STORE_ERRORS = {
    **STORE_ERRORS,
    ErrorCode.INVALID_PRODUCER_EPOCH: ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.INVALID_TXN_STATE: ErrorCode.INVALID_TXN_STATE,
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT: ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
}
# The same for the group metadata a SyncGroup stores (storeGroup's callback in Kafka 0.10.2):
# a timed-out store asks the members to rejoin.
GROUP_STORE_ERRORS = {
    **STORE_ERRORS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def remove_unreplicated_snapshots(topic: str, index: int, log) -> None:
    """Remove the snapshots of a coordinator's state log partition above its high watermark.

    A snapshot covers events up to its offset; above the high watermark those may not survive
    (a follower truncates to its new leader's log), and loading such a snapshot later would
    bring back state the cluster never acknowledged."""
    removed = SnapshotStore(log.dir / SNAPSHOT_DIR_NAME).remove_newer_than(log.high_watermark)
    if removed:
        logger.info("%s-%d: removed %d snapshot(s) above the high watermark %d", topic, index, removed,
                    log.high_watermark)


@dataclass(slots=True)
class Write:
    """Events appended to ``partition`` up to ``last_offset``; ``apply`` puts them into the
    in-memory state once they are committed, ``discard`` forgets them when they are not."""

    partition: OffsetsPartition
    last_offset: int
    apply: Callable[[], None] = lambda: None
    discard: Callable[[], None] = lambda: None


class GroupStore:
    """The coordinator's persistence (the storing half of Kafka's GroupMetadataManager): the
    events of its groups appended to their partitions, loading a partition's groups from its
    snapshot and events, and snapshots of the partitions it serves (written in the background
    when due, and at shutdown) and, in a cluster, of those it follows.

    ``ownership`` (:class:`broker.groups.ownership.PartitionOwnership`) says which partitions
    are served and holds their groups.
    """

    def __init__(self, broker, config, ownership) -> None:
        self.broker = broker
        self.clock = broker.clock
        self.config = config
        self.ownership = ownership
        self._snapshots_due: set[int] = set()
        self._snapshot_wakeup: trio.Event | None = None
        # The coordinator's nursery: tasks that wait for a group metadata append to be committed.
        self._tasks: trio.Nursery | None = None
        # Followed partitions: the offset of the newest snapshot this broker holds of each.
        self._follower_snapshot_at: dict[int, int] = {}

    def start(self, nursery: trio.Nursery) -> None:
        """Run the snapshot writers (and the waits for commits) in ``nursery``."""
        self._snapshot_wakeup = trio.Event()
        # A long replay at start-up is snapshotted at once, so the next start is quick.
        for partition in self.ownership.partitions.values():
            if partition.due_for_snapshot(self.config.snapshot_interval_events,
                                          self.config.snapshot_interval_bytes):
                self.snapshot_soon(partition.partition)
        self._tasks = nursery
        nursery.start_soon(self._snapshot_writer)
        if self.broker.cluster is not None:
            nursery.start_soon(self._follower_snapshots)

    def forget(self, index: int) -> None:
        """This broker stopped serving partition ``index``: no snapshot of it is due, and the
        newest one it holds as a follower is read again from disk."""
        self._snapshots_due.discard(index)
        self._follower_snapshot_at.pop(index, None)

    def snapshot_soon(self, index: int) -> None:
        self._snapshots_due.add(index)
        if self._snapshot_wakeup is not None:
            self._snapshot_wakeup.set()

    def snapshot_all(self) -> None:
        """Write a snapshot of every served partition with events after its last one, so the
        next start-up replays nothing."""
        for partition in self.ownership.partitions.values():
            try:
                self.snapshot_sync(partition)
            except Exception:
                logger.exception("%s-%d: snapshot at shutdown failed; start-up will replay the log",
                                 GROUP_METADATA_TOPIC, partition.partition)

    # ---------------------------------------------------------------- appends

    def store_group(self, group: GroupMetadata, errors: dict[ErrorCode, ErrorCode]
                    ) -> tuple[ErrorCode, Write | None]:
        value = group_value(group.stored())
        error, write = self.append(group.group_id, [(group_key(group.group_id), value)], errors)
        if not error:
            group.persisted = value
        return error, write

    def append(self, group_id: str, events, errors: dict[ErrorCode, ErrorCode] = STORE_ERRORS,
               producer: tuple[int, int] | None = None) -> tuple[ErrorCode, Write | None]:
        """Append events of ``group_id`` to its partition (which this broker coordinates);
        ``errors`` maps the append's errors to the client's; ``producer`` (id, epoch) appends
        them in that producer's transaction. Tombstones and an empty group's
        metadata do not wait for the returned write to be committed (as in Kafka): a lost
        one is an offset that expires again, a group that empties again."""
        index = self.ownership.partition_for(group_id)
        partition = self.ownership.partitions[index]
        try:
            last_offset = partition.append(events, producer)
        except RecordError as exc:
            logger.warning("%s-%d: append refused: %s", GROUP_METADATA_TOPIC, index, exc)
            return errors.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR), None
        except OSError:
            logger.exception("%s-%d: append failed", GROUP_METADATA_TOPIC, index)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if self.broker.cluster is None:
            # In a cluster the replica manager wakes readers as the high watermark moves.
            self.broker.append_waiters.notify(GROUP_METADATA_TOPIC, index)
        if partition.due_for_snapshot(self.config.snapshot_interval_events,
                                      self.config.snapshot_interval_bytes):
            self.snapshot_soon(index)
        return ErrorCode.NONE, Write(partition, last_offset)

    async def committed(self, write: Write) -> ErrorCode:
        """Wait until ``write`` is committed; the replication's error if it is not, and
        NOT_COORDINATOR if this broker stopped leading its partition meanwhile (the state
        it was applied to is gone)."""
        error = await write.partition.writer.committed(write.last_offset)
        if self.ownership.partitions.get(write.partition.partition) is not write.partition:
            return ErrorCode.NOT_COORDINATOR
        return error

    def when_committed(self, write: Write, errors: dict[ErrorCode, ErrorCode],
                       done: Callable[[ErrorCode], None]) -> None:
        """Call ``done`` with the (mapped) error once ``write`` is committed or failed: at
        once where an append is committed on return (a single broker, acks 1), else from a
        task of the coordinator's nursery."""
        if write.partition.writer.commits_on_append:
            done(ErrorCode.NONE)
            return

        async def wait() -> None:
            error = await self.committed(write)
            done(errors.get(error, error))

        self._tasks.start_soon(wait)

    # ---------------------------------------------------------------- loading

    def load_led_partition(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata]) -> LoadReport:
        remove_unreplicated_snapshots(GROUP_METADATA_TOPIC, partition.partition, partition.log)
        return self.load(partition, groups)

    def _apply_event(self, groups: dict[str, GroupMetadata], key: bytes, value: bytes | None,
                     position: int = -1, producer_id: int = NO_PRODUCER_ID) -> None:
        """Fold one event (from a snapshot or the log) into one partition's ``groups``:
        ``position`` is its log offset (-1: from a snapshot, older than any replayed one),
        ``producer_id`` the producer whose transaction it belongs to (Kafka's loading of
        transactional offset commits in doLoadGroupsAndOffsets)."""
        decoded = decode_key(key)
        group = groups.get(decoded.group_id)
        if isinstance(decoded, GroupKey):
            if value is None:
                if group is not None:
                    del groups[decoded.group_id]
                    if group.has_offsets():
                        # Kafka's loading: a group tombstone removes the group's metadata; its
                        # offsets not tombstoned themselves load into an empty group.
                        groups[decoded.group_id] = GroupMetadata(
                            decoded.group_id, offsets=group.offsets, offset_positions=group.offset_positions,
                            pending_txn_offsets=group.pending_txn_offsets)
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
                                            assignment=m.assignment, group_instance_id=m.group_instance_id)
                for m in stored.members}
            group.static_members = {m.group_instance_id: m.member_id for m in stored.members
                                    if m.group_instance_id is not None}
            group.state = GroupState.STABLE if group.members else GroupState.EMPTY
            group.persisted = value
            return
        topic_partition = (decoded.topic, decoded.partition)
        if value is None:
            # As Kafka's loading: a tombstone removes the offset of its own kind only (a
            # transaction's pending one, or the committed one).
            if group is None:
                pass
            elif producer_id != NO_PRODUCER_ID:
                group.pending_txn_offsets.get(producer_id, {}).pop(topic_partition, None)
            else:
                group.offsets.pop(topic_partition, None)
                group.offset_positions.pop(topic_partition, None)
            return
        committed = decode_offset_value(value)
        if committed.expire_timestamp == -1:
            committed = dataclasses.replace(
                committed, expire_timestamp=committed.commit_timestamp + self.config.offsets_retention_ms)
        if group is None:
            group = groups[decoded.group_id] = GroupMetadata(decoded.group_id)
        if producer_id != NO_PRODUCER_ID:
            group.pending_txn_offsets.setdefault(producer_id, {})[topic_partition] = (position, committed)
            return
        group.offsets[topic_partition] = committed
        if position >= 0:
            # Replayed: a transaction's offset completed later replaces it only if appended after it.
            group.offset_positions[topic_partition] = position

    @staticmethod
    def apply_marker(groups: dict[str, GroupMetadata], producer_id: int, commit: bool) -> None:
        """The marker ending the transaction of ``producer_id`` in one partition's ``groups``
        (read back from the log, or written now: :meth:`CommittedOffsets.complete_txn`)."""
        for group in groups.values():
            if producer_id in group.pending_txn_offsets:
                group.complete_txn_offsets(producer_id, commit)

    def load(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata], *,
             end: int | None = None, report_line: bool = True) -> LoadReport:
        """Fold the newest valid snapshot and the events after it, up to ``end`` (default:
        the log end), into ``groups``. Touches no other state, so it may run in a worker
        thread while the partition is not served."""
        index = partition.partition
        log = partition.log
        snapshot_offset = partition.load_snapshot(functools.partial(self._apply_event, groups), groups.clear)
        if snapshot_offset is not None:
            partition.snapshot_offsets = [snapshot_offset]
        start = partition.replay_start(snapshot_offset)
        replayed = 0
        for event in partition.read_events(start, end):
            if event.marker:
                self.apply_marker(groups, event.producer_id, event.commit)
                continue
            try:
                self._apply_event(groups, event.key, event.value, event.offset, event.producer_id)
            except GroupRecordError as exc:
                logger.error("%s-%d: skipping undecodable event at offset %d: %s",
                             GROUP_METADATA_TOPIC, index, event.offset, exc)
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
            self.snapshot_sync(partition, groups, force=True)
            partition.snapshots.remove_newer_than(end)
        report = LoadReport(index, snapshot_offset, start, end, replayed)
        if report_line:
            logger.info(_LOAD_LINE, GROUP_METADATA_TOPIC, index,
                    "none" if snapshot_offset is None else f"at offset {snapshot_offset}",
                    replayed, start, end)
        return report

    # ---------------------------------------------------------------- snapshots

    def _capture(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata], *, force: bool = False):
        """The snapshot offset and a copy of the partition's state, or None if nothing is new
        (or, unless ``force``, while a transaction marker is in flight, see
        :func:`_marker_in_flight`: the next append asks again, and a start-up after a shutdown
        without a snapshot replays from the previous one)."""
        if not force and _marker_in_flight(partition, groups):
            logger.info("%s-%d: snapshot postponed: a transaction marker is not applied yet",
                        GROUP_METADATA_TOPIC, partition.partition)
            return None
        offset = partition.begin_snapshot(force=force)
        if offset is None:
            return None
        return offset, self._state(groups)

    @staticmethod
    def _state(groups: dict[str, GroupMetadata]):
        # Every event below the snapshot's offset (the log end) is in it, commits still waiting
        # for the high watermark too: they are in the log the snapshot stands for.
        return [(group.group_id, group.persisted, list(group.offsets_in_log().items()), _open_txn_offsets(group))
                for group in groups.values()]

    @staticmethod
    def _entries(state):
        for group_id, persisted, offsets, _ in state:
            if persisted is not None:
                yield group_key(group_id), persisted
            for (topic, partition), committed in offsets:
                yield offset_key(group_id, topic, partition), offset_value(committed)

    @staticmethod
    def _pending_entries(state):
        for group_id, _, _, pending in state:
            for producer_id, position, (topic, partition), committed in pending:
                yield SnapshotEntry(offset_key(group_id, topic, partition), offset_value(committed),
                                    producer_id, position)

    def _encode(self, index: int, offset: int, state) -> bytes:
        return encode_snapshot(index, offset, self._entries(state), self._pending_entries(state))

    def snapshot_sync(self, partition: OffsetsPartition, groups: dict[str, GroupMetadata] | None = None, *,
                      force: bool = False) -> None:
        groups = self.ownership.groups_by_partition[partition.partition] if groups is None else groups
        captured = self._capture(partition, groups, force=force)
        if captured is None:
            return
        offset, state = captured
        try:
            partition.write_snapshot(offset, self._encode(partition.partition, offset, state))
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
                partition = self.ownership.partitions.get(index)
                if partition is None:
                    continue
                captured = self._capture(partition, self.ownership.groups_by_partition[index])
                if captured is None:
                    continue
                offset, state = captured
                try:
                    await trio.to_thread.run_sync(
                        lambda: partition.write_snapshot(offset, self._encode(index, offset, state)))
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
                if self.ownership.partitions.get(index) is not partition:
                    # Leadership moved while it was written: it may cover events above the
                    # high watermark that the new leader does not have (see PartitionOwnership.resigned).
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
            for index in range(self.ownership.partition_count()):
                log = log_manager.get_log(GROUP_METADATA_TOPIC, index)
                if log is None or self.ownership.serves(index):
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
                if not self.ownership.serves(index):
                    self._follower_snapshot_at[index] = offset

    def _snapshot_by_replay(self, index: int, log, trim_bound: int) -> int:
        partition = OffsetsPartition(index, log, log.dir / SNAPSHOT_DIR_NAME, self.clock,
                                     trim_bound=lambda: trim_bound)
        end = log.high_watermark
        groups: dict[str, GroupMetadata] = {}
        report = self.load(partition, groups, end=end, report_line=False)
        partition.write_snapshot(end, self._encode(index, end, self._state(groups)))
        partition.snapshot_written(end)
        logger.info("%s-%d: follower wrote snapshot at offset %d (replayed %d event(s) from offset %d)",
                    GROUP_METADATA_TOPIC, index, end, report.events_replayed, report.replay_start_offset)
        return end
