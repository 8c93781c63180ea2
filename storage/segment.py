"""One log segment: a ``.log`` file of message sets plus its offset and time indexes (and the
``.txnindex`` of the transactions aborted in it, ``storage.txn_index``).

``<base offset, 20 digits>.log`` holds entries exactly as on the wire (magic 0/1 messages and
magic 2 batches in any mix, laid out as ``protocol.entries`` describes), each appended set as
it was validated.

The segment keeps in memory what Kafka keeps: its size, next offset, largest timestamp (and
the offset where it first appeared), and the position of its last offset-index entry, from
which the next index entry is due after ``index.interval.bytes``. Index entries point at
shallow entries by their *last* offset, so a fetch offset inside a compressed wrapper finds
that wrapper.

Messages without a timestamp (magic 0, or -1) count, for the time index, roll and retention,
at the broker's time when they were appended (Kafka falls back to the file's mtime, which a
copy resets). That time lives only in the time index, which the roll and a clean close
always complete with the segment's largest such timestamp; recovery keeps it from a sane old
index, and when the index is lost or damaged credits the time of the rebuild, later than the
truth, so such data is never deleted early. The ``.log`` bytes are never changed, and
offset-for-timestamp still answers from real message timestamps only (the index entries
only bound where its scan starts).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from minikafka.protocol import entries
from minikafka.protocol.entries import BATCH_HEADER, LOG_OVERHEAD, Entry, crc_ok, iter_entries
from minikafka.protocol.record_batch import RECORD_BATCH_MAGIC, ProducerBatch, RecordBatch, end_txn_marker
from minikafka.protocol.errors import RecordError
from minikafka.protocol.records import ValidatedSet, iter_records
from minikafka.storage.config import LogConfig
from minikafka.storage.index import CorruptIndex, OffsetIndex, TimeIndex
from minikafka.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex
from minikafka.storage.types import FileSlice, SegmentFile, SegmentInfo

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
# The log cleaner's files (storage.cleaner): a segment being written, then one being swapped in.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

MAX_RELATIVE_OFFSET = 2**31 - 1
_HEADER_WINDOW = 16 * 1024
_RECOVERY_CHUNK = 8 * 1024 * 1024


def segment_file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


def iter_headers(fd: int, start: int, end: int) -> Iterator[Entry]:
    """Shallow entries in ``[start, end)`` of an already-validated file, their heads read in
    windows (an entry's payload is not read).

    Stops at the first entry that does not fit before ``end`` or cannot be read.
    """
    position = start
    while position < end:
        window = os.pread(fd, min(_HEADER_WINDOW, end - position), position)
        try:
            moved = yield from iter_entries(window, end, base=position)
        except RecordError:
            return
        if moved == position:
            return
        position = moved


def newest_segment_magic(directory: Path) -> int | None:
    """The magic of the first entry of the newest non-empty segment in a partition
    directory, None if there is none (how a log written before magic 2 was stored is told)."""
    bases = sorted((name for name in os.listdir(directory) if name.endswith(LOG_SUFFIX)), reverse=True)
    for name in bases:
        with open(directory / name, "rb") as file:
            head = file.read(entries.MAGIC_POSITION + 1)
        if len(head) > entries.MAGIC_POSITION:
            return head[entries.MAGIC_POSITION]
    return None


class LogSegment:
    """A segment file, its two indexes and its aborted-transaction index
    (``storage.txn_index``; see the module docstring)."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, *, create: bool,
                 suffix: str = "") -> None:
        """``suffix`` follows each file's name: a cleaned segment's files are
        ``<base>.log.cleaned`` ... until it is swapped in (:meth:`rename_files`)."""
        self.base_offset = base_offset
        self.config = config
        self._directory = directory
        stem = segment_file_stem(base_offset)
        self.log_path = directory / (stem + LOG_SUFFIX + suffix)
        index_path = directory / (stem + INDEX_SUFFIX + suffix)
        time_index_path = directory / (stem + TIME_INDEX_SUFFIX + suffix)
        txn_index_path = directory / (stem + TXN_INDEX_SUFFIX + suffix)
        if create:
            index_path.unlink(missing_ok=True)
            time_index_path.unlink(missing_ok=True)
            txn_index_path.unlink(missing_ok=True)
        self.file = SegmentFile(self.log_path, "w+" if create else "r+")
        self.size = os.fstat(self.file.fileno()).st_size
        self.indexes_missing = create or not (index_path.exists() and time_index_path.exists())
        self.offset_index = OffsetIndex(index_path, base_offset, config.segment_index_bytes)
        self.time_index = TimeIndex(time_index_path, base_offset, config.segment_index_bytes)
        self.txn_index = TransactionIndex(txn_index_path, base_offset)
        self.next_offset = base_offset
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        self._index_anchor = 0
        self._rolling_base_timestamp: int | None = None
        self._last_magic: int | None = None  # of the last set appended; None: read it from the file

    @classmethod
    def create_for_append(cls, directory: Path, base_offset: int, config: LogConfig) -> "LogSegment":
        """A new, empty active segment; its files are removed again if any cannot be made."""
        segment = None
        try:
            segment = cls(directory, base_offset, config, create=True)
            segment.open_for_append()
        except BaseException:
            if segment is not None:
                segment.close()
                segment.delete_files()
            else:
                (directory / (segment_file_stem(base_offset) + LOG_SUFFIX)).unlink(missing_ok=True)
            raise
        return segment

    # -- loading -----------------------------------------------------------------------------

    def indexes_look_sane(self) -> bool:
        """Cheap check of both index files against the log, reading a few entry heads.

        Beyond Kafka's sanityCheck: the first and last offset-index entries must point at
        their messages; the first and last time-index entries must name an entry carrying
        exactly that timestamp, or none (then it is the entry's append time); an empty offset
        index is only right if no entry starts past ``index.interval.bytes``; an empty time
        index never is for a segment with data (roll and clean close leave its largest
        timestamp there; a crash, or another writer's magic 0 segment, does not).
        """
        if self.indexes_missing:
            return False
        try:
            self.offset_index.sanity_check(self.file.fileno(), self.size)
            self.time_index.sanity_check()
            self.txn_index.sanity_check()
        except CorruptIndex:
            return False
        for i in {0, self.time_index.entries - 1} if self.time_index.entries else ():
            timestamp, relative = self.time_index.entry(i)
            head = self.translate_offset(self.base_offset + relative)
            if head is None or head.offset != self.base_offset + relative or 0 <= head.timestamp != timestamp:
                return False
        if self.size and not self.time_index.entries:
            return False
        if not self.offset_index.entries:
            for head in iter_headers(self.file.fileno(), 0, self.size):
                if head.position > self.config.index_interval_bytes:
                    return False
        return True

    def load_tail_state(self, untimed_entry_time: int = -1) -> bool:
        """Set next offset and largest timestamp of a segment loaded from disk without a
        full scan: start from the last time-index entry and read entry heads to the end.
        Returns whether the last whole entry ends at the file's end; if not, the tail is a
        torn write, which only :meth:`recover` removes.

        Entries after it without a timestamp count at ``untimed_entry_time``: -1 when the
        last entry is the segment's final one (a clean close wrote it), an upper bound of
        their append time otherwise (after truncation, the largest timestamp before it)."""
        max_timestamp, offset_of_max = self.time_index.last_entry()
        start = self.offset_index.lookup(offset_of_max)[1] if self.time_index.entries else 0
        last_offset = None
        end = start
        for head in iter_headers(self.file.fileno(), start, self.size):
            timestamp = head.timestamp if head.timestamp >= 0 else untimed_entry_time
            if timestamp > max_timestamp:
                max_timestamp, offset_of_max = timestamp, head.offset
            last_offset = head.offset
            end = head.position + head.size
        self.next_offset = self.base_offset if last_offset is None else last_offset + 1
        self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max
        self._index_anchor = self.offset_index.last_entry()[1]
        self._rolling_base_timestamp = None
        return end == self.size

    def recover(self, now: int) -> int:
        """Rebuild both indexes from the log, checking every entry's size and CRC and that
        offsets increase; truncate the first bad or partial entry and all after it. The
        transaction index is emptied: the log rebuilds it as it replays the segment's
        batches into producer state (what an entry says needs that state).

        An entry without a timestamp counts at the first old time-index entry at or after
        it, or the last one, if the old indexes pass :meth:`indexes_look_sane` (an index that
        does was completed by a roll or clean close, so those times bound its append time
        from above); else at ``now``. Returns the number of bytes truncated.
        """
        fd = self.file.fileno()
        file_size = os.fstat(fd).st_size
        untimed_times = (self.time_index.all_entries() if self.indexes_look_sane() else []) or [(now, 0)]
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        max_timestamp, offset_of_max = -1, self.base_offset
        last_offset = self.base_offset - 1
        anchor = 0
        position = 0
        read_size = _RECOVERY_CHUNK
        while position < file_size:
            chunk = os.pread(fd, min(read_size, file_size - position), position)
            consumed = 0
            valid = True
            try:
                for entry in iter_entries(chunk):
                    if entry.offset <= last_offset or not crc_ok(chunk, entry):
                        valid = False
                        break
                    last_offset = entry.offset
                    consumed = entry.position + entry.size
            except RecordError:
                valid = False
            offset_entries, time_entries, anchor, max_timestamp, offset_of_max = entries.index_entries(
                memoryview(chunk)[:consumed], position, anchor, self.config.index_interval_bytes,
                max_timestamp, offset_of_max, untimed_times)
            position += consumed
            added = self.offset_index.append_many(offset_entries)
            self.time_index.append_many(time_entries[:added])
            if not valid:
                break
            if consumed:
                read_size = _RECOVERY_CHUNK
                continue
            # No whole entry in the chunk: one larger than the chunk, or a partial tail.
            if len(chunk) < LOG_OVERHEAD or read_size > _RECOVERY_CHUNK:
                break
            needed = LOG_OVERHEAD + int.from_bytes(chunk[8:12], "big", signed=True)
            if needed <= len(chunk) or position + needed > file_size:
                break
            read_size = needed
        truncated = file_size - position
        if truncated:
            os.ftruncate(fd, position)
        self.size = position
        self.next_offset = last_offset + 1 if last_offset >= self.base_offset else self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max
        self._index_anchor = anchor
        self._rolling_base_timestamp = None
        return truncated

    # -- appending ---------------------------------------------------------------------------

    def open_for_append(self) -> None:
        self.offset_index.open_for_append()
        self.time_index.open_for_append()

    def release_index_maps(self) -> None:
        """Unmap a closed segment's indexes until a read needs them (saves descriptors)."""
        self.offset_index.release()
        self.time_index.release()

    def rolling_base_timestamp(self) -> int:
        """Timestamp of the segment's first message (KIP-33 roll basis); -1 if it is empty.

        A first message without a timestamp counts at its append time, known in memory
        since this process appended it; for a segment loaded from disk, the first
        time-index entry (or the largest timestamp), which is no earlier: a restart can
        delay a roll, never hasten it."""
        if self._rolling_base_timestamp is None:
            first = next(iter_headers(self.file.fileno(), 0, self.size), None)
            if first is None:
                return -1
            if first.timestamp >= 0:
                self._rolling_base_timestamp = first.timestamp
            elif self.time_index.entries:
                self._rolling_base_timestamp = self.time_index.entry(0)[0]
            else:
                self._rolling_base_timestamp = self.max_timestamp
        return self._rolling_base_timestamp

    def should_roll(self, set_size: int, set_max_timestamp: int, set_last_offset: int) -> bool:
        """Kafka's roll rule, with time measured between message timestamps (KIP-33):
        full by bytes, the incoming set's largest timestamp (its append time if it has
        none) more than ``segment.ms`` past the first message's, an index full, or offsets
        that would not fit 4 relative bytes."""
        if self.size == 0:
            return False
        config = self.config
        if self.size + set_size > config.segment_bytes:
            return True
        if self.offset_index.is_full() or self.time_index.is_full():
            return True
        if set_last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return True
        base_timestamp = self.rolling_base_timestamp()
        return base_timestamp >= 0 and set_max_timestamp - base_timestamp > config.segment_ms

    def append(self, validated: ValidatedSet, now: int) -> None:
        """Write a validated set and index it; entries without a timestamp count at ``now``.

        Raises OSError (ENOSPC: the disk is full), or whatever else failed, with the segment,
        file and indexes as they were before the call."""
        self.append_entries(validated.buffer, validated.last_offset, validated.first_timestamp, [(now, 0)])

    def append_entries(self, buffer, last_offset: int, first_timestamp: int,
                       untimed_times: list[tuple[int, int]]) -> None:
        """Write whole, checked entries ending at ``last_offset`` and index them; an entry
        without a timestamp counts at the time ``untimed_times`` gives it (see
        ``entries.index_entries``); ``first_timestamp`` starts an empty segment's roll clock
        (-1: the first untimed time). As :meth:`append`, all or nothing."""
        offset_entries_before, time_entries_before = self.offset_index.entries, self.time_index.entries
        rolling_base_before = self._rolling_base_timestamp
        start = self.size
        fd = self.file.fileno()
        view = memoryview(buffer)
        written = 0
        try:
            while written < len(buffer):
                written += os.pwrite(fd, view[written:], start + written)
            self._index_appended(view, last_offset, first_timestamp, untimed_times, start)
        except BaseException:
            # A full disk (or any failure) leaves the segment as it was, so nothing of a
            # refused set is read, or found after a restart: cut the file back (truncation
            # needs no space), and forget index entries added (their pages stay reserved).
            os.ftruncate(fd, start)
            self.offset_index.entries, self.time_index.entries = offset_entries_before, time_entries_before
            self._rolling_base_timestamp = rolling_base_before
            raise
        finally:
            view.release()

    def _index_appended(self, view: memoryview, last_offset: int, first_timestamp: int,
                        untimed_times: list[tuple[int, int]], start: int) -> None:
        if start == 0:
            self._rolling_base_timestamp = first_timestamp if first_timestamp >= 0 else untimed_times[0][0]
        offset_entries, time_entries, _, max_timestamp, offset_of_max = entries.index_entries(
            view, start, self._index_anchor, self.config.index_interval_bytes,
            self.max_timestamp, self.offset_of_max_timestamp, untimed_times)
        added = self.offset_index.append_many(offset_entries)
        if added:
            self.time_index.append_many(time_entries[:added])
            self._index_anchor = offset_entries[added - 1][1]
        self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max
        self.size = start + len(view)
        self.next_offset = last_offset + 1
        self._last_magic = view[entries.MAGIC_POSITION]

    def first_magic(self) -> int | None:
        """The magic of the segment's first entry; None while it holds none."""
        if self.size <= entries.MAGIC_POSITION:
            return None
        return os.pread(self.file.fileno(), 1, entries.MAGIC_POSITION)[0]

    def ends_in_other_format(self, magic: int) -> bool:
        """Whether the segment holds entries and the last set appended to it is of the other
        format than ``magic``: record batches against magic 0/1 messages, which a magic 0/1 log
        mixes as its producers send them (known from the last append, else read once from the
        file's last entry)."""
        if not self.size:
            return False
        if self._last_magic is None:
            last = self.translate_offset(self.next_offset - 1)
            if last is None:
                return False
            self._last_magic = last.magic
        return (self._last_magic == entries.BATCH_MAGIC) != (magic == entries.BATCH_MAGIC)

    def finish(self) -> None:
        """The segment stops being active: record its largest timestamp as the last
        time-index entry (retention reads it there) and trim the indexes. Not fsynced here:
        the log flushes rolled segments off the append path."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.trim()
        self.time_index.trim()

    def update_txn_index(self, completed, last_stable_offset: int) -> None:
        """A marker in this segment ended ``completed`` (a producer_state.CompletedTxn): an
        aborted one goes into the transaction index (Kafka's updateTxnIndex)."""
        if completed.is_aborted:
            self.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                                             last_stable_offset))

    def flush(self) -> None:
        os.fsync(self.file.fileno())
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def open_for_fsync(self) -> list[int]:
        """New descriptors of the log and its index files (the caller closes them), so a
        closed segment can be fsynced without holding the log's lock while it renames or
        deletes files. The transaction index only if it exists (one abort in the segment)."""
        fds = [os.dup(self.file.fileno())]
        paths = [self.offset_index.path, self.time_index.path] + ([self.txn_index.path] if self.txn_index.size else [])
        try:
            for path in paths:
                fds.append(os.open(path, os.O_RDONLY))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    # -- reading -----------------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> Entry | None:
        """The first entry at or after ``start_position`` whose (last) offset is >= ``offset``."""
        position = max(start_position, self.offset_index.lookup(offset)[1])
        for head in iter_headers(self.file.fileno(), position, self.size):
            if head.offset >= offset:
                return head
        return None

    def producer_batches(self, offset: int, end_offset: int) -> Iterator[ProducerBatch]:
        """The batches with a producer id among the entries from the one holding
        ``offset`` up to ``end_offset`` (exclusive), read from their headers: what recovery
        replays into producer state. Magic 0/1 entries carry no producer."""
        first = self.translate_offset(offset)
        if first is None:
            return
        fd = self.file.fileno()
        for head in iter_headers(fd, first.position, self.size):
            if head.magic != RECORD_BATCH_MAGIC:
                continue
            (base_offset, _, leader_epoch, _, _, *fields) = BATCH_HEADER.unpack(
                os.pread(fd, BATCH_HEADER.size, head.position))
            batch = RecordBatch(base_offset, head.position, head.size, leader_epoch, *fields)
            if base_offset >= end_offset:
                return
            if batch.producer_id >= 0:
                marker = end_txn_marker(os.pread(fd, head.size, head.position)) if batch.is_control else None
                yield ProducerBatch(batch.producer_id, batch.producer_epoch, batch.base_sequence, base_offset,
                                    base_offset + batch.last_offset_delta, batch.max_timestamp,
                                    batch.is_transactional, batch.is_control, marker)

    def read(self, offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool,
             cut_first_entry: bool = True) -> FileSlice | None:
        """Entries from the one holding ``offset``; None if the segment has none that far."""
        first = self.translate_offset(offset)
        if first is None:
            return None
        limit = max(max_bytes, first.size) if min_one_message else max_bytes
        if not cut_first_entry and limit < first.size:
            return FileSlice(self.file, first.position, 0)
        end = self.size
        if max_offset is not None:
            if max_offset < offset:
                return FileSlice(self.file, first.position, 0)
            bound = self.translate_offset(max_offset, first.position)
            if bound is not None:
                end = bound.position
        length = max(0, min(end - first.position, limit))
        if length < end - first.position:
            length = self._whole_entries_within(first.position, first.position + length) or length
        return FileSlice(self.file, first.position, length)

    def _whole_entries_within(self, start: int, cut: int) -> int:
        """How many bytes from ``start`` (an entry's position) the whole entries before ``cut``
        take, 0 if none fits. A read ends there rather than inside an entry: Kafka's fetch ends
        at its byte limit, and a consumer drops the cut entry and fetches it again, which with
        librdkafka's batches of several hundred KB and 1 MiB per partition was about a fifth of
        what consumers were sent. Found from the offset index's last entry before ``cut`` and
        the heads after it (at most ``index.interval.bytes`` of them)."""
        floor = max(start, self.offset_index.last_position_at_most(cut))
        end = floor
        for head in iter_headers(self.file.fileno(), floor, cut):
            end = head.position + head.size
        return end - start

    def find_offset_by_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first message at or after ``min_offset`` whose
        timestamp is >= ``timestamp`` (KIP-33), found from the time index and a short scan."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(indexed_offset, min_offset))[1]
        fd = self.file.fileno()
        for head in iter_headers(fd, position, self.size):
            if head.timestamp < timestamp or head.offset < min_offset:
                continue
            if not head.codec and head.magic < entries.BATCH_MAGIC:  # one message: its own offset and time
                return head.offset, head.timestamp
            for record in iter_records(os.pread(fd, head.size, head.position)):
                if record.timestamp >= timestamp and record.offset >= min_offset:
                    return record.offset, record.timestamp
        return None

    def record_with_max_timestamp(self, min_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``min_offset`` with the
        largest timestamp. Usually the time index finds it (the segment's largest timestamp is
        a record's); when that is an untimed magic 0 message's append time, or the record
        carrying it lies below ``min_offset``, the segment is scanned."""
        found = self.find_offset_by_timestamp(self.max_timestamp, min_offset)
        if found is not None:
            return found
        best = None
        fd = self.file.fileno()
        for head in iter_headers(fd, self.offset_index.lookup(min_offset)[1], self.size):
            # An entry's timestamp bounds its records' (a batch's maxTimestamp, a wrapper's).
            if head.timestamp < 0 or (best is not None and head.timestamp <= best[1]):
                continue
            if not head.codec and head.magic < entries.BATCH_MAGIC:
                candidates = [(head.offset, head.timestamp)]
            else:
                candidates = [(r.offset, r.timestamp) for r in iter_records(os.pread(fd, head.size, head.position))]
            for offset, timestamp in candidates:
                if offset >= min_offset and timestamp >= 0 and (best is None or timestamp > best[1]):
                    best = offset, timestamp
        return best

    # -- truncation and removal --------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every entry whose last offset is >= ``offset``; returns bytes removed."""
        first_removed = self.translate_offset(offset)
        if first_removed is None:
            return 0
        removed = self.size - first_removed.position
        previous_max_timestamp = self.max_timestamp
        self.open_for_append()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        os.ftruncate(self.file.fileno(), first_removed.position)
        self.size = first_removed.position
        self._last_magic = None
        self.load_tail_state(untimed_entry_time=previous_max_timestamp)
        return removed

    def info(self, topic: str, partition: int, *, closed: bool) -> SegmentInfo:
        return SegmentInfo(topic, partition, self.base_offset, self.next_offset, self.log_path,
                           self.size, self.max_timestamp, closed)

    def close(self) -> None:
        """Clean close (shutdown): finish the indexes like a roll, then release the files."""
        if self.time_index.writable:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self.file.close()

    def rename_to_deleted(self) -> None:
        """First step of deletion: readers holding the file keep reading it."""
        self.rename_files(DELETED_SUFFIX)

    def rename_files(self, suffix: str) -> None:
        """Rename the files to their plain names followed by ``suffix`` (readers holding the
        log file keep reading it); the index files first, so a crash between leaves the log
        file under its old name with its indexes missing, which a load rebuilds."""
        stem = self._directory / segment_file_stem(self.base_offset)
        for index, extension in ((self.offset_index, INDEX_SUFFIX), (self.time_index, TIME_INDEX_SUFFIX),
                                 (self.txn_index, TXN_INDEX_SUFFIX)):
            index.rename(Path(f"{stem}{extension}{suffix}"))
        new_log_path = Path(f"{stem}{LOG_SUFFIX}{suffix}")
        os.replace(self.log_path, new_log_path)
        self.log_path = new_log_path

    def delete_files(self) -> None:
        """Unlink the files; the open log file closes when its last reader lets go."""
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.log_path.unlink(missing_ok=True)
