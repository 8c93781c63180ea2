"""Per-partition producer state: what idempotent and transactional producers have appended.

Kafka's ``ProducerStateManager`` (2.8), the same rules and the same snapshot files. For each
producer id a partition keeps its epoch, the metadata of its last five data batches (sequence
range, offsets, timestamp), the epoch of the last transaction coordinator that wrote a marker,
and the first offset of its open transaction. With that it

- refuses a batch of an older producer epoch (INVALID_PRODUCER_EPOCH) and a batch whose first
  sequence does not follow the last one (OUT_OF_ORDER_SEQUENCE_NUMBER; a new epoch must start at
  0), so a retried or reordered batch is never written twice or with a gap;
- recognises a retried batch still among the last five and answers it with its original offsets
  (:meth:`ProducerStateManager.find_duplicate`) instead of appending it again;
- tracks open transactions, and completed ones whose marker is not yet below the high
  watermark, for the last stable offset (the first unstable offset) and the aborted-transaction
  index (issue 26).

The state is rebuilt from the log on recovery, starting from the newest *snapshot* at or below
the point recovery starts: ``<20-digit offset>.snapshot`` in the partition directory, the map as
it stood just before that offset (a segment roll writes one at the new segment's base offset, a
clean shutdown one at the log end). Layout, big-endian, Kafka's version 1::

    version                   int16   1
    crc                       uint32  CRC-32C of everything after this field
    count                     int32   entries that follow
    per producer:
      producer_id             int64
      epoch                   int16
      last_sequence           int32
      last_offset             int64   -1 when only a marker is known
      offset_delta            int32   last_offset - first offset of that batch
      timestamp               int64   max timestamp of its last entry
      coordinator_epoch       int32
      current_txn_first_offset int64  -1 without an open transaction

A snapshot keeps only each producer's last batch (as Kafka's), so a retry of an older one of
its last five after a restart is answered OUT_OF_ORDER_SEQUENCE_NUMBER rather than as a
duplicate; the producer then bumps its epoch (KIP-360).

This module knows files and offsets only; the log calls it on append, roll, truncation,
retention and recovery, and the broker maps its :class:`RecordError` codes to responses.
"""

from __future__ import annotations

import bisect
import enum
import logging
import os
import struct
from collections import deque
from pathlib import Path
from typing import Iterable, NamedTuple

from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.entries import crc32c
from minikafka.protocol.record_batch import ProducerBatch
from minikafka.storage.checkpoint import write_atomically

logger = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
# Kafka's ProducerStateEntry.NumBatchesToRetain, matched by the producer's
# max.in.flight.requests.per.connection of at most 5 with idempotence on.
BATCHES_RETAINED = 5
# producer.id.expiration.ms's default (Kafka 2.8 uses transactional.id.expiration.ms's 7 days
# for the broker-wide setting; the manager's own default is one hour, as Kafka's).
DEFAULT_EXPIRATION_MS = 60 * 60 * 1000

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_CRC_START = 6  # the CRC covers everything after version and itself
_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshot(ValueError):
    """A snapshot file that does not parse or whose CRC does not match."""


class AppendOrigin(enum.Enum):
    """Who appends: a client's batch is validated in full, a replica's is taken as the leader
    validated it (an older epoch only logged), a coordinator's (offsets, markers) has no
    sequence numbers."""

    CLIENT = "client"
    REPLICATION = "replication"
    COORDINATOR = "coordinator"


def decrement_sequence(sequence: int, delta: int) -> int:
    """``sequence - delta`` on the producer's wrapping int32 sequence."""
    if sequence < delta:
        return INT32_MAX - (delta - sequence) + 1
    return sequence - delta


def increment_sequence(sequence: int, delta: int) -> int:
    """``sequence + delta`` on the producer's wrapping int32 sequence (Kafka's
    ``DefaultRecordBatch.incrementSequence``)."""
    if sequence > INT32_MAX - delta:
        return delta - (INT32_MAX - sequence) - 1
    return sequence + delta


def in_sequence(last: int, following: int) -> bool:
    return following == last + 1 or (following == 0 and last == INT32_MAX)


class BatchMetadata(NamedTuple):
    """One data batch a producer appended, as the state keeps it."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerEntry:
    """What a partition knows of one producer: its epoch and its last batches, oldest first.

    A plain class, not a dataclass: the broker loads this module at start-up, where building
    a dataclass costs a millisecond (tests/broker/test_startup.py)."""

    __slots__ = ("producer_id", "epoch", "batches", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset")

    def __init__(self, producer_id: int, epoch: int = NO_PRODUCER_EPOCH, batches: deque | None = None,
                 coordinator_epoch: int = -1, last_timestamp: int = -1,
                 current_txn_first_offset: int | None = None) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches = batches if batches is not None else deque(maxlen=BATCHES_RETAINED)
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def first_data_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy(self) -> "ProducerEntry":
        return ProducerEntry(self.producer_id, self.epoch, deque(self.batches, maxlen=BATCHES_RETAINED),
                             self.coordinator_epoch, self.last_timestamp, self.current_txn_first_offset)

    def bump_epoch_to(self, epoch: int) -> None:
        """A new epoch starts a new sequence: the batches of the old one no longer count."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.bump_epoch_to(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update(self, newer: "ProducerEntry") -> None:
        self.bump_epoch_to(newer.epoch)
        self.batches.extend(newer.batches)  # maxlen drops the oldest
        self.coordinator_epoch = newer.coordinator_epoch
        self.current_txn_first_offset = newer.current_txn_first_offset
        self.last_timestamp = newer.last_timestamp

    def duplicate_of(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


class TxnMetadata:
    """A transaction's producer and first offset, and its marker's offset once it ended."""

    __slots__ = ("producer_id", "first_offset", "last_offset")

    def __init__(self, producer_id: int, first_offset: int, last_offset: int | None = None) -> None:
        self.producer_id = producer_id
        self.first_offset = first_offset
        self.last_offset = last_offset


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its data spans ``first_offset``..``last_offset`` (the
    marker's offset)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerAppendInfo:
    """The batches of one producer in one append, validated against its state before the
    append and accumulated into the entry that replaces it after (nothing changes if any
    batch is refused: the caller applies :meth:`ProducerStateManager.update` only on success)."""

    def __init__(self, partition: str, producer_id: int, current: ProducerEntry, origin: AppendOrigin) -> None:
        self.partition = partition
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.entry = ProducerEntry(producer_id, current.epoch, coordinator_epoch=current.coordinator_epoch,
                                   last_timestamp=current.last_timestamp,
                                   current_txn_first_offset=current.current_txn_first_offset)
        self.started_transactions: list[TxnMetadata] = []
        self.completed_transactions: list[CompletedTxn] = []

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.entry.epoch:
            message = (f"epoch {epoch} of producer {self.producer_id} at offset {offset} in {self.partition} "
                       f"is below its last epoch {self.entry.epoch}")
            if self.origin is AppendOrigin.REPLICATION:
                logger.warning("%s", message)  # the leader accepted it; a replica copies, never judges
            else:
                raise RecordError(ErrorCode.INVALID_PRODUCER_EPOCH, message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != self.entry.epoch:
            if first_seq != 0 and self.entry.epoch != NO_PRODUCER_EPOCH:
                raise RecordError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                  f"producer {self.producer_id}'s new epoch {epoch} starts at sequence {first_seq} "
                                  f"(not 0) at offset {offset} in {self.partition}")
            return
        if self.entry.batches:
            last = self.entry.last_seq
        elif epoch == self.current.epoch:
            last = self.current.last_seq
        else:
            last = NO_SEQUENCE
        # With no epoch known (the producer's records all gone by retention or DeleteRecords),
        # any sequence is accepted, as Kafka 2.8 does (KIP-360).
        if self.current.epoch != NO_PRODUCER_EPOCH and not in_sequence(last, first_seq):
            raise RecordError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                              f"producer {self.producer_id} sent sequence {first_seq} after {last} "
                              f"at offset {offset} in {self.partition}")

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, max_timestamp: int,
                          first_offset: int, last_offset: int, is_transactional: bool) -> None:
        self._check_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self.entry.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, max_timestamp)
        if self.entry.current_txn_first_offset is not None and not is_transactional:
            raise RecordError(ErrorCode.INVALID_TXN_STATE,
                              f"producer {self.producer_id} wrote outside its open transaction "
                              f"at offset {first_offset} in {self.partition}")
        if self.entry.current_txn_first_offset is None and is_transactional:
            self.entry.current_txn_first_offset = first_offset
            self.started_transactions.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(self, *, abort: bool, coordinator_epoch: int, epoch: int, offset: int,
                              timestamp: int) -> CompletedTxn | None:
        """A COMMIT or ABORT marker; the transaction it ends, if it had data here."""
        self._check_epoch(epoch, offset)
        if self.entry.coordinator_epoch > coordinator_epoch:
            message = (f"marker of coordinator epoch {coordinator_epoch} for producer {self.producer_id} at "
                       f"offset {offset} in {self.partition}: the last was {self.entry.coordinator_epoch}")
            if self.origin is AppendOrigin.REPLICATION:
                logger.info("%s", message)
            else:
                raise RecordError(ErrorCode.TRANSACTION_COORDINATOR_FENCED, message)
        completed = None
        if self.entry.current_txn_first_offset is not None:
            completed = CompletedTxn(self.producer_id, self.entry.current_txn_first_offset, offset, abort)
        self.entry.bump_epoch_to(epoch)
        self.entry.current_txn_first_offset = None
        self.entry.coordinator_epoch = coordinator_epoch
        self.entry.last_timestamp = timestamp
        if completed is not None:
            self.completed_transactions.append(completed)
        return completed


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries) -> bytes:
    body = bytearray(struct.pack(">i", 0))
    count = 0
    for entry in entries:
        body += _ENTRY.pack(entry.producer_id, entry.epoch, entry.last_seq, entry.last_data_offset,
                            entry.last_offset_delta, entry.last_timestamp, entry.coordinator_epoch,
                            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset)
        count += 1
    struct.pack_into(">i", body, 0, count)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshot(f"{len(data)} bytes, shorter than a snapshot's header")
    version, crc, count = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshot(f"unknown snapshot version {version}")
    if crc32c(data[_CRC_START:]) != crc:
        raise CorruptSnapshot("CRC mismatch")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshot(f"{count} entries do not fit {len(data)} bytes")
    entries = []
    for producer_id, epoch, seq, offset, delta, timestamp, coordinator_epoch, txn_first in \
            _ENTRY.iter_unpack(data[_HEAD.size:]):
        entry = ProducerEntry(producer_id, epoch, coordinator_epoch=coordinator_epoch, last_timestamp=timestamp,
                              current_txn_first_offset=None if txn_first < 0 else txn_first)
        if offset >= 0:
            entry.batches.append(BatchMetadata(seq, offset, delta, timestamp))
        entries.append(entry)
    return entries


def _snapshot_offset(name: str) -> int | None:
    stem = name[:-len(SNAPSHOT_SUFFIX)]
    if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class ProducerStateManager:
    """The producer map of one partition, its transactions, and its snapshot files.

    ``map_end_offset`` is the offset the map is up to date with (the next offset it expects to
    see). The log keeps it equal to its end: on every append (:meth:`update` then
    :meth:`update_map_end_offset`), truncation (:meth:`truncate_and_reload`) and recovery (the
    log replays its batches from the newest snapshot it keeps)."""

    def __init__(self, partition: str, directory: Path, expiration_ms: int = DEFAULT_EXPIRATION_MS, *,
                 snapshots: list[int] | None = None) -> None:
        """``snapshots``: the offsets of the snapshot files ``directory`` is known to hold
        (none in a just-made one), so it is not listed."""
        self.partition = partition
        self.directory = directory
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0
        self._snapshot_offset = 0  # the map end of the newest snapshot written or loaded
        # Ascending offsets of the files on disk.
        self._snapshots = self._list_snapshots() if snapshots is None else sorted(snapshots)
        self._ongoing: dict[int, TxnMetadata] = {}  # first offset -> transaction, not yet ended
        self._unreplicated: dict[int, TxnMetadata] = {}  # ended, marker not yet below the HW

    # -- files

    def _list_snapshots(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(offset for offset in map(_snapshot_offset, names) if offset is not None)

    def _delete_snapshot(self, offset: int) -> None:
        self._snapshots.remove(offset)
        try:
            snapshot_path(self.directory, offset).unlink()
        except FileNotFoundError:
            pass

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return self._snapshots[0] if self._snapshots else None

    def take_snapshot(self) -> None:
        """Write the map at ``map_end_offset``, unless a snapshot there exists already.

        Written atomically (a temporary file renamed into place, then the directory fsynced)
        where Kafka writes the final name in place: a crash mid-write then leaves no torn
        snapshot for recovery to discard."""
        if self.map_end_offset <= self._snapshot_offset:
            return
        write_atomically(snapshot_path(self.directory, self.map_end_offset), encode_snapshot(self.producers.values()))
        if self.map_end_offset not in self._snapshots:  # rewritten by a replay from an older one
            bisect.insort(self._snapshots, self.map_end_offset)
        self._snapshot_offset = self.map_end_offset

    def remove_stray_snapshots(self, segment_base_offsets) -> None:
        """Keep the snapshots at segment base offsets, and the newest stray one if it is above
        every segment (a clean shutdown's, at the log end); delete the others."""
        bases = set(segment_base_offsets)
        highest_base = max(bases) if bases else None
        strays = [offset for offset in self._list_snapshots() if offset not in bases]
        self._snapshots = self._list_snapshots()
        keep = strays[-1] if strays and (highest_base is None or strays[-1] > highest_base) else None
        for offset in strays:
            if offset != keep:
                self._delete_snapshot(offset)

    def delete_snapshots_before(self, offset: int) -> None:
        for snapshot in [s for s in self._snapshots if s < offset]:
            self._delete_snapshot(snapshot)

    def _load_newest_snapshot(self, log_start_offset: int, now_ms: int, at_most: int | None = None) -> None:
        while self._snapshots and (at_most is None or self._snapshots[0] <= at_most):
            offset = self._snapshots[-1] if at_most is None else self._snapshots[bisect.bisect_right(self._snapshots,
                                                                                                      at_most) - 1]
            try:
                entries = decode_snapshot(snapshot_path(self.directory, offset).read_bytes())
            except (CorruptSnapshot, OSError) as exc:
                logger.warning("%s: discarding producer snapshot %s: %s", self.partition, offset, exc)
                self._delete_snapshot(offset)
                continue
            for entry in entries:
                if not self._expired(entry, now_ms):
                    self._load_entry(entry)
            self._snapshot_offset = self.map_end_offset = offset
            return
        self._snapshot_offset = self.map_end_offset = log_start_offset

    def _load_entry(self, entry: ProducerEntry) -> None:
        self.producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing[entry.current_txn_first_offset] = TxnMetadata(entry.producer_id,
                                                                        entry.current_txn_first_offset)

    # -- truncation and the log start

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """After the log was truncated to ``log_end_offset`` (or at recovery): drop the snapshots
        outside (log start, log end] and, if the map was ahead of the log, rebuild it from the
        newest snapshot left; the log then replays its batches from that offset. The log end is
        at or below the high watermark here, so no transaction is left unreplicated."""
        for offset in [s for s in self._snapshots if s > log_end_offset or s <= log_start_offset]:
            self._delete_snapshot(offset)
        if log_end_offset != self.map_end_offset:
            self._forget_all()
            self._load_newest_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _forget_all(self) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    def reload_at_or_below(self, offset: int, log_start_offset: int, now_ms: int) -> None:
        """Start again from the newest snapshot at or below ``offset`` (from the log start
        without one), keeping the newer snapshots: the log replays from there to rebuild what
        recovery emptied (storage.log)."""
        self._forget_all()
        self._load_newest_snapshot(log_start_offset, now_ms, at_most=offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The log was emptied and starts again at ``offset``: nothing of the old state stays."""
        self._forget_all()
        for snapshot in list(self._snapshots):
            self._delete_snapshot(snapshot)
        self._snapshot_offset = 0
        self.map_end_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated_below(log_start_offset)
        self.map_end_offset = max(self.map_end_offset, log_start_offset)
        self._snapshot_offset = self.latest_snapshot_offset if self._snapshots else log_start_offset

    # -- appends

    def last_entry(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def find_duplicate(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """A client's retry of a batch among its producer's last five: answer it with these
        offsets and append nothing."""
        entry = self.producers.get(producer_id)
        return entry.duplicate_of(epoch, first_seq, last_seq) if entry is not None else None

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerEntry(producer_id)
        return ProducerAppendInfo(self.partition, producer_id, current, origin)

    def analyze(self, batches: Iterable[ProducerBatch], origin: AppendOrigin) -> list[ProducerAppendInfo]:
        """The updates ``batches`` (in log order) make, one per producer, each data batch
        checked against the state and the batches before it (RecordError on the first refused
        one; nothing changes until the caller applies them with :meth:`update`). Kafka's
        ``Log.analyzeAndValidateProducerState`` without the duplicate check, which a client's
        append makes first (:meth:`find_duplicate`). A control batch's transaction marker ends
        its producer's transaction; one without (emptied by the cleaner) changes nothing."""
        infos: dict[int, ProducerAppendInfo] = {}
        for batch in batches:
            if batch.is_control and batch.marker is None:
                continue
            info = infos.get(batch.producer_id)
            if info is None:
                info = infos[batch.producer_id] = self.prepare_update(batch.producer_id, origin)
            if batch.is_control:
                info.append_end_txn_marker(abort=not batch.marker.commit, coordinator_epoch=batch.marker.coordinator_epoch,
                                           epoch=batch.producer_epoch, offset=batch.first_offset,
                                           timestamp=batch.marker.timestamp)
                continue
            last_sequence = increment_sequence(batch.base_sequence, batch.last_offset - batch.first_offset)
            info.append_data_batch(batch.producer_epoch, batch.base_sequence, last_sequence, batch.max_timestamp,
                                   batch.first_offset, batch.last_offset, batch.is_transactional)
        return list(infos.values())

    def find_duplicate_of_any(self, batches: Iterable[ProducerBatch]) -> BatchMetadata | None:
        """The retained batch that one of a client's ``batches`` repeats, if any (Kafka answers
        the whole append with it)."""
        for batch in batches:
            last_sequence = increment_sequence(batch.base_sequence, batch.last_offset - batch.first_offset)
            duplicate = self.find_duplicate(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                            last_sequence)
            if duplicate is not None:
                return duplicate
        return None

    def update(self, info: ProducerAppendInfo) -> None:
        if info.producer_id == NO_PRODUCER_ID:
            raise ValueError(f"no producer id to update in {self.partition}")
        current = self.producers.get(info.producer_id)
        if current is None:
            self.producers[info.producer_id] = info.entry.copy()
        else:
            current.update(info.entry)
        for txn in info.started_transactions:
            self._ongoing[txn.first_offset] = txn

    def update_all(self, infos: Iterable[ProducerAppendInfo]) -> list[tuple[CompletedTxn, int]]:
        """Apply the updates of one append (:meth:`analyze`), then complete the transactions its
        markers ended, in log order. Returns each with the last stable offset just after it
        (:meth:`last_stable_offset`), what the transaction index records of an aborted one.
        As Kafka's ``Log.append``, every producer is updated before any transaction completes."""
        infos = list(infos)
        for info in infos:
            self.update(info)
        completed = sorted((txn for info in infos for txn in info.completed_transactions),
                           key=lambda txn: txn.last_offset)
        ended = []
        for txn in completed:
            ended.append((txn, self.last_stable_offset(txn)))
            self.complete_txn(txn)
        return ended

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    # -- expiry

    def _expired(self, entry: ProducerEntry, now_ms: int) -> bool:
        return entry.current_txn_first_offset is None and now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired_producers(self, now_ms: int) -> None:
        for producer_id in [pid for pid, entry in self.producers.items() if self._expired(entry, now_ms)]:
            del self.producers[producer_id]

    # -- transactions

    def first_unstable_offset(self) -> int | None:
        """The first offset of a transaction not yet decided, or decided with its marker at or
        above the high watermark; None when there is none (the LSO is then the HW)."""
        candidates = [min(self._ongoing)] if self._ongoing else []
        if self._unreplicated:
            candidates.append(min(self._unreplicated))
        return min(candidates) if candidates else None

    def first_undecided_offset(self) -> int | None:
        return min(self._ongoing) if self._ongoing else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO for the transaction index entry of ``completed``: the first offset of another
        producer's open transaction, or just past the marker."""
        others = [first for first, txn in self._ongoing.items() if txn.producer_id != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(f"{self.partition}: transaction at {completed.first_offset} was never started")
        txn.last_offset = completed.last_offset
        self._unreplicated[completed.first_offset] = txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        self._remove_unreplicated_below(high_watermark)

    def _remove_unreplicated_below(self, offset: int) -> None:
        for first in [f for f, txn in self._unreplicated.items() if txn.last_offset is not None and txn.last_offset < offset]:
            del self._unreplicated[first]

    def is_empty(self) -> bool:
        return not self.producers and not self._unreplicated
