"""Snapshots of in-memory state, named by the log offset they cover (KIP-630, seed 001).

A component whose state is a fold over an event log (committed offsets, groups) writes its
state now and then with :meth:`SnapshotStore.write`; at start-up it loads the newest snapshot
it can use from :meth:`SnapshotStore.newest_first` and replays only the events from that
offset on.

File ``<directory>/<offset, 20 digits>.snapshot``, big-endian::

    magic      8 bytes   b"MKSNAP\\x00\\x01"
    offset     int64     the offset the snapshot covers (must match the file name)
    length     int64     number of data bytes
    crc        uint32    CRC-32 of offset, length and data
    data       length bytes, opaque to storage

Written to ``.tmp``, fsynced and renamed; a torn or corrupt file fails its checksum and is
skipped, so readers get the next older snapshot. A snapshot whose checksum holds but whose data
its owner cannot decode (a format from another version) is moved out of the way with
:meth:`SnapshotStore.set_aside` to ``<name>.unreadable``: kept for an operator, never listed
or deleted here.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from minikafka.storage.checkpoint import fsync_dir, write_atomically

SNAPSHOT_SUFFIX = ".snapshot"
SET_ASIDE_SUFFIX = ".unreadable"
_MAGIC = b"MKSNAP\x00\x01"
_HEADER = struct.Struct(">8sqqI")
_NAME = re.compile(r"(\d{20})\.snapshot")

logger = logging.getLogger(__name__)


class SnapshotStore:
    """The snapshots in one directory (created if missing)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(f"*{SNAPSHOT_SUFFIX}.tmp"):
            leftover.unlink(missing_ok=True)  # a write that crashed before its rename

    def write(self, offset: int, data: bytes) -> Path:
        """Durably store ``data`` as the snapshot at ``offset``, replacing one already there."""
        if offset < 0:
            raise ValueError(f"snapshot offset must be >= 0, not {offset}")
        body = struct.pack(">qq", offset, len(data))
        crc = zlib.crc32(data, zlib.crc32(body))
        path = self._path(offset)
        write_atomically(path, _HEADER.pack(_MAGIC, offset, len(data), crc) + data)
        return path

    def offsets(self) -> list[int]:
        """Offsets of the snapshot files present, valid or not, oldest first."""
        found = []
        for entry in os.scandir(self.directory):
            match = _NAME.fullmatch(entry.name)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def newest_first(self) -> Iterator[tuple[int, bytes]]:
        """``(offset, data)`` of each snapshot that verifies, newest first (files that fail
        their checksum are logged and skipped). Read lazily: a caller that can use the newest
        never reads the older ones."""
        for offset in reversed(self.offsets()):
            data = self._read_valid(offset)
            if data is not None:
                yield offset, data

    def latest(self) -> tuple[int, bytes] | None:
        """``(offset, data)`` of the newest snapshot that verifies; None if there is none."""
        return next(self.newest_first(), None)

    def set_aside(self, offset: int) -> Path:
        """Rename the snapshot at ``offset`` to ``<name>.unreadable`` and return the new path:
        out of every listing, never deleted here, there for an operator to inspect or put
        back."""
        path = self._path(offset)
        aside = path.with_name(path.name + SET_ASIDE_SUFFIX)
        os.replace(path, aside)
        fsync_dir(self.directory)
        return aside

    def remove_older_than(self, offset: int) -> int:
        """Delete snapshots below ``offset``; returns how many were removed."""
        return self._remove([older for older in self.offsets() if older < offset])

    def remove_newer_than(self, offset: int) -> int:
        """Delete snapshots above ``offset``; returns how many were removed."""
        return self._remove([newer for newer in self.offsets() if newer > offset])

    def _remove(self, offsets: list[int]) -> int:
        for offset in offsets:
            self._path(offset).unlink(missing_ok=True)
        if offsets:
            fsync_dir(self.directory)
        return len(offsets)

    def _path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def _read_valid(self, offset: int) -> bytes | None:
        path = self._path(offset)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) < _HEADER.size:
            logger.warning("skipping truncated snapshot %s", path)
            return None
        magic, stored_offset, length, crc = _HEADER.unpack_from(raw)
        data = raw[_HEADER.size:]
        if (magic != _MAGIC or stored_offset != offset or length != len(data)
                or zlib.crc32(data, zlib.crc32(raw[8:24])) != crc):
            logger.warning("skipping corrupt snapshot %s", path)
            return None
        return data
