"""All partitions' logs across the broker's log dirs, and the per-dir checkpoint files.

Each log dir holds partition directories ``<topic>-<partition>`` plus::

    recovery-point-offset-checkpoint   offset below which each log is fsynced
    log-start-offset-checkpoint        each log's first offset (advanced by retention)
    replication-offset-checkpoint      each log's high watermark
    .kafka_cleanshutdown               present only after a clean shutdown

(text format: storage.checkpoint). Topic overrides live with the data, in every partition
directory of the topic as ``topic-config.properties`` (``name=value`` lines, written
atomically), so ``topics()`` and the overrides both come from the directories alone and a
copied partition keeps its configuration. Likewise the topic id (``partition.metadata``,
storage.partition_metadata): one new id per created topic, written into each of its
partitions; partitions from before topic ids get their topic's id at load (a sibling
partition's, or one new id for the whole topic). Directories that are not partitions are
skipped; ``<topic>-<p>.<id>-delete`` directories (a topic deletion cut short) are finished off.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import traceback
import uuid
from pathlib import Path
from typing import Callable

from minikafka.storage.checkpoint import CorruptCheckpoint, OffsetCheckpointFile, write_atomically
from minikafka.storage.clock import Clock
from minikafka.storage.config import LogConfig
from minikafka.storage.log import Log
from minikafka.storage.names import (DELETE_DIR_SUFFIX, delete_dir_name, parse_partition_dir_name,
                           partition_dir_name, validate_topic_name)
from minikafka.storage.partition_metadata import new_topic_id, read_topic_id
from minikafka.storage.types import CorruptPartitionMetadata, SegmentInfo, TopicAlreadyExists, UnknownTopic

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
TOPIC_CONFIG_FILE = "topic-config.properties"

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpoint as exc:
        # Written atomically, so this is damage from outside; missing values are safe
        # (recovery point 0 = scan everything, log start = first segment).
        logger.warning("ignoring unreadable checkpoint: %s", exc)
        return {}


def _read_overrides(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    overrides = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            overrides[name.strip()] = value.strip()
    return overrides


def _format_overrides(overrides: dict[str, str]) -> bytes:
    return "".join(f"{name}={value}\n" for name, value in sorted(overrides.items())).encode()


class LogManager:
    """Creates, loads, checkpoints, cleans and deletes the logs under ``log_dirs``.

    ``on_segment_closed`` is installed on every log; ``may_delete_segment`` is asked before
    retention deletes a segment (the export hand-off can veto). Methods are thread-safe.
    """

    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        clock: Clock,
        on_segment_closed: Callable[[SegmentInfo], None] | None = None,
        may_delete_segment: Callable[[SegmentInfo], bool] | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.clock = clock
        self.on_segment_closed = on_segment_closed
        self.may_delete_segment = may_delete_segment
        self._logs: dict[TopicPartition, Log] = {}
        self._overrides: dict[str, dict[str, str]] = {}
        self._lock = threading.RLock()

    # -- start and stop ----------------------------------------------------------------------

    def startup(self) -> None:
        """Load every partition in every log dir; recover those after an unclean stop.

        Raises CorruptPartitionMetadata when a ``partition.metadata`` is unreadable or the
        partitions of one topic hold different ids (the topic's identity is unknown then).
        """
        with self._lock:
            for log_dir in self.log_dirs:
                log_dir.mkdir(parents=True, exist_ok=True)
            topic_ids = self._topic_ids()
            for log_dir in self.log_dirs:
                marker = log_dir / CLEAN_SHUTDOWN_FILE
                clean = marker.exists()
                recovery_points = _read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
                log_starts = _read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
                high_watermarks = _read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
                for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                    if entry.name.endswith(DELETE_DIR_SUFFIX):
                        shutil.rmtree(entry.path, ignore_errors=True)
                        continue
                    parsed = parse_partition_dir_name(entry.name)
                    if parsed is None:
                        logger.warning("skipping %s: not a <topic>-<partition> directory", entry.path)
                        continue
                    if parsed in self._logs:
                        raise RuntimeError(f"partition {entry.name} is in two log dirs: "
                                           f"{self._logs[parsed].dir.parent} and {log_dir}")
                    topic, partition = parsed
                    overrides = _read_overrides(Path(entry.path) / TOPIC_CONFIG_FILE)
                    try:
                        config = LogConfig.from_topic_configs(self.default_config, overrides)
                    except ValueError as exc:
                        logger.warning("%s: ignoring stored overrides (%s)", entry.path, exc)
                        overrides, config = {}, self.default_config
                    log = Log(Path(entry.path), topic, partition, config, self.clock,
                              recovery_point=recovery_points.get(parsed, 0),
                              log_start_offset=log_starts.get(parsed, 0),
                              high_watermark=high_watermarks.get(parsed, 0),
                              needs_recovery=not clean, topic_id=topic_ids[topic])
                    self._install(log)
                    self._overrides.setdefault(topic, overrides)
                marker.unlink(missing_ok=True)
            self.checkpoint()

    def _topic_ids(self) -> dict[str, str]:
        """Each topic's id as its partition directories record it, or a new one when none does."""
        found: dict[str, dict[str, Path]] = {}  # topic -> {id: a partition holding it}
        for log_dir in self.log_dirs:
            for entry in os.scandir(log_dir):
                parsed = parse_partition_dir_name(entry.name)
                if parsed is None or not entry.is_dir(follow_symlinks=False):
                    continue
                ids = found.setdefault(parsed[0], {})
                topic_id = read_topic_id(Path(entry.path))
                if topic_id is not None:
                    ids.setdefault(topic_id, Path(entry.path))
        chosen = {}
        for topic, ids in found.items():
            if len(ids) > 1:
                described = ", ".join(f"{topic_id} in {path}" for topic_id, path in sorted(ids.items()))
                raise CorruptPartitionMetadata(f"partitions of topic {topic!r} hold different topic ids: {described}")
            chosen[topic] = next(iter(ids), None) or new_topic_id()
        return chosen

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown markers."""
        with self._lock:
            for log in self._logs.values():
                log.flush()
            self.checkpoint()
            for log in self._logs.values():
                log.close()
            for log_dir in self.log_dirs:
                write_atomically(log_dir / CLEAN_SHUTDOWN_FILE, b"")
            self._logs.clear()

    # -- topics ------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def topics(self) -> dict[str, int]:
        """Topic -> number of partitions, from the partitions present."""
        with self._lock:
            counts: dict[str, int] = {}
            for topic, _ in self._logs:
                counts[topic] = counts.get(topic, 0) + 1
            return counts

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """The overrides the topic was created with ({} for none); UnknownTopic if absent."""
        with self._lock:
            if topic not in self._overrides:
                raise UnknownTopic(topic)
            return dict(self._overrides[topic])

    def create_topic(self, topic: str, partitions: int, overrides: dict[str, str]) -> list[Log]:
        """Create ``partitions`` empty logs with ``overrides`` persisted beside them.

        Raises InvalidTopicName, ValueError (bad partition count or config) or
        TopicAlreadyExists, all before touching the filesystem; OSError when the disk (or the
        open-file limit) fails midway, after removing the partitions made so far, so a
        failed creation never leaves half a topic to load at the next start.
        """
        validate_topic_name(topic)
        if not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"number of partitions must be at least 1, not {partitions!r}")
        overrides = {str(k): str(v) for k, v in overrides.items()}
        config = LogConfig.from_topic_configs(self.default_config, overrides)
        with self._lock:
            if topic in self._overrides:
                raise TopicAlreadyExists(f"topic {topic!r} already exists")
            created: list[Log] = []
            half_made: int | None = None  # the partition whose dir exists but whose log does not
            topic_id = new_topic_id()
            try:
                for partition in range(partitions):
                    log_dir = self._least_loaded_dir()
                    directory = log_dir / partition_dir_name(topic, partition)
                    directory.mkdir()
                    half_made = partition
                    write_atomically(directory / TOPIC_CONFIG_FILE, _format_overrides(overrides))
                    log = Log.create(directory, topic, partition, config, self.clock, topic_id=topic_id)
                    half_made = None
                    self._install(log)
                    created.append(log)
            except BaseException as exc:
                # The files a half-made log opened are reachable only through the traceback's
                # frames: clearing them closes those descriptors, which the removal below may
                # need when the open-file limit is what failed.
                traceback.clear_frames(exc.__traceback__)
                for log in created:
                    self._remove(log)
                if half_made is not None:
                    self._bury(directory, topic, half_made)
                raise
            self._overrides[topic] = overrides
            return created

    def create_log(self, topic: str, partition: int, overrides: dict[str, str]) -> Log:
        """The replica of one partition, created empty if this broker does not hold it yet
        (a cluster assigns partitions to brokers one by one). The topic's overrides are taken
        as given (the cluster's copy wins over a stale local one); the topic id is the one
        other local partitions of the topic hold, or a new one."""
        validate_topic_name(topic)
        overrides = {str(k): str(v) for k, v in overrides.items()}
        config = LogConfig.from_topic_configs(self.default_config, overrides)
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing
            siblings = [log for (name, _), log in self._logs.items() if name == topic]
            topic_id = siblings[0].topic_id if siblings else new_topic_id()
            directory = self._least_loaded_dir() / partition_dir_name(topic, partition)
            directory.mkdir()
            try:
                write_atomically(directory / TOPIC_CONFIG_FILE, _format_overrides(overrides))
                log = Log.create(directory, topic, partition, config, self.clock, topic_id=topic_id)
            except BaseException as exc:
                traceback.clear_frames(exc.__traceback__)
                self._bury(directory, topic, partition)
                raise
            self._install(log)
            self._overrides[topic] = overrides
            return log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove one partition's replica from disk; False when this broker has none."""
        with self._lock:
            log = self._logs.get((topic, partition))
            if log is None:
                return False
            self._remove(log)
            if not any(name == topic for name, _ in self._logs):
                self._overrides.pop(topic, None)
            return True

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's partitions from disk (UnknownTopic if there are none)."""
        validate_topic_name(topic)
        with self._lock:
            doomed = [log for (name, _), log in self._logs.items() if name == topic]
            if not doomed:
                raise UnknownTopic(topic)
            for log in doomed:
                self._remove(log)
            del self._overrides[topic]

    def _remove(self, log: Log) -> None:
        """Drop a partition from the map and from disk. Its dir is renamed first (a rename
        needs no descriptor), so a crash or a failing removal leaves a "-delete" dir that
        the next start removes, never a partition to load."""
        log.dir = self._bury(log.dir, log.topic, log.partition, remove=False)
        del self._logs[(log.topic, log.partition)]
        log.delete()

    @staticmethod
    def _bury(directory: Path, topic: str, partition: int, *, remove: bool = True) -> Path:
        graveyard = directory.with_name(delete_dir_name(topic, partition, uuid.uuid4().hex))
        os.replace(directory, graveyard)
        if remove:
            shutil.rmtree(graveyard, ignore_errors=True)
        return graveyard

    def _install(self, log: Log) -> None:
        log.on_segment_closed = self.on_segment_closed
        self._logs[(log.topic, log.partition)] = log

    def _least_loaded_dir(self) -> Path:
        load = {d: 0 for d in self.log_dirs}
        for log in self._logs.values():
            if log.dir.parent in load:
                load[log.dir.parent] += 1
        return min(self.log_dirs, key=lambda d: load[d])

    # -- periodic work -----------------------------------------------------------------------

    def cleanup(self) -> int:
        """One retention pass over every log; returns the number of segments deleted."""
        deleted = 0
        for log in self.logs():
            deleted += log.delete_expired_segments(self.may_delete_segment)
        if deleted:
            self._write_checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda log: log.log_start_offset)
        return deleted

    def flush_due(self) -> None:
        """fsync the segments rolls have closed, and flush the logs whose ``flush.ms`` has
        passed (the broker runs this every ``log.flush.scheduler.interval.ms``, off its
        event loop)."""
        for log in self.logs():
            try:
                log.flush_rolled_segments()
                log.flush_if_due()
            except OSError:  # one failing disk (or a topic deleted meanwhile) spares the rest
                logger.exception("%s-%d: flush failed", log.topic, log.partition)

    def checkpoint(self) -> None:
        """Write recovery points, log start offsets and high watermarks of every log dir."""
        self._write_checkpoint(RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point)
        self._write_checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda log: log.log_start_offset)
        self._write_checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda log: log.high_watermark)

    def checkpoint_high_watermarks(self) -> None:
        """Write ``replication-offset-checkpoint`` alone (a cluster does it more often than the
        other checkpoints: a restarted follower truncates to it when no epoch helps)."""
        self._write_checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda log: log.high_watermark)

    def _write_checkpoint(self, name: str, value: Callable[[Log], int]) -> None:
        with self._lock:
            for log_dir in self.log_dirs:
                offsets = {(log.topic, log.partition): value(log)
                           for log in self._logs.values() if log.dir.parent == log_dir}
                OffsetCheckpointFile(log_dir / name).write(offsets)
