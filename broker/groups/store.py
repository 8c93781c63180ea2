"""One partition of ``__consumer_offsets``: its event log and its snapshots (KIP-630).

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
  watermark while every replica is in sync: see ``trim_bound``). So if the newest snapshot turns out damaged,
  the older one plus the log after it still holds every event: start-up falls back to it
  and replays more. Before the second snapshot exists nothing is deleted, so the fallback for
  a damaged first snapshot is a full replay.
* Losing events would take both retained snapshots damaged or unreadable at once. Then the log
  no longer reaches back to what a replay needs, and start-up says so in an error naming the
  lost range and the snapshot files (set-aside ones stay on disk) rather than passing a
  partial replay off as the state.

Snapshot payload (inside the checksummed file of :class:`storage.snapshot.SnapshotStore`)::

    4 bytes magic "MKGS" | int16 format version (1) | int32 partition | int64 covered offset
    | int32 entry count | entries...
    entry: int32 key length | key | int32 value length | value

Each entry is exactly the key and value of the newest event for one key (what log
compaction would keep), so loading a snapshot and replaying the log share one code path.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from minikafka.broker.groups.records import GroupRecordError
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.records import build_message_set, iter_records
from minikafka.storage.snapshot import SnapshotStore

logger = logging.getLogger(__name__)

SNAPSHOT_MAGIC = b"MKGS"
SNAPSHOT_VERSION = 1
SNAPSHOTS_KEPT = 2
_HEADER = struct.Struct(">4shiqi")
_LENGTH = struct.Struct(">i")
REPLAY_READ_BYTES = 8 * 1024 * 1024

Event = tuple[bytes, bytes | None]


class SnapshotFormatError(ValueError):
    """A snapshot that passed its checksum but does not hold what its name says."""


def encode_snapshot(partition: int, offset: int, entries: Iterable[tuple[bytes, bytes]]) -> bytes:
    body = bytearray()
    count = 0
    for key, value in entries:
        body += _LENGTH.pack(len(key))
        body += key
        body += _LENGTH.pack(len(value))
        body += value
        count += 1
    return _HEADER.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, partition, offset, count) + bytes(body)


def decode_snapshot(partition: int, offset: int, data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Yield the (key, value) entries of a snapshot written by :func:`encode_snapshot`."""
    if len(data) < _HEADER.size:
        raise SnapshotFormatError("snapshot shorter than its header")
    magic, version, stored_partition, stored_offset, count = _HEADER.unpack_from(data)
    if magic != SNAPSHOT_MAGIC or version != SNAPSHOT_VERSION:
        raise SnapshotFormatError(f"not a group snapshot (magic {magic!r}, version {version})")
    if stored_partition != partition or stored_offset != offset:
        raise SnapshotFormatError(
            f"snapshot says partition {stored_partition} offset {stored_offset}, "
            f"expected partition {partition} offset {offset}")
    view = memoryview(data)
    pos = _HEADER.size
    for _ in range(count):
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
        yield key, value
    if pos != len(data):
        raise SnapshotFormatError(f"{len(data) - pos} bytes after the last snapshot entry")


class LocalWriter:
    """How the coordinator appends to a partition on a single broker: as the leader, which is
    the whole ISR, so an append is committed as soon as it is in the log.

    A cluster's writer (``broker.partitions.replicated.OffsetsWriter``) has the same two methods:
    ``append`` goes through the partition's leader replica at its leader epoch, and
    ``committed`` waits for the high watermark."""

    # An append is committed when ``append`` returns: ``committed`` need not be awaited.
    commits_on_append = True

    def __init__(self, log) -> None:
        self.log = log

    def append(self, message_set: bytes) -> int:
        """Append and return the last offset; raises what the log raises (RecordError, OSError)."""
        return self.log.append_as_leader(message_set).last_offset

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


class OffsetsPartition:
    """One ``__consumer_offsets`` partition: append events, read them back, keep snapshots.

    ``snapshot_offsets`` lists the retained snapshots this process knows to be valid (the
    one loaded at start-up, then every one written), oldest first.
    """

    def __init__(self, partition: int, log, snapshot_dir: Path, clock, writer=None, *,
                 trim_bound: Callable[[], int] | None = None) -> None:
        self.partition = partition
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

    def append(self, events: list[Event]) -> int:
        """Append events as one magic-1 message set (all or nothing) and return its last
        offset; raises what the writer raises (RecordError, OSError)."""
        now = self.clock.time_ms()
        message_set = build_message_set([(key, value, now) for key, value in events], magic=1)
        last_offset = self.writer.append(message_set)
        self.events_since_snapshot += len(events)
        self.bytes_since_snapshot += len(message_set)
        return last_offset

    def read_events(self, start_offset: int, end: int | None = None) -> Iterator[tuple[int, bytes, bytes | None]]:
        """Yield (offset, key, value) of every event from ``start_offset`` to ``end`` (default:
        the log end)."""
        offset = start_offset
        end = self.log.log_end_offset if end is None else end
        while offset < end:
            chunk = self.log.read(offset, REPLAY_READ_BYTES).read_bytes()
            if not chunk:
                break
            next_offset = offset
            for record in iter_records(chunk):
                if record.offset < offset:
                    continue   # inner messages of a wrapper that straddles start_offset
                if record.offset >= end:
                    return
                next_offset = record.offset + 1
                if record.key is not None:
                    yield record.offset, record.key, record.value
            if next_offset == offset:
                raise RuntimeError(f"__consumer_offsets-{self.partition}: no progress reading at offset {offset}")
            offset = next_offset

    # --------------------------------------------------------------- snapshots

    def load_snapshot(self, apply: Callable[[bytes, bytes], None], reset: Callable[[], None]) -> int | None:
        """Fold the newest usable snapshot into the state and return its offset (None: none).

        Each entry goes to ``apply``, which raises GroupRecordError for one it cannot decode.
        A snapshot that fails to decode part way is undone with ``reset``, set aside, and the
        next older one is tried: with the log kept from the older retained snapshot on, that
        one plus the replay still holds every event, where a full replay would not."""
        for offset, data in self.snapshots.newest_first():
            try:
                for key, value in decode_snapshot(self.partition, offset, data):
                    apply(key, value)
            except (SnapshotFormatError, GroupRecordError) as exc:
                reset()
                aside = self.snapshots.set_aside(offset)
                logger.error("__consumer_offsets-%d: snapshot at %d passed its checksum but cannot be "
                             "decoded (%s); set aside as %s, trying the next older snapshot",
                             self.partition, offset, exc, aside)
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
                "__consumer_offsets-%d: %s, but the log starts at %d: the events at offsets %d to %d "
                "are gone, and the committed offsets and groups only they held are LOST. Snapshot "
                "files found damaged or set aside (*.unreadable) in %s may still hold them.",
                self.partition,
                "no usable snapshot" if snapshot_offset is None else f"the newest usable snapshot is at {snapshot_offset}",
                log_start, needed, log_start - 1, self.snapshots.directory)
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
            logger.info("__consumer_offsets-%d: removed %d segment(s) below offset %d, covered by snapshots %s",
                        self.partition, deleted, keep_from, self.snapshot_offsets)
