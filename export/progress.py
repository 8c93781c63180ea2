"""Export progress: how far each topic-partition has been exported, durably.

Layout under the export's output directory::

    OUT/_minikafka/progress/<topic>-<partition>   text: "<next offset>\\n"
    OUT/_minikafka/lock                           flock'ed by the running exporter
    OUT/_minikafka/staging/                       Spark's output before it is renamed into place

A progress file holds the offset after the last exported record (Kafka's committed-offset
convention: the next offset to export). It is replaced with storage's ``write_atomically``
(temporary file, fsync, rename, directory fsync), so a crash leaves the old value or the new
one. The exporter writes it only after the output files it covers are fsynced and renamed
into place. The leading underscore keeps Spark and Hive from reading ``_minikafka`` as data.
"""

from __future__ import annotations

import fcntl
import re
from pathlib import Path

from storage.checkpoint import write_atomically

__all__ = ["ExportBusy", "ExportProgress"]

META_DIR = "_minikafka"
_PROGRESS_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


class ExportBusy(RuntimeError):
    """Another exporter holds the lock on this output directory."""


class ExportProgress:
    """The recorded progress of every topic-partition exported to one output directory."""

    def __init__(self, out_dir: Path | str) -> None:
        self.out_dir = Path(out_dir)
        self.meta_dir = self.out_dir / META_DIR
        self.progress_dir = self.meta_dir / "progress"
        self.staging_dir = self.meta_dir / "staging"
        self._lock_file = None

    def committed(self) -> dict[tuple[str, int], int]:
        """``(topic, partition) -> next offset to export`` for every partition exported so far."""
        result = {}
        if not self.progress_dir.is_dir():
            return result
        for path in self.progress_dir.iterdir():
            match = _PROGRESS_NAME.match(path.name)
            if match is None:
                continue  # a temporary file left by a crash
            result[(match["topic"], int(match["partition"]))] = int(path.read_text().strip())
        return result

    def record(self, topic: str, partition: int, next_offset: int) -> None:
        """Durably record that every offset below ``next_offset`` has been exported."""
        self.progress_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self.progress_dir / f"{topic}-{partition}", f"{next_offset}\n".encode())

    def lock(self) -> None:
        """Take the output directory's exclusive lock (released by ``unlock`` or process death)."""
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        lock_file = open(self.meta_dir / "lock", "a+b")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            raise ExportBusy(f"another export is running into {self.out_dir}") from None
        self._lock_file = lock_file

    def unlock(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None
