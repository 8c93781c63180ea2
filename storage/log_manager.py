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
skipped; ``<topic>-<p>.<id>-delete`` directories (a topic deletion or creation cut short) are
finished off.

A topic's creation and deletion rename one partition directory at a time, so each is made
all or nothing across a crash by an intent: ``.topic-intent-<id>`` in the first log dir,
holding ``create <topic>`` or ``delete <topic>``, written durably before the first rename and
removed after the last. A start that finds one removes every partition of that topic (a
creation is rolled back, a deletion finished) before loading anything.

Creating a topic costs what creating its files costs, and one cost dominates where the
filesystem has no journal (ext4 as the development machines mount it): a new inode is found
by scanning its block group past every inode deleted there in the last one to six minutes,
which near a log dir where topics (or anything else) come and go made each file creation
cost up to a millisecond instead of ~15 us. So creation makes as few inodes as it can (the
files all partitions of a topic start with are hard links to one copy, _link_files) and
makes them away from recent deletions (log dirs carry ext4's top-of-hierarchies flag,
_mark_top_of_hierarchies, so the directory a topic's partitions are made in is placed in a
block group with more free inodes than average).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import resource
import shutil
import struct
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None

from minikafka.storage.checkpoint import (CorruptCheckpoint, OffsetCheckpointFile, fsync_all, fsync_dir, run_at_once,
                                         sync_filesystem, write_atomically)
from minikafka.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from minikafka.storage.clock import Clock
from minikafka.storage.config import LogConfig
from minikafka.storage.log import Log
from minikafka.storage.segment import newest_segment_magic
from minikafka.storage.names import (DELETE_DIR_SUFFIX, delete_dir_name, future_dir_name, parse_future_dir_name,
                                     parse_partition_dir_name, partition_dir_name, validate_topic_name)
from minikafka.storage.partition_metadata import (PARTITION_METADATA_FILE, format_topic_id, new_topic_id, read_topic_id,
                                                   write_topic_id)
from minikafka.storage.types import (CorruptPartitionMetadata, SegmentInfo, TooManyPartitions, TopicAlreadyExists,
                                     UnknownTopic)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
TOPIC_CONFIG_FILE = "topic-config.properties"
# What a log of magic 0/1 data without a format override keeps writing (see _keeping_old_format).
OLD_LOG_FORMAT_VERSION = "0.10.2"
TOPIC_INTENT_PREFIX = ".topic-intent-"
# Each checkpoint file of a log dir, and what it records of each of its logs.
CHECKPOINTS: dict[str, Callable[[Log], int]] = {
    RECOVERY_POINT_CHECKPOINT: lambda log: log.recovery_point,
    LOG_START_OFFSET_CHECKPOINT: lambda log: log.log_start_offset,
    REPLICATION_OFFSET_CHECKPOINT: lambda log: log.high_watermark,
}

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# What one open partition costs the process: its active segment's .log file, plus one
# descriptor and one memory map held by each of its two mapped indexes (mmap keeps a dup of
# the descriptor). Closed segments keep their .log open too, but a new topic has none.
FILES_PER_PARTITION = 3
MAPS_PER_PARTITION = 2
# Partitions made in one directory before creation starts another (see _make_partitions):
# few enough that the inodes a deleted topic leaves in one block group are a short scan
# for the next creation there (see the module docstring), many enough that placing the
# directories costs little next to making the partitions. bench_topics, back-to-back runs
# of 5,000 partitions (each deleting the last one's): 16 -> 1,717-1,987 partitions/s,
# 32 -> 1,434-2,006, 128 -> 1,230-1,950, 512 -> 758-1,130, one for the whole topic ->
# 557-2,728, one per partition -> 891-1,692.
WORKSHOP_PARTITIONS = 16
# Up to this many partitions, a creation makes what it created durable by fsyncing just that
# (the distinct files, each partition directory, then the log dirs after the renames);
# beyond it by one syncfs of each log dir's filesystem. syncfs writes out everything dirty
# on the filesystem, the broker's own unflushed segments (Kafka leaves flushing to the page
# cache) and other processes' files included, so its cost is not ours to bound: 0.4 ms on an
# idle disk, 30-50 ms with 64 MiB of produced data not yet written back, where the 4 fsyncs
# of a one-partition topic cost ~1 ms either way. Each partition directory is one fsync
# (~0.2 ms), so past a few dozen partitions the single syncfs is the cheaper bet.
FSYNC_EACH_MAX_PARTITIONS = 32
# Descriptors and maps kept free for connections, checkpoints, rolls and the interpreter.
RESERVED_FILES = 512
RESERVED_MAPS = 1024
# Counting the process's maps reads /proc/self/maps: ~0.5 ms of kernel time for a fresh
# broker, growing with the maps (two per partition), and most of what an auto-created
# topic's room check cost. So a creation estimates them from the last count plus the
# partitions opened (or closed) since, and counts again only where the estimate could
# mislead: when it leaves less than MAPS_RECOUNT_MARGIN maps beyond RESERVED_MAPS after the
# creation, or when the count is older than MAPS_COUNT_MAX_AGE_S. The maps others make in
# between (an old segment's index mapped for a read, a thread's stack, the allocator's
# arenas) are what the reserve is for. Kafka checks nothing: its mmap fails
# (OutOfMemoryError: Map failed) midway; the check is ours, to refuse a topic cleanly.
MAPS_RECOUNT_MARGIN = 1024
MAPS_COUNT_MAX_AGE_S = 10.0


def _count(path: str, *, lines: bool) -> int | None:
    try:
        if lines:
            with open(path, "rb") as file:
                return sum(1 for _ in file)
        return len(os.listdir(path))
    except OSError:  # no /proc (not Linux): only the rlimit bounds us
        return None


def _limit_for_maps() -> int | None:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return None


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


def _keeping_old_format(config: LogConfig, overrides: dict[str, str], directory: Path) -> LogConfig:
    """A log written in magic 0/1 whose topic names no ``message.format.version`` goes on in
    that format (0.10.2), whatever the broker default: it was created before this broker stored
    magic 2 (the default then), and old consumers and the export readers of such a topic must
    not meet record batches because the broker was upgraded. The broker default applies to new
    and empty logs; an override changes any log (what was written stays: readers take mixed
    segments, as Kafka's, where the setting decides only what is written)."""
    if "message.format.version" in overrides or config.record_magic < 2:
        return config
    magic = newest_segment_magic(directory)
    if magic is None or magic >= 2:
        return config
    return config._replace(message_format_version=OLD_LOG_FORMAT_VERSION)


def _format_overrides(overrides: dict[str, str]) -> bytes:
    return "".join(f"{name}={value}\n" for name, value in sorted(overrides.items())).encode()


# chattr +T (ext2/3/4's "top of directory hierarchies"), through the FS_IOC_{GET,SET}FLAGS
# ioctls, whose argument is an int despite the size their numbers encode.
FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_TOPDIR_FL = 0x00020000


def _mark_top_of_hierarchies(directory: Path) -> None:
    """Have ext4 place each directory made in ``directory`` as it places top-level ones: in a
    block group with more free inodes than average, not next to the log dir (see the module
    docstring for why). Every partition is a hierarchy of its own, so no locality is lost.
    Filesystems without the flag, and a log dir we may not change, are left as they are."""
    if fcntl is None:
        return
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        flags = struct.unpack("i4x", fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8)))[0]
        if not flags & FS_TOPDIR_FL:
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i4x", flags | FS_TOPDIR_FL))
    except OSError as exc:
        logger.debug("%s: left without the top-directory flag (%s)", directory, exc)
    finally:
        os.close(fd)


def _unique_id() -> str:
    """32 random hex digits, as Kafka's uuid in a -delete directory's name (os.urandom rather
    than the uuid module, whose import would cost every start-up ~0.7 ms)."""
    return os.urandom(16).hex()


def _write_files(directory: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        with open(directory / name, "wb") as file:
            file.write(data)


def _link_files(source: Path, directory: Path, files: dict[str, bytes]) -> bool:
    """Hard-link ``files`` from ``source`` into ``directory``; False (after removing the links
    made) where the filesystem refuses, e.g. EMLINK once a file has 65,000 links on ext4.

    A link allocates no inode (see the module docstring for why that matters). Sharing is
    safe because these files are only ever replaced (write_atomically renames a new file
    over the name, which unshares it), never written in place."""
    made = []
    try:
        for name in files:
            os.link(source / name, directory / name)
            made.append(directory / name)
    except OSError:
        for path in made:
            path.unlink()
        return False
    return True


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
        # Replicas being moved to another log dir (AlterReplicaLogDirs): the copy, in its
        # ``-future`` directory, of the log of the same key in _logs. See start_move.
        self._futures: dict[TopicPartition, Log] = {}
        # Where replicas not here yet are to be made when they come (a move asked for before
        # the replica existed: Kafka's preferredLogDirs).
        self._preferred_dirs: dict[TopicPartition, Path] = {}
        # Partitions per log dir, kept as logs come and go, for placing new ones where there
        # are fewest without a walk over every log at each creation.
        self._partitions_in_dir = dict.fromkeys(self.log_dirs, 0)
        # The last count of the process's maps: (maps, partitions open then, time.monotonic()).
        self._maps_counted: tuple[int, int, float] | None = None
        self._overrides: dict[str, dict[str, str]] = {}
        self._creating: set[str] = set()  # topics whose partitions are being made, unlocked
        # Partitions deleted since the checkpoints were last all written: their entries may
        # still be on disk, and a new partition of the same name must not load them.
        self._unwritten_deletions: set[TopicPartition] = set()
        # What topics created with fsync_now=False made and nobody has fsynced yet: files and
        # partition directories, then the log dirs that hold them (sync_created_partitions).
        self._unsynced_created: tuple[list[Path], list[Path], set[Path]] = ([], [], set())
        self._lock = threading.RLock()

    # -- start and stop ----------------------------------------------------------------------

    def startup(self) -> None:
        """Load every partition in every log dir; recover those after an unclean stop.

        The clean-shutdown marker is removed durably (a crash from now on must be recovered
        from). Checkpoints are written here only after a recovery or when they name partitions
        that are gone: after a clean stop they hold what the shutdown wrote, and a new log
        dir needs none until it has logs (a missing checkpoint reads as empty; the periodic
        checkpoint writes them), which spares a start-up six fsyncs.

        Raises CorruptPartitionMetadata when a ``partition.metadata`` is unreadable or the
        partitions of one topic hold different ids (the topic's identity is unknown then).
        """
        with self._lock:
            for log_dir in self.log_dirs:
                log_dir.mkdir(parents=True, exist_ok=True)
                _mark_top_of_hierarchies(log_dir)
            self._finish_intents()
            topic_ids = self._topic_ids()
            recovered = stale = False
            futures: list[tuple[Path, TopicPartition, Path]] = []  # (log dir, key, directory)
            loaded: dict[Path, tuple] = {}  # log dir -> (clean, its three checkpoints)
            for log_dir in self.log_dirs:
                marker = log_dir / CLEAN_SHUTDOWN_FILE
                clean = marker.exists()
                recovery_points = _read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
                log_starts = _read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
                high_watermarks = _read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
                loaded[log_dir] = (clean, recovery_points, log_starts, high_watermarks)
                for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                    if entry.name.endswith(DELETE_DIR_SUFFIX):
                        shutil.rmtree(entry.path, ignore_errors=True)
                        continue
                    future_of = parse_future_dir_name(entry.name)
                    if future_of is not None:
                        futures.append((log_dir, future_of, Path(entry.path)))
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
                    log = self._load_log(Path(entry.path), parsed, loaded[log_dir], topic_ids.get(topic))
                    self._install(log)
                    recovered = recovered or not clean
                # Entries of partitions no longer here are a deletion the crash cut short
                # before its checkpoint rewrite (see _remove): gone before a topic of the same
                # name can be created, whose new log would otherwise take them as its own.
                present = {key for key, log in self._logs.items() if log.dir.parent == log_dir}
                stale = stale or any(key not in present for checkpoint in (recovery_points, log_starts, high_watermarks)
                                     for key in checkpoint)
                if clean:
                    marker.unlink()
                    fsync_dir(log_dir)
            recovered = self._load_futures(futures, loaded, topic_ids) or recovered
            stale = stale or bool(futures)
            if recovered or stale:
                self.checkpoint()

    def _load_log(self, directory: Path, key: TopicPartition, loaded: tuple, topic_id: str | None) -> Log:
        clean, recovery_points, log_starts, high_watermarks = loaded
        topic, partition = key
        overrides = _read_overrides(directory / TOPIC_CONFIG_FILE)
        try:
            config = LogConfig.from_topic_configs(self.default_config, overrides)
        except ValueError as exc:
            logger.warning("%s: ignoring stored overrides (%s)", directory, exc)
            overrides, config = {}, self.default_config
        config = _keeping_old_format(config, overrides, directory)
        self._overrides.setdefault(topic, overrides)
        return Log(directory, topic, partition, config, self.clock,
                   recovery_point=recovery_points.get(key, 0), log_start_offset=log_starts.get(key, 0),
                   high_watermark=high_watermarks.get(key, 0), needs_recovery=not clean, topic_id=topic_id)

    def _load_futures(self, futures: list[tuple[Path, TopicPartition, Path]], loaded: dict[Path, tuple],
                      topic_ids: dict[str, str]) -> bool:
        """The moves a stop interrupted: each is resumed, as Kafka resumes them (its future
        logs are loaded with the others and their copying goes on). A future whose replica is
        gone was cut between the two renames of finish_move, after the current directory was
        buried: the future, flushed before, holds every write, so it is the replica now and is
        renamed so. Returns whether any was loaded without a clean shutdown."""
        recovered = False
        for log_dir, key, directory in futures:
            topic, partition = key
            if key in self._futures or (key in self._logs and self._logs[key].dir.parent == log_dir):
                logger.warning("%s: a second future of %s-%d, removed", directory, topic, partition)
                self._bury(directory, topic, partition)
                continue
            if key not in self._logs:
                final = log_dir / partition_dir_name(topic, partition)
                logger.warning("%s: the move of %s-%d was cut short after its copy was complete: "
                               "the copy is the replica", directory, topic, partition)
                os.rename(directory, final)
                fsync_dir(log_dir)
                self._install(self._load_log(final, key, loaded[log_dir], topic_ids.get(topic)))
            else:
                current = self._logs[key]
                # The replica's overrides are the ones (a crash may have come before the
                # future's copy of them was written).
                write_atomically(directory / TOPIC_CONFIG_FILE, _format_overrides(self._overrides.get(topic, {})))
                future = Log(directory, topic, partition, current.config, self.clock,
                             recovery_point=loaded[log_dir][1].get(key, 0),
                             log_start_offset=loaded[log_dir][2].get(key, 0),
                             high_watermark=loaded[log_dir][3].get(key, 0),
                             needs_recovery=not loaded[log_dir][0], topic_id=current.topic_id)
                current.future = future
                self._futures[key] = future
            recovered = recovered or not loaded[log_dir][0]
        return recovered

    def _finish_intents(self) -> None:
        """Remove every partition of a topic whose creation or deletion a crash cut short
        (see the module docstring), then its intent."""
        # Written in the first log dir, looked for in all: the list may have been reordered.
        # Listed, not globbed: Path.glob's first use compiles its pattern, ~0.15 ms of every start.
        intents = sorted(log_dir / name for log_dir in self.log_dirs for name in os.listdir(log_dir)
                         if name.startswith(TOPIC_INTENT_PREFIX))
        for path in intents:
            if path.name.endswith(".tmp"):  # never published: no rename had begun
                path.unlink()
                continue
            action, _, topic = path.read_text(encoding="utf-8").strip().partition(" ")
            logger.warning("%s of topic %r was cut short: removing what there is of it",
                           "creation" if action == "create" else "deletion", topic)
            for log_dir in self.log_dirs:
                for entry in os.scandir(log_dir):
                    parsed = parse_partition_dir_name(entry.name) or parse_future_dir_name(entry.name)
                    if parsed is not None and parsed[0] == topic and entry.is_dir(follow_symlinks=False):
                        self._bury(Path(entry.path), *parsed)
                fsync_dir(log_dir)
            self._clear_intent(path)

    def _write_intent(self, action: str, topic: str) -> Path:
        path = self.log_dirs[0] / (TOPIC_INTENT_PREFIX + _unique_id())
        write_atomically(path, f"{action} {topic}\n".encode())
        return path

    @staticmethod
    def _clear_intent(path: Path) -> None:
        path.unlink()
        fsync_dir(path.parent)

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
        """Flush every log; then write the checkpoints (which record the recovery points the
        flushes moved) and close the logs (each writes its producer snapshot and trims its
        indexes), all at once; then the clean-shutdown markers. Kafka 2.8 does the same in
        that order (LogManager.shutdown), with a marker it leaves to the page cache; here
        the empty marker and its directory are fsynced, together, so that a marker read
        after a power loss vouches for checkpoints that are there."""
        with self._lock:
            self.sync_created_partitions()
            logs = [*self._logs.values(), *self._futures.values()]
            run_at_once(log.flush for log in logs)
            run_at_once([*self._checkpoint_writes(CHECKPOINTS), *(log.close for log in logs)])
            markers = [log_dir / CLEAN_SHUTDOWN_FILE for log_dir in self.log_dirs]
            for marker in markers:
                marker.touch()
            fsync_all(files=markers, directories=self.log_dirs)
            self._logs.clear()
            self._futures.clear()
            self._partitions_in_dir = dict.fromkeys(self.log_dirs, 0)

    # -- topics ------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def has_topic(self, topic: str) -> bool:
        """Whether any partition of ``topic`` is here (a creation under way is not yet)."""
        return topic in self._overrides

    # The readers take no lock: copying the dict is one step under the GIL, and the broker's
    # event loop calls them, which must never wait for a thread holding the lock over disk work.

    def logs(self) -> list[Log]:
        return list(self._logs.values())

    def topics(self) -> dict[str, int]:
        """Topic -> number of partitions, from the partitions present."""
        counts: dict[str, int] = {}
        for topic, _ in list(self._logs):
            counts[topic] = counts.get(topic, 0) + 1
        return counts

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """The overrides the topic was created with ({} for none); UnknownTopic if absent."""
        with self._lock:
            if topic not in self._overrides:
                raise UnknownTopic(topic)
            return dict(self._overrides[topic])

    def set_topic_overrides(self, topic: str, overrides: dict[str, str]) -> None:
        """Replace the topic's overrides (AlterConfigs): every local partition of it runs with
        them at once and keeps them across restarts. ValueError names a bad config (nothing
        changes then); UnknownTopic if no partition of the topic is here."""
        overrides = {str(k): str(v) for k, v in overrides.items()}
        config = LogConfig.from_topic_configs(self.default_config, overrides)
        data = _format_overrides(overrides)
        with self._lock:
            logs = [log for (name, _), log in self._logs.items() if name == topic]
            if not logs:
                raise UnknownTopic(topic)
            # A replica being moved takes its overrides with it (the future's file is the one kept).
            logs += [log for (name, _), log in self._futures.items() if name == topic]
            for log in logs:
                write_atomically(log.dir / TOPIC_CONFIG_FILE, data)
            for log in logs:
                log.reconfigure(config)
            self._overrides[topic] = overrides

    def set_default_config(self, config: LogConfig) -> None:
        """Run every log with ``config`` under its topic's overrides from now on (the broker's
        topic defaults changed while it runs: a dynamic broker config)."""
        with self._lock:
            self.default_config = config
            for (topic, _), log in self._logs.items():
                log.reconfigure(LogConfig.from_topic_configs(config, self._overrides[topic]))

    def check_partition_room(self, partitions: int) -> None:
        """Raise TooManyPartitions unless ``partitions`` more can be opened now.

        The limit is derived from what this process can hold, each new partition costing
        FILES_PER_PARTITION descriptors and MAPS_PER_PARTITION memory maps: the open-file
        limit (RLIMIT_NOFILE, soft) less the descriptors open now and RESERVED_FILES, and
        the kernel's ``vm.max_map_count`` less the maps present and RESERVED_MAPS. Refused
        up front, a count no disk could hold (a bit-flipped 10^9) costs nothing.
        """
        limits = []
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        open_files = _count("/proc/self/fd", lines=False)
        if soft != resource.RLIM_INFINITY:
            if open_files is None:
                open_files = len(self._logs) * FILES_PER_PARTITION
            room = max(soft - open_files - RESERVED_FILES, 0) // FILES_PER_PARTITION
            limits.append((room, f"each keeps {FILES_PER_PARTITION} files open (its active segment and two "
                                 f"memory-mapped indexes) and {open_files} of the open-file limit {soft} "
                                 f"are in use, {RESERVED_FILES} kept spare (raise it with ulimit -n)"))
        max_maps = _limit_for_maps()
        maps = None if max_maps is None else self._maps_in_use(max_maps, partitions)
        if max_maps is not None and maps is not None:
            room = max(max_maps - maps - RESERVED_MAPS, 0) // MAPS_PER_PARTITION
            limits.append((room, f"each maps {MAPS_PER_PARTITION} index files and {maps} of vm.max_map_count "
                                 f"{max_maps} maps are in use, {RESERVED_MAPS} kept spare"))
        if not limits:
            return
        room, why = min(limits)
        if partitions > room:
            raise TooManyPartitions(f"Number of partitions {partitions} is more than this broker can open: "
                                    f"{room} more partitions fit, as {why}.")

    def _maps_in_use(self, max_maps: int, partitions: int) -> int | None:
        """The process's memory maps, estimated where that is safe (see MAPS_RECOUNT_MARGIN)."""
        if self._maps_counted is not None:
            counted, logs_then, when = self._maps_counted
            estimate = counted + (len(self._logs) - logs_then) * MAPS_PER_PARTITION
            left = max_maps - RESERVED_MAPS - estimate - partitions * MAPS_PER_PARTITION
            if left >= MAPS_RECOUNT_MARGIN and time.monotonic() - when < MAPS_COUNT_MAX_AGE_S:
                return estimate
        return self.count_maps()

    def count_maps(self) -> int | None:
        """Count the process's memory maps now (None without /proc), for the room checks to
        estimate from; the broker has it done off its event loop once it listens, so that the
        first creation, often the topic a new client's Metadata auto-creates, need not."""
        logs = len(self._logs)
        maps = _count("/proc/self/maps", lines=True)
        if maps is not None:
            self._maps_counted = (maps, logs, time.monotonic())
        return maps

    def create_topic(self, topic: str, partitions: int, overrides: dict[str, str], *,
                     fsync_now: bool = True) -> list[Log]:
        """Create ``partitions`` empty logs with ``overrides`` persisted beside them.

        Raises InvalidTopicName, ValueError (bad partition count or config),
        TooManyPartitions or TopicAlreadyExists, all before touching the filesystem; OSError
        when the disk (or the open-file limit) fails midway, after removing the partitions
        made so far, so a failed creation never leaves half a topic to load at the next start.

        The manager's lock is held only to reserve the name and to install the finished
        logs, so other threads (and the broker's event loop asking for ``topics()``) are
        never held up by the disk work. That work is linear in the partition count: the
        partitions' directories are made inside one directory per log dir under a ``-delete``
        name (which the next start removes, should it crash meanwhile), the files that are
        the same for every partition hard-linked to one copy (see _link_files), made durable
        (fsyncs of what was made, or one filesystem sync for many partitions: see
        FSYNC_EACH_MAX_PARTITIONS), then renamed into place and the log dirs fsynced once;
        only then are the logs opened.

        ``fsync_now=False`` leaves out the fsyncs: the topic is published by the renames as
        before, and made durable by the next sync_created_partitions (flush_due, which the
        broker runs every log.flush.scheduler.interval.ms, 1 s by default, off its event
        loop; shutdown runs it too). For Metadata's auto-creation, whose answer a new
        producer waits for, where the fsyncs (one journal commit, 1-10 ms) were most of the
        creation (the intent of a topic of several partitions is still fsynced before its
        renames). Kafka 3.x leaves the same to the background: it makes a
        new partition's directory with no fsync (LogManager.createLogDirectory), writes its
        partition.metadata from a scheduled task (UnifiedLog.initializeTopicId), and fsyncs
        the partition directory with its first segment flush (LocalLog.flush); its appended
        records are in the page cache only too. A kill -9 loses nothing either way (the
        page cache outlives the process); a power loss in between may lose the topic, which
        the next use auto-creates again, as it loses Kafka's unflushed records.
        """
        validate_topic_name(topic)
        if not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"number of partitions must be at least 1, not {partitions!r}")
        overrides = {str(k): str(v) for k, v in overrides.items()}
        config = LogConfig.from_topic_configs(self.default_config, overrides)
        self.check_partition_room(partitions)
        with self._lock:
            if topic in self._overrides or topic in self._creating:
                raise TopicAlreadyExists(f"topic {topic!r} already exists")
            self._creating.add(topic)
            load = dict(self._partitions_in_dir)
        try:
            self._forget_deleted(topic)
            created = self._make_partitions(topic, partitions, overrides, config, load, fsync_now)
            with self._lock:
                for log in created:
                    self._install(log)
                self._overrides[topic] = overrides
            return created
        finally:
            with self._lock:
                self._creating.discard(topic)

    def _make_partitions(self, topic: str, partitions: int, overrides: dict[str, str], config: LogConfig,
                         load: dict[Path, int], fsync_now: bool) -> list[Log]:
        topic_id = new_topic_id()
        files = {PARTITION_METADATA_FILE: format_topic_id(topic_id),
                 LEADER_EPOCH_CHECKPOINT: LeaderEpochCheckpointFile.format([(0, 0)])}  # epoch 0 from offset 0
        if overrides:  # no file reads as no overrides: one file creation less per partition
            files[TOPIC_CONFIG_FILE] = _format_overrides(overrides)
        staged: list[tuple[Path, Path]] = []  # (directory now, its final name)
        intent: Path | None = None
        placed: list[Path] = []
        created: list[Log] = []
        # The partitions are made in directories of WORKSHOP_PARTITIONS each: only these pay
        # for ext4's placement of a top-level directory (a look at every block group, ~0.2
        # ms), and the partitions made in one stay in the block group it got.
        workshops: dict[Path, tuple[Path, int]] = {}  # log dir -> (where its next partition goes, how many are in it)
        made: list[Path] = []
        originals: dict[Path, Path] = {}  # log dir -> the staged directory whose files the others link to
        written: list[Path] = []  # the staged directories whose files are copies of their own
        try:
            for partition in range(partitions):
                log_dir = self._preferred_dirs.pop((topic, partition), None) or min(self.log_dirs, key=lambda d: load[d])
                load[log_dir] += 1
                final = log_dir / partition_dir_name(topic, partition)
                if final.exists():  # a rename would replace an empty directory silently
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(final))
                if partitions == 1:
                    # One top-level directory either way, so no workshop: the partition is
                    # staged under a -delete name of its own in the log dir, which the same
                    # one rename publishes; this saves the workshop's rmdir (an ext4 journal
                    # handle, 0.1-4 ms on a busy disk) on a new topic's first produce.
                    staging = log_dir / delete_dir_name(topic, partition, _unique_id())
                else:
                    workshop, count = workshops.get(log_dir, (None, WORKSHOP_PARTITIONS))
                    if count == WORKSHOP_PARTITIONS:
                        workshop, count = log_dir / delete_dir_name(topic, partition, _unique_id()), 0
                        workshop.mkdir()
                        made.append(workshop)
                    workshops[log_dir] = (workshop, count + 1)
                    staging = workshop / final.name
                staging.mkdir()
                staged.append((staging, final))
                original = originals.get(log_dir)
                if original is None or not _link_files(original, staging, files):
                    _write_files(staging, files)
                    originals[log_dir] = staging
                    written.append(staging)
            used_dirs = sorted({final.parent for _, final in staged})
            # Durable before the renames publish them, so that after a power loss a partition
            # directory under its final name always holds whole files. Kafka 2.8 fsyncs the
            # same two files when it writes them (PartitionMetadataFile, CheckpointFile: the
            # temporary file, then its rename), and 3.0 on also the partition directory after
            # each rename (Utils.atomicMoveWithFallback's flushDir); the one step beyond
            # Kafka is the log dir's fsync after the publishing rename, since a topic
            # acknowledged by CreateTopics should survive a power loss and here the log dir
            # is its only record (Kafka's is ZooKeeper's or the metadata log's). The
            # fsyncs before the renames are independent, so they go together (fsync_all).
            # A kill -9 needs none of it: the page cache outlives the process, and the
            # intent makes the next start remove a half-made topic.
            if fsync_now and len(staged) <= FSYNC_EACH_MAX_PARTITIONS:
                # The linked copies share the written files' inodes.
                fsync_all(files=[directory / name for directory in written for name in files],
                          directories=[staging for staging, _ in staged])
            elif fsync_now:
                for log_dir in used_dirs:
                    sync_filesystem(log_dir)
            # One rename publishes a one-partition topic whole: only several renames can stop
            # halfway, so only they need the intent that makes the next start finish the job.
            intent = self._write_intent("create", topic) if len(staged) > 1 else None
            for staging, final in staged:
                os.rename(staging, final)
                placed.append(final)
            if fsync_now:
                fsync_all(directories=used_dirs)
            else:
                finals = dict(staged)
                with self._lock:
                    files_to_sync, dirs_to_sync, log_dirs_to_sync = self._unsynced_created
                    files_to_sync.extend(finals[directory] / name for directory in written for name in files)
                    dirs_to_sync.extend(placed)
                    log_dirs_to_sync.update(used_dirs)
            for workshop in made:
                with contextlib.suppress(OSError):  # empty; a leftover goes at the next start
                    workshop.rmdir()
            for partition, final in enumerate(placed):
                created.append(Log(final, topic, partition, config, self.clock, topic_id=topic_id, just_made=True))
            if intent is not None:
                self._clear_intent(intent)
                intent = None
            return created
        except BaseException as exc:
            # The files a half-made log opened are reachable only through the traceback's
            # frames: clearing them closes those descriptors, which the removal below may
            # need when the open-file limit is what failed.
            traceback.clear_frames(exc.__traceback__)
            for log in created:
                log.close()
            for partition, final in enumerate(placed):
                self._bury(final, topic, partition)
            for workshop in made:
                shutil.rmtree(workshop, ignore_errors=True)
            for staging, _ in staged[len(placed):]:  # those outside a workshop
                shutil.rmtree(staging, ignore_errors=True)
            if intent is not None:
                self._clear_intent(intent)
            raise

    def create_log(self, topic: str, partition: int, overrides: dict[str, str], topic_id: str | None = None) -> Log:
        """The replica of one partition, created empty if this broker does not hold it yet
        (a cluster assigns partitions to brokers one by one). The topic's overrides are taken
        as given (the cluster's copy wins over a stale local one); the topic id is ``topic_id``
        (the cluster's), else the one other local partitions of the topic hold, or a new one."""
        validate_topic_name(topic)
        overrides = {str(k): str(v) for k, v in overrides.items()}
        config = LogConfig.from_topic_configs(self.default_config, overrides)
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing
            self._forget_deleted(topic)
            if topic_id is None:
                siblings = [log for (name, _), log in self._logs.items() if name == topic]
                topic_id = siblings[0].topic_id if siblings else new_topic_id()
            log_dir = self._preferred_dirs.pop((topic, partition), None) or \
                min(self.log_dirs, key=self._partitions_in_dir.__getitem__)
            directory = log_dir / partition_dir_name(topic, partition)
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

    def adopt_topic_id(self, topic: str, topic_id: str) -> list[Log]:
        """Record ``topic_id`` in every local partition of ``topic`` that holds another one;
        returns those. For a cluster member whose partitions got their ids before a topic had
        one id across the cluster (each broker made its own): the cluster's wins."""
        with self._lock:
            changed = [log for (name, _), log in self._logs.items() if name == topic and log.topic_id != topic_id]
            for log in changed:
                write_topic_id(log.dir, topic_id)
                log.topic_id = topic_id
            return changed

    def add_partitions(self, topic: str, count: int) -> list[Log]:
        """Grow ``topic`` to ``count`` partitions (CreatePartitions): the new ones empty, with
        the topic's id and overrides. UnknownTopic if it has no partition here. Each new
        partition is made whole or not at all; a crash midway leaves the topic with fewer."""
        overrides = self.topic_overrides(topic)
        have = self.topics().get(topic, 0)
        return [self.create_log(topic, partition, overrides) for partition in range(have, count)]

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove one partition's replica from disk; False when this broker has none."""
        with self._lock:
            log = self._logs.get((topic, partition))
            if log is None:
                return False
            self._remove(log)
            if not any(name == topic for name, _ in self._logs):
                self._overrides.pop(topic, None)
            self._checkpoint_after_deletion()
            return True

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's partitions from disk (UnknownTopic if there are none)."""
        validate_topic_name(topic)
        with self._lock:
            doomed = [log for (name, _), log in self._logs.items() if name == topic]
            if not doomed:
                raise UnknownTopic(topic)
            try:
                intent = self._write_intent("delete", topic) if len(doomed) > 1 else None
            except OSError as exc:
                # A full disk: deleting is how space comes back, so it goes on without the
                # intent (a crash midway would then leave part of the topic).
                logger.warning("deleting topic %r without an intent: %s", topic, exc)
                intent = None
            for log in doomed:
                self._remove(log)
            del self._overrides[topic]
            self._checkpoint_after_deletion()
            if intent is not None:
                self._clear_intent(intent)

    def _remove(self, log: Log) -> None:
        """Drop a partition from the map and from disk. Its dir is renamed first (a rename
        needs no descriptor), so a crash or a failing removal leaves a "-delete" dir that
        the next start removes, never a partition to load. The caller then rewrites the
        checkpoints without it, as Kafka's LogManager.asyncDelete does: a later partition of
        the same name must not start at the deleted one's log start offset."""
        self._drop_future((log.topic, log.partition))
        log.dir = self._bury(log.dir, log.topic, log.partition, remove=False)
        del self._logs[(log.topic, log.partition)]
        self._partitions_in_dir[log.dir.parent] -= 1
        self._unwritten_deletions.add((log.topic, log.partition))
        log.delete()

    def _checkpoint_after_deletion(self) -> None:
        try:
            self.checkpoint()
        except OSError as exc:
            # A full disk, say: the deletion stands (it is how space comes back); the
            # rewrite is retried by the periodic checkpoint, or by a creation of the name.
            logger.warning("checkpoints not rewritten after a deletion: %s", exc)

    def _forget_deleted(self, topic: str) -> None:
        """Make sure no checkpoint holds entries of a deleted topic of this name before a
        new one is made (OSError if they cannot be rewritten now)."""
        if any(name == topic for name, _ in self._unwritten_deletions):
            self.checkpoint()

    @staticmethod
    def _bury(directory: Path, topic: str, partition: int, *, remove: bool = True) -> Path:
        graveyard = directory.with_name(delete_dir_name(topic, partition, _unique_id()))
        os.replace(directory, graveyard)
        if remove:
            shutil.rmtree(graveyard, ignore_errors=True)
        return graveyard

    def _install(self, log: Log) -> None:
        log.on_segment_closed = self.on_segment_closed
        self._logs[(log.topic, log.partition)] = log
        self._partitions_in_dir[log.dir.parent] += 1

    # -- moving replicas between log dirs (AlterReplicaLogDirs, KIP-113) -----------------------

    def log_dir_named(self, path: str) -> Path | None:
        """The log dir a client names (as DescribeLogDirs lists it, or its absolute path, which
        Kafka's isLogDirOnline compares), None for a path that is not one of them."""
        for log_dir in self.log_dirs:
            if path in (str(log_dir), str(log_dir.absolute())):
                return log_dir
        return None

    def start_move(self, topic: str, partition: int, destination: Path) -> bool:
        """Have the replica of ``topic-partition`` moved to the log dir ``destination`` (one of
        log_dirs), as Kafka 2.8's ReplicaManager.alterReplicaLogDirs: a move to another dir
        under way is cancelled (its future removed); the future is made empty in
        ``destination``, for the mover to fill (copy_to_future) and finish (finish_move),
        unless the replica is there already or moving there. False when there is no replica
        here: ``destination`` is then where it is made when it comes."""
        key = (topic, partition)
        with self._lock:
            future = self._futures.get(key)
            if future is not None and future.dir.parent != destination:
                self._drop_future(key)
            current = self._logs.get(key)
            if current is None:
                self._preferred_dirs[key] = destination
                return False
            if current.dir.parent == destination or key in self._futures:
                return True
            directory = destination / future_dir_name(topic, partition, _unique_id())
            directory.mkdir()
            try:
                write_atomically(directory / TOPIC_CONFIG_FILE, _format_overrides(self._overrides.get(topic, {})))
                future = Log(directory, topic, partition, current.config, self.clock,
                             log_start_offset=current.log_start_offset, topic_id=current.topic_id)
                fsync_dir(destination)
            except BaseException as exc:
                traceback.clear_frames(exc.__traceback__)
                self._bury(directory, topic, partition)
                raise
            self._futures[key] = future
            current.future = future
            return True

    def _drop_future(self, key: TopicPartition) -> None:
        future = self._futures.pop(key, None)
        if future is None:
            return
        current = self._logs.get(key)
        if current is not None:
            current.detach_future()
        future.dir = self._bury(future.dir, *key, remove=False)
        future.delete()

    def futures(self) -> list[Log]:
        """The future logs of the moves under way (event loop: no lock, as logs())."""
        return list(self._futures.values())

    def copy_to_future(self, topic: str, partition: int, max_bytes: int) -> int:
        """One step of a move: Log.copy_to_future; 0 once caught up, or without a move."""
        current = self._logs.get((topic, partition))
        return 0 if current is None else current.copy_to_future(max_bytes)

    def finish_move(self, topic: str, partition: int, expected: Log | None = None) -> bool:
        """Make the future of ``topic-partition`` its replica (Log.replace_with_future, during
        which no append comes in), then remove the old directory.

        Crash-safe by the order of the renames (Kafka 2.8's replaceCurrentWithFutureLog renames
        the future first, and a crash between its renames leaves two current logs that stop the
        next start): the checkpoints are written with the future's offsets, the current
        directory is renamed ``-delete`` and that made durable, and only then the future
        renamed to the partition's name. A start finding a future with no replica knows the
        copy was complete (startup's _load_futures); one finding both resumes the move; never
        are two directories of the partition loaded. False when there was nothing to finish."""
        key = (topic, partition)
        with self._lock:
            current, future = self._logs.get(key), self._futures.get(key)
            # ``expected``: the future the caller saw caught up. Another (the move cancelled
            # and asked again meanwhile) would be copied whole under the replica's lock.
            if current is None or future is None or (expected is not None and future is not expected):
                return False
            graveyard: list[Path] = []

            def publish() -> Path:
                self.checkpoint()
                old = current.dir
                graveyard.append(self._bury(old, topic, partition, remove=False))
                fsync_dir(old.parent)
                final = future.dir.parent / partition_dir_name(topic, partition)
                os.rename(future.dir, final)
                fsync_dir(final.parent)
                return final

            old_dir = current.dir.parent
            current.replace_with_future(publish)
            del self._futures[key]
            self._partitions_in_dir[old_dir] -= 1
            self._partitions_in_dir[current.dir.parent] += 1
            self._checkpoint_after_deletion()
        for path in graveyard:
            shutil.rmtree(path, ignore_errors=True)
        return True

    # -- periodic work -----------------------------------------------------------------------

    def cleanup(self) -> int:
        """One retention pass over every log; returns the number of segments deleted."""
        deleted = 0
        for log in self.logs():
            deleted += log.delete_expired_segments(self.may_delete_segment)
        if deleted:
            self.checkpoint_log_start_offsets()
        return deleted

    def remove_expired_producers(self) -> None:
        """Every log forgets its producers idle past ``producer.id.expiration.ms`` (the broker
        runs this every ``producer.id.expiration.check.interval.ms``)."""
        for log in self.logs():
            log.remove_expired_producers()

    def sync_created_partitions(self) -> None:
        """fsync what the topics created with ``fsync_now=False`` made (their files and
        partition directories together, then their log dirs), as create_topic would have.
        Partitions deleted meanwhile are left out."""
        with self._lock:
            files, directories, log_dirs = self._unsynced_created
            self._unsynced_created = ([], [], set())
        if not log_dirs:
            return
        try:
            fsync_all(files=[path for path in files if path.exists()],
                      directories=[path for path in directories if path.exists()])
            fsync_all(directories=sorted(log_dirs))
        except BaseException:
            with self._lock:  # tried again next time
                pending_files, pending_directories, pending_log_dirs = self._unsynced_created
                pending_files.extend(files)
                pending_directories.extend(directories)
                pending_log_dirs.update(log_dirs)
            raise

    def flush_due(self) -> None:
        """fsync the topics created without fsyncs and the segments rolls have closed, and
        flush the logs whose ``flush.ms`` has passed (the broker runs this every
        ``log.flush.scheduler.interval.ms``, off its event loop)."""
        try:
            self.sync_created_partitions()
        except OSError:  # kept for the next pass; the logs' flushes go on
            logger.exception("fsync of new partitions failed")
        for log in self.logs():
            try:
                log.flush_rolled_segments()
                log.flush_if_due()
            except OSError:  # one failing disk (or a topic deleted meanwhile) spares the rest
                logger.exception("%s-%d: flush failed", log.topic, log.partition)

    def checkpoint(self) -> None:
        """Write recovery points, log start offsets and high watermarks of every log dir."""
        with self._lock:
            deleted = set(self._unwritten_deletions)
            run_at_once(self._checkpoint_writes(CHECKPOINTS))
            self._unwritten_deletions -= deleted

    def checkpoint_log_start_offsets(self) -> None:
        """Write ``log-start-offset-checkpoint`` alone (after DeleteRecords moved a log start
        into a segment, which only the checkpoint remembers across a restart)."""
        with self._lock:
            run_at_once(self._checkpoint_writes([LOG_START_OFFSET_CHECKPOINT]))

    def checkpoint_high_watermarks(self) -> None:
        """Write ``replication-offset-checkpoint`` alone (a cluster does it more often than the
        other checkpoints: a restarted follower truncates to it when no epoch helps)."""
        with self._lock:
            run_at_once(self._checkpoint_writes([REPLICATION_OFFSET_CHECKPOINT]))

    def _checkpoint_writes(self, names) -> list[Callable[[], None]]:
        """A call writing each of the checkpoints ``names`` in each log dir, with the offsets
        of now; the caller holds the lock until they are written (a checkpoint's temporary
        file has a fixed name). They are independent files, written at once (run_at_once)."""
        writes = []
        for name in names:
            for log_dir in self.log_dirs:
                # Futures too, as Kafka's: a move's copy keeps its log start and high watermark
                # across a restart, and so does the replica it becomes (see finish_move).
                offsets = {(log.topic, log.partition): CHECKPOINTS[name](log)
                           for log in [*self._logs.values(), *self._futures.values()] if log.dir.parent == log_dir}
                writes.append(functools.partial(OffsetCheckpointFile(log_dir / name).write, offsets))
        return writes
