"""The aborted-transaction index of a segment: ``<base offset>.txnindex``, Kafka's
TransactionIndex.

One entry per transaction aborted by a marker in the segment, in the order of the markers
(so ``last_offset`` strictly increases), 34 bytes, big-endian::

    version            int16   0
    producer_id        int64
    first_offset       int64   the transaction's first offset (maybe in an earlier segment)
    last_offset        int64   its ABORT marker's offset
    last_stable_offset int64   the log's last stable offset just after the marker: the first
                               offset of another producer's transaction still open, else
                               last_offset + 1

A READ_COMMITTED fetch hands the entries overlapping what it returns to the consumer, which
skips those producers' records between first and last offset. The file exists only once a
transaction was aborted in the segment (as Kafka creates it lazily); it is truncated with the
segment, renamed and deleted with it, and rebuilt by recovery (``storage.log``). It is small
(an entry per abort), so it is read whole when asked, and opened only for the moment of a
write: a segment holds no descriptor for it.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from minikafka.storage.index import CorruptIndex

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """A segment's aborted transactions (see the module docstring)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        try:
            self.size = os.stat(path).st_size
        except FileNotFoundError:
            self.size = 0
        self._last_offset: int | None = None
        if self.size >= ENTRY_SIZE:
            self._last_offset = self._read(self.size - self.size % ENTRY_SIZE - ENTRY_SIZE)[-1].last_offset

    def _read(self, start: int = 0) -> list[AbortedTxn]:
        if self.size <= start:
            return []
        with open(self.path, "rb") as file:
            file.seek(start)
            data = file.read(self.size - start)
        whole = len(data) - len(data) % ENTRY_SIZE
        return [AbortedTxn(*fields[1:]) for fields in _ENTRY.iter_unpack(data[:whole])]

    def append(self, txn: AbortedTxn) -> None:
        """Add the entry of the transaction aborted last; ValueError unless its marker follows
        the last entry's (Kafka's check)."""
        if self._last_offset is not None and txn.last_offset <= self._last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {txn.last_offset} does not follow the "
                             f"last one, ending at {self._last_offset}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, _ENTRY.pack(_VERSION, *txn), self.size)
        finally:
            os.close(fd)
        self.size += ENTRY_SIZE
        self._last_offset = txn.last_offset

    def entries(self) -> list[AbortedTxn]:
        return self._read()

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The transactions that overlap ``[fetch_offset, upper_bound_offset)``, and whether the
        search may stop here: an entry whose last stable offset reaches the bound says no later
        marker ends a transaction that started below it (Kafka's collectAbortedTxns)."""
        found = []
        for txn in self._read():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or above ``offset``."""
        kept = [txn for txn in self._read() if txn.last_offset < offset]
        if len(kept) * ENTRY_SIZE != self.size:
            self._truncate(len(kept) * ENTRY_SIZE)
            self._last_offset = kept[-1].last_offset if kept else None

    def reset(self) -> None:
        """Empty it (recovery rebuilds it)."""
        if self.size or self.path.exists():
            self._truncate(0)
        self._last_offset = None

    def _truncate(self, size: int) -> None:
        os.truncate(self.path, size)
        self.size = size

    def sanity_check(self) -> None:
        """CorruptIndex for a partial entry or one ending before the segment starts."""
        if self.size % ENTRY_SIZE:
            raise CorruptIndex(f"{self.path}: {self.size} bytes is no whole number of entries")
        for txn in self._read():
            if txn.last_offset < self.base_offset:
                raise CorruptIndex(f"{self.path}: aborted transaction {txn} ends before the segment's base "
                                   f"offset {self.base_offset}")

    def flush(self) -> None:
        if self.size:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
