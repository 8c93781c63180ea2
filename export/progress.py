"""Export progress: how far each incarnation of each topic-partition has been exported, durably.

Layout under the export's output directory::

    OUT/_minikafka/progress/<topic>-<partition>   text: "<next offset> <generation> <topic id>\\n"
    OUT/_minikafka/incarnations                   text: "<topic> <generation> <topic id>\\n" per line
    OUT/_minikafka/lock                           flock'ed by the running exporter
    OUT/_minikafka/staging/                       Spark's output before it is renamed into place

A progress file holds the offset after the last exported record (Kafka's committed-offset
convention: the next offset to export) of one incarnation of the partition: a topic deleted
and created again under the same name has a new topic id (storage's ``partition.metadata``)
and starts from nothing. Each topic id the exporter meets gets a generation, the first field
of the output file names, from ``incarnations``: ``FIRST_GENERATION`` for the first
id of a topic, one more than the highest so far for each later one, so two incarnations never
write the same file name. A progress file from before topic ids (``"<next offset>\\n"``)
counts as generation 1, the incarnation whose id the exporter meets first (documented limit:
a topic deleted and created again before that cannot be told apart). A log directory from
before topic ids (no id yet) counts as the newest incarnation recorded.

Both files are replaced with storage's ``write_atomically`` (temporary file, fsync, rename,
directory fsync), so a crash leaves the old content or the new one. The exporter records a
new incarnation before it writes any of its files, and progress only after the output files
it covers are fsynced and renamed into place. The leading underscore keeps Spark and Hive
from reading ``_minikafka`` as data.
"""

from __future__ import annotations

import fcntl
import re
from dataclasses import dataclass, field
from pathlib import Path

from minikafka.storage.checkpoint import write_atomically

__all__ = ["FIRST_GENERATION", "ExportBusy", "ExportProgress", "ExportedState", "PartitionProgress"]

FIRST_GENERATION = 1  # also the generation of every file written before topic ids
META_DIR = "_minikafka"
_PROGRESS_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_NO_TOPIC_ID = "-"  # in a progress file: the log directory had no topic id yet


@dataclass(frozen=True)
class PartitionProgress:
    """The next offset to export of one partition, and the incarnation it belongs to."""

    next_offset: int
    generation: int
    topic_id: str | None


@dataclass
class ExportedState:
    """What an output directory records: progress per partition, generations per topic id."""

    progress: dict[tuple[str, int], PartitionProgress] = field(default_factory=dict)
    incarnations: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> {id: generation}

    def generation(self, topic: str, topic_id: str | None) -> int:
        """The generation of the files of this incarnation of ``topic``."""
        known = self.incarnations.get(topic, {})
        if topic_id in known:
            return known[topic_id]
        if topic_id is None or not known:
            return max(known.values(), default=FIRST_GENERATION)
        return max(known.values()) + 1

    def is_new(self, topic: str, topic_id: str | None) -> bool:
        """True for a topic id that has no generation recorded yet."""
        return topic_id is not None and topic_id not in self.incarnations.get(topic, {})

    def newest_generation(self, topic: str) -> int:
        return max(self.incarnations.get(topic, {}).values(), default=FIRST_GENERATION)

    def exported_up_to(self, topic: str, partition: int, topic_id: str | None) -> int | None:
        """The next offset to export of this incarnation of the partition; None if none of
        it has been exported (its progress, if any, is an older incarnation's)."""
        recorded = self.progress.get((topic, partition))
        if recorded is None or recorded.generation != self.generation(topic, topic_id):
            return None
        return recorded.next_offset

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """``(topic, partition) -> next offset`` as recorded, whatever the incarnation."""
        return {key: recorded.next_offset for key, recorded in self.progress.items()}


class ExportBusy(RuntimeError):
    """Another exporter holds the lock on this output directory."""


class ExportProgress:
    """The recorded progress of every topic-partition exported to one output directory."""

    def __init__(self, out_dir: Path | str) -> None:
        self.out_dir = Path(out_dir)
        self.meta_dir = self.out_dir / META_DIR
        self.progress_dir = self.meta_dir / "progress"
        self.incarnations_path = self.meta_dir / "incarnations"
        self.staging_dir = self.meta_dir / "staging"
        self._lock_file = None

    def state(self) -> ExportedState:
        """Everything recorded so far (empty for a new output directory)."""
        state = ExportedState()
        if self.progress_dir.is_dir():
            for path in self.progress_dir.iterdir():
                match = _PROGRESS_NAME.match(path.name)
                if match is None:
                    continue  # a temporary file left by a crash
                fields = path.read_text().split()
                if len(fields) == 1:  # written before topic ids
                    recorded = PartitionProgress(int(fields[0]), FIRST_GENERATION, None)
                else:
                    next_offset, generation, topic_id = fields
                    recorded = PartitionProgress(int(next_offset), int(generation),
                                                 None if topic_id == _NO_TOPIC_ID else topic_id)
                state.progress[(match["topic"], int(match["partition"]))] = recorded
        state.incarnations = self._incarnations()
        return state

    def _incarnations(self) -> dict[str, dict[str, int]]:
        try:
            text = self.incarnations_path.read_text()
        except FileNotFoundError:
            return {}
        incarnations: dict[str, dict[str, int]] = {}
        for line in text.splitlines():
            if line.strip():
                topic, generation, topic_id = line.split()
                incarnations.setdefault(topic, {})[topic_id] = int(generation)
        return incarnations

    def record(self, topic: str, partition: int, next_offset: int, generation: int,
               topic_id: str | None) -> None:
        """Durably record that every offset below ``next_offset`` of this incarnation has been exported."""
        self.progress_dir.mkdir(parents=True, exist_ok=True)
        text = f"{next_offset} {generation} {topic_id or _NO_TOPIC_ID}\n"
        write_atomically(self.progress_dir / f"{topic}-{partition}", text.encode())

    def record_incarnation(self, topic: str, topic_id: str, generation: int) -> None:
        """Durably give ``topic_id`` its generation (before any of its files is written)."""
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        incarnations = self._incarnations()
        incarnations.setdefault(topic, {})[topic_id] = generation
        lines = "".join(f"{name} {g} {i}\n" for name, known in sorted(incarnations.items())
                        for i, g in sorted(known.items(), key=lambda item: item[1]))
        write_atomically(self.incarnations_path, lines.encode())

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
