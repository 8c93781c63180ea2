"""Secor-style exactly-once export of closed segments to Parquet.

Output layout (Secor's naming, seed 003)::

    OUT/<topic>/dt=<YYYY-MM-DD>/<generation>_<partition>_<first offset, 20 digits>.parquet

``dt`` is the UTC date of the record timestamps in the file, or ``unknown`` for records that
have no timestamp (Kafka's -1: every magic 0 message, and magic 1 ones sent without a time);
dating them 1969-12-31, or by a file's modification time, would invent a date, and the latter
would also change between reruns. ``first offset`` is the smallest offset in the file, so a
file name tells which Kafka partition and offsets it holds, and a record's file can be found
from its offset. Rows have Spark's Kafka source schema with ``includeHeaders`` (the headers
column is null for records without headers, which every magic 0/1 message is), sorted by
offset.

``generation`` (Secor's field for keeping outputs apart) tells the incarnations of a topic
name apart: a topic deleted and created again gets a new topic id (storage's
``partition.metadata``), and each topic id gets its own generation, 1 for the first one and
one more than the topic's highest for each later one (recorded in ``OUT/_minikafka/
incarnations`` as ``<topic> <generation> <topic id>``, before any of its files is written;
see ``export.progress``). A new incarnation is exported from its first offset whatever the
old one's progress was, and its files cannot take the old one's names. ``export.replay``
reads the newest generation of a topic unless told which.

Exactly once, per topic-partition:

1. Under the output directory's lock, plan the closed segments past the recorded progress
   of the partition's current incarnation (``export.progress``); a partition's plan always
   starts and ends on segment boundaries. Record the generation of a new topic id.
2. Spark reads exactly the planned files (one task per segment; the data source's
   ``segments`` option, no rescan, so a segment that retention renamed to ``.deleted`` since
   planning is still read, and one deleted outright fails the run with ``SegmentGone``) and
   writes Parquet into a fresh staging directory, one file per (segment, date). The file set
   for a segment depends only on the segment's bytes, so any rerun produces the same names
   with the same contents.
3. A partition whose directory holds another topic id than planned (the topic was deleted
   and created again while Spark read it) is left out: what was read may be the new topic's.
   Each other staged file is checked to hold offsets of one planned segment only and to have
   a name of its own; a partition with a planned, non-empty segment of which no record was
   staged is left out (with a warning), so its progress never passes records missing from
   the output. The rest are fsynced and renamed over their final names; the directories are
   fsynced.
4. Only then is each partition's progress advanced to the end of its last exported segment.

A crash before 3 leaves only staging garbage (removed by the next run). A crash during or
after 3 but before 4 leaves final files whose progress is not recorded: the next run exports
the same segments again and its renames replace those files with identical ones, never
adding a second copy. A crash during 4 leaves each progress file old or new (atomic rename).
So every record ends up in exactly one file. Segments at or below the recorded progress are
skipped without starting Spark.

Test hook: with ``MINIKAFKA_EXPORT_CRASH_AT`` set to ``after-write`` (staging written),
``mid-rename`` (after the first final rename), ``after-rename`` (all files in place, no
progress recorded) or ``mid-record`` (the first partition's progress recorded, not the
others'), the exporter SIGKILLs its own process at that point.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import shutil
import signal
import sys
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from minikafka.export.console import ProgressBar
from minikafka.export.planning import SegmentSlice, check_log_dir, chunks_option, scan_log_dirs, segments_option
from minikafka.export.progress import ExportProgress
from minikafka.export.session import SparkStartError, python_worker_failure
from minikafka.storage import read_topic_id
from minikafka.storage.checkpoint import fsync_dir

__all__ = ["NO_TIMESTAMP_DATE", "ExportPlan", "ExportSummary", "Incarnation", "SegmentGone", "export",
           "export_chunks", "internal_topic", "output_name", "pending_slices"]

CRASH_HOOK_ENV = "MINIKAFKA_EXPORT_CRASH_AT"
NO_TIMESTAMP_DATE = "unknown"  # the dt= of records without a timestamp


@dataclass
class ExportSummary:
    """What one export run did."""

    segments: int = 0
    records: int = 0
    files: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    skipped_offsets: int = 0  # records lost to retention before they were exported
    replaced_partitions: int = 0  # partitions left out: deleted and created again mid-export
    incomplete_partitions: int = 0  # partitions left out: a planned segment was not read


@dataclass(frozen=True)
class Incarnation:
    """Which topic id a partition's planned segments belong to, and its file generation."""

    topic_id: str | None
    generation: int


@dataclass
class ExportPlan:
    """Closed segments not yet exported, whole, in offset order; the incarnation of each
    partition they come from; the topic ids that need a generation recorded; and the count
    of offsets retention removed before they could be exported; the records not exported
    because their segment is still the active one."""

    slices: list[SegmentSlice]
    incarnations: dict[tuple[str, int], Incarnation]
    new_incarnations: dict[tuple[str, str], int]  # (topic, topic id) -> generation
    skipped_offsets: int
    open_records: dict[tuple[str, int], int] = field(default_factory=dict)


class SegmentGone(FileNotFoundError):
    """A planned segment was deleted before Spark read it (nothing was exported or recorded)."""


def internal_topic(topic: str) -> bool:
    """Kafka's internal topics (``__consumer_offsets``...) are not exported unless named."""
    return topic.startswith("__")


def output_name(generation: int, partition: int, first_offset: int) -> str:
    return f"{generation}_{partition}_{first_offset:020d}.parquet"


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_HOOK_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def pending_slices(log_dirs, out_dir, topics=None) -> ExportPlan:
    """What an export run has to do now (see ``ExportPlan``)."""
    state = ExportProgress(out_dir).state()
    segments_by_partition = scan_log_dirs(log_dirs)
    if topics is not None:
        known = {topic for topic, _ in segments_by_partition}
        for topic in topics:
            if topic not in known:
                raise ValueError(f"topic {topic!r} not found in {', '.join(map(str, log_dirs))}")
    plan = ExportPlan([], {}, {}, 0)
    for (topic, partition), segments in sorted(segments_by_partition.items()):
        if (topic not in topics) if topics is not None else internal_topic(topic):
            continue
        topic_id = segments[0].topic_id
        generation = state.generation(topic, topic_id)
        if state.is_new(topic, topic_id):
            # Known from now on, so that another new id of the topic met in this same run
            # (deleted and created again during the scan) gets a generation of its own.
            state.incarnations.setdefault(topic, {})[topic_id] = generation
            plan.new_incarnations[(topic, topic_id)] = generation
        done = state.exported_up_to(topic, partition, topic_id)
        for info in segments:
            if not info.closed:
                waiting = info.next_offset - max(info.base_offset, done or 0)
                if waiting > 0:
                    plan.open_records[(topic, partition)] = waiting
                continue
            if done is not None and info.next_offset <= done:
                continue
            if done is not None and info.base_offset > done:
                plan.skipped_offsets += info.base_offset - done
            plan.slices.append(SegmentSlice(topic, partition, str(info.log_path), info.base_offset,
                                            info.base_offset, info.next_offset, None, info.size))
            plan.incarnations[(topic, partition)] = Incarnation(topic_id, generation)
            done = info.next_offset
    planned_topics = {(topic, incarnation.topic_id) for (topic, _), incarnation in plan.incarnations.items()}
    plan.new_incarnations = {key: g for key, g in plan.new_incarnations.items() if key in planned_topics}
    return plan


def export(spark_factory, log_dirs, out_dir, topics=None, *, progress: bool | None = None) -> ExportSummary:
    """Export every closed, not yet exported segment of ``topics`` (default: all but internal).

    ``spark_factory()`` returns the SparkSession; it is called only if there is work, so a
    run with nothing to do costs no JVM. ``progress``: draw a bar (default: if stderr is a TTY).
    Raises ``ValueError`` for a missing log dir (or a file in its place) or unknown topic, ``SegmentCorrupt`` (a
    ``ValueError``) for a segment that fails its checks (nothing is renamed into place then),
    ``ExportBusy`` if another export holds the output directory, ``SegmentGone`` (a
    ``FileNotFoundError``) if retention deleted a planned segment before Spark read it,
    ``SparkStartError`` if Spark's Python workers cannot run the data source.
    """
    started = time.monotonic()
    # Absolute (not resolved: a shared mount's symlinks may differ between machines): Spark's
    # executors run in work dirs of their own, and the staging directory becomes a file:// URI.
    log_dirs = [Path(os.path.abspath(d)) for d in log_dirs]
    for log_dir in log_dirs:
        check_log_dir(log_dir)
    out_dir = Path(os.path.abspath(out_dir))
    store = ExportProgress(out_dir)
    store.lock()
    try:
        shutil.rmtree(store.staging_dir, ignore_errors=True)  # a crashed run's leftovers
        plan = pending_slices(log_dirs, out_dir, topics)
        slices = plan.slices
        summary = ExportSummary(segments=len(slices), bytes_read=sum(s.size for s in slices),
                                skipped_offsets=plan.skipped_offsets)
        if plan.skipped_offsets:
            print(f"minikafka export: warning: {plan.skipped_offsets} offsets were deleted by retention "
                  "before they were exported", file=sys.stderr)
        if plan.open_records:
            # Only closed segments are exported, and a segment closes at segment.bytes (1 GiB) or
            # segment.ms (7 days): right after trying the broker, everything is still open.
            print(f"minikafka export: note: {sum(plan.open_records.values())} records in "
                  f"{len(plan.open_records)} partitions are in active segments, exported once those "
                  "close: at segment.bytes or segment.ms (a test can set segment.ms=1000), or as they "
                  "close with `minikafka serve --export-to DIR`", file=sys.stderr)
        if slices:
            for (topic, topic_id), generation in sorted(plan.new_incarnations.items()):
                store.record_incarnation(topic, topic_id, generation)
            staging = store.staging_dir / uuid.uuid4().hex
            _write_staging(spark_factory(), log_dirs, slices, staging, progress)
            _crash_point("after-write")
            replaced = _replaced_partitions(slices, plan.incarnations)
            if replaced:
                summary.replaced_partitions = len(replaced)
                print(f"minikafka export: warning: {', '.join(f'{t}-{p}' for t, p in sorted(replaced))} "
                      "deleted and created again during the export: left for the next run", file=sys.stderr)
                slices = [s for s in slices if (s.topic, s.partition) not in replaced]
            incomplete = _move_into_place(staging, out_dir, slices, plan.incarnations, summary)
            if incomplete:
                summary.incomplete_partitions = len(incomplete)
                print(f"minikafka export: warning: {', '.join(f'{t}-{p}' for t, p in sorted(incomplete))}: "
                      "a planned segment was not read; not recorded, left for the next run",
                      file=sys.stderr)
                slices = [s for s in slices if (s.topic, s.partition) not in incomplete]
            _crash_point("after-rename")
            ends: dict[tuple[str, int], int] = {}
            for s in slices:
                ends[(s.topic, s.partition)] = max(ends.get((s.topic, s.partition), 0), s.end_offset)
            for (topic, partition), end in sorted(ends.items()):
                incarnation = plan.incarnations[(topic, partition)]
                store.record(topic, partition, end, incarnation.generation, incarnation.topic_id)
                _crash_point("mid-record")
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        store.unlock()
    summary.seconds = time.monotonic() - started
    return summary


def export_chunks(spark_factory, log_dirs, out_dir, plan: dict, *, progress: bool | None = None) -> ExportSummary:
    """Export the chunks a cluster broker's hand-off planned and claimed (``export.cluster_progress``);
    the hand-off records them in ZooKeeper once this returns with every partition done.

    ``plan`` is what ``ClusterExportHandoff`` writes: ``{"staging": DIR, "jobs": [{"topic",
    "partition", "generation", "topic_id", "chunks": [{"start", "end", "slices": [...]}]}]}``,
    ``slices`` being this broker's segment files covering the chunk (``segments_option``'s
    form). Each chunk is read by one Spark task and staged, checked and renamed as ``export``
    does with segments, so its files are named by the chunk's first offset per date whatever
    the segment files it was read from. No lock on ``out_dir`` (other brokers' exports write
    into it; the chunk claims keep them apart) and no progress file. Partitions left out (a
    topic deleted and created again meanwhile, a chunk with nothing staged) are counted in
    the summary and must not be recorded.
    """
    started = time.monotonic()
    log_dirs = [Path(os.path.abspath(d)) for d in log_dirs]
    out_dir = Path(os.path.abspath(out_dir))
    incarnations: dict[tuple[str, int], Incarnation] = {}
    groups: list[list[SegmentSlice]] = []
    units: list[SegmentSlice] = []  # one pseudo-slice per chunk: what a staged file must fall in
    for job in plan["jobs"]:
        key = (job["topic"], job["partition"])
        incarnations[key] = Incarnation(job["topic_id"], job["generation"])
        for chunk in job["chunks"]:
            groups.append([SegmentSlice(*fields) for fields in chunk["slices"]])
            units.append(SegmentSlice(*key, "", chunk["start"], chunk["start"], chunk["end"], None,
                                      chunk["end"] - chunk["start"]))
    read = [s for group in groups for s in group]
    summary = ExportSummary(segments=len(groups), bytes_read=sum(s.size for s in read))
    if not groups:
        return summary
    staging = Path(plan["staging"]) / uuid.uuid4().hex
    try:
        _write_staging(spark_factory(), log_dirs, read, staging, progress, chunks=groups)
        _crash_point("after-write")
        replaced = _replaced_partitions(read, incarnations)
        units = [u for u in units if (u.topic, u.partition) not in replaced]
        incomplete = _move_into_place(staging, out_dir, units, incarnations, summary)
        summary.replaced_partitions = len(replaced)
        summary.incomplete_partitions = len(incomplete)
        _crash_point("after-rename")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    summary.seconds = time.monotonic() - started
    return summary


def _write_staging(spark, log_dirs, slices: list[SegmentSlice], staging: Path, progress: bool | None,
                   *, chunks: list[list[SegmentSlice]] | None = None) -> None:
    """Spark reads ``slices`` (one task each), or with ``chunks`` each group of them in one task."""
    from pyspark.sql import functions as F

    from minikafka.export.datasource import FORMAT
    from minikafka.export.segment_reader import NO_TIMESTAMP

    # Exactly the planned files, not a fresh scan of the log dirs: a segment that retention
    # renamed to .deleted since planning would be missing from a scan (and its offsets from
    # the output) while progress still moved past it.
    with _explained_failures(slices):  # the driver runs the data source's Python here already
        df = (spark.read.format(FORMAT)
              .option("includeHeaders", "true")  # the export is the log's durable copy: all of it
              .option(*(("chunks", chunks_option(chunks)) if chunks is not None
                        else ("segments", segments_option(slices))))
              .load(",".join(str(d) for d in log_dirs)))
    # UTC dates whatever the session's time zone: shift the instant so that formatting it
    # in the session zone prints its UTC wall-clock date (the identity when that zone is UTC).
    session_zone = spark.conf.get("spark.sql.session.timeZone")
    utc_date = F.date_format(F.to_utc_timestamp("timestamp", session_zone), "yyyy-MM-dd")
    dated = df.withColumn("dt", F.when(F.unix_micros("timestamp") == NO_TIMESTAMP * 1000,
                                       F.lit(NO_TIMESTAMP_DATE)).otherwise(utc_date))
    # Parquet's standard microsecond timestamps (not Spark's legacy INT96), so that pyarrow
    # and other readers get timestamp[us, UTC] back.
    previous_timestamp_type = spark.conf.get("spark.sql.parquet.outputTimestampType")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    group = f"minikafka-export-{uuid.uuid4().hex}"
    sc = spark.sparkContext
    sc.setJobGroup(group, "minikafka export")
    tasks = len(chunks) if chunks is not None else len(slices)
    bar = ProgressBar("export", tasks, "chunks" if chunks is not None else "segments", enabled=progress)
    bar.update(0)  # drawn now: the first Spark stage can take a while to start
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_tasks, args=(sc, group, bar, stop), daemon=True)
    watcher.start()
    try:
        # Rows in offset order within each file; no shuffle, so each task (one segment)
        # writes its own file per date and nothing else. A file:// URI whatever the cluster's
        # default filesystem: the driver checks and renames these files itself.
        with _explained_failures(slices):
            (dated.sortWithinPartitions("dt", "offset").write
             .option("maxRecordsPerFile", 0)
             .partitionBy("dt")
             .parquet(staging.as_uri()))
    finally:
        stop.set()
        watcher.join()
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
        spark.conf.set("spark.sql.parquet.outputTimestampType", previous_timestamp_type)
    bar.update(tasks)
    bar.finish()


@contextlib.contextmanager
def _explained_failures(slices: list[SegmentSlice]):
    """Spark's failures that have a one-line explanation raise that instead (the CLI prints
    it); any other failure is raised as it is."""
    try:
        yield
    except Exception as exc:
        known = _known_failure(str(exc), slices)
        if known is not None:
            raise known from None
        raise


def _known_failure(text: str, slices: list[SegmentSlice]) -> Exception | None:
    """A worker's exception reaches the driver as text inside Spark's error: a SegmentCorrupt
    is raised again as itself, so the CLI prints the one line that names the file and offset."""
    corrupt = re.search(r"SegmentCorrupt: (.+)", text)
    if corrupt is not None:
        from minikafka.export.segment_reader import SegmentCorrupt
        return SegmentCorrupt(corrupt.group(1).strip())
    gone = re.search(r"FileNotFoundError: \[Errno 2\] No such file or directory: '([^']+)'", text)
    if gone is not None and gone.group(1) in {s.log_path for s in slices}:
        # Retention deleted it (past .deleted too) between planning and reading. Nothing
        # is renamed or recorded; the next run plans without it (and warns about its
        # offsets if the partition has recorded progress).
        return SegmentGone(f"{gone.group(1)} was deleted (retention) before it was read; nothing "
                           "was exported or recorded: run the export again")
    reason = python_worker_failure(text)
    if reason is not None:
        return SparkStartError(reason)
    return None


def _watch_tasks(sc, group: str, bar: ProgressBar, stop: threading.Event) -> None:
    tracker = sc.statusTracker()
    while not stop.wait(0.2):
        done = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in (job.stageIds if job else ()):
                stage = tracker.getStageInfo(stage_id)
                if stage:
                    done += stage.numCompletedTasks
        bar.update(done)


def _replaced_partitions(slices: list[SegmentSlice],
                         incarnations: dict[tuple[str, int], Incarnation]) -> set[tuple[str, int]]:
    """Partitions whose directory now holds another topic id than planned. One that is gone
    (the topic deleted, not created again) keeps what Spark read: the files it opened were
    the planned ones, or the read failed."""
    replaced = set()
    for s in slices:
        directory = Path(s.log_path).parent
        if directory.is_dir() and read_topic_id(directory) != incarnations[(s.topic, s.partition)].topic_id:
            replaced.add((s.topic, s.partition))
    return replaced


def _move_into_place(staging: Path, out_dir: Path, slices: list[SegmentSlice],
                     incarnations: dict[tuple[str, int], Incarnation],
                     summary: ExportSummary) -> set[tuple[str, int]]:
    """Check the staged files and rename them into place; returns the partitions left out
    because a planned segment with bytes in it has no staged record (none of their files is
    renamed: their progress must not move past records that are not in the output)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    starts: dict[tuple[str, int], list[int]] = defaultdict(list)
    ends: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
    for s in slices:  # in offset order per partition
        starts[(s.topic, s.partition)].append(s.start_offset)
        ends[(s.topic, s.partition)][s.start_offset] = s.end_offset
    targets = {}
    covered: set[tuple[str, int, int]] = set()  # (topic, partition, segment start) with rows staged
    for staged in sorted(staging.glob("dt=*/*.parquet")):
        origin = pq.read_table(staged, columns=["topic", "partition", "offset"])
        if origin.num_rows and (origin.column("topic")[0].as_py(), origin.column("partition")[0].as_py()) not in starts:
            continue  # a replaced partition's (see _replaced_partitions): removed with the staging dir
        # The exactly-once argument needs each file to hold records of one segment only (so a
        # rerun names it the same): check, never assume, before anything is renamed.
        if len(origin.column("topic").unique()) != 1 or len(origin.column("partition").unique()) != 1:
            raise RuntimeError(f"{staged} mixes topic-partitions; nothing was renamed into place")
        key = (origin.column("topic")[0].as_py(), origin.column("partition")[0].as_py())
        bounds = pc.min_max(origin.column("offset"))
        first_offset, last_offset = bounds["min"].as_py(), bounds["max"].as_py()
        position = bisect.bisect_right(starts[key], first_offset) - 1
        segment_start = starts[key][position] if position >= 0 else None
        if segment_start is None or last_offset >= ends[key][segment_start]:
            raise RuntimeError(f"{staged} holds offsets {first_offset}..{last_offset} of "
                               f"{key[0]}-{key[1]}, not of one planned segment; nothing was renamed")
        generation = incarnations[key].generation
        target = out_dir / key[0] / staged.parent.name / output_name(generation, key[1], first_offset)
        if target in targets:
            raise RuntimeError(f"{staged} and {targets[target][0]} would both become {target}; "
                               "nothing was renamed into place")
        targets[target] = (staged, origin.num_rows, key)
        covered.add((*key, segment_start))
    # A closed segment with bytes holds at least one record of its own range: none staged
    # means it was not read (a bug, or a file gone since planning), not that it was empty.
    incomplete = {(s.topic, s.partition) for s in slices
                  if s.size > 0 and (s.topic, s.partition, s.start_offset) not in covered}
    touched_dirs: set[Path] = set()
    for target, (staged, rows, key) in targets.items():
        if key in incomplete:
            continue
        summary.records += rows
        summary.bytes_written += staged.stat().st_size
        with open(staged, "rb") as f:
            os.fsync(f.fileno())
        target_dir = target.parent
        _make_dirs_durably(target_dir)
        os.replace(staged, target)
        touched_dirs.add(target_dir)
        summary.files += 1
        if summary.files == 1:
            _crash_point("mid-rename")
    for directory in touched_dirs:
        fsync_dir(directory)
    return incomplete


def _make_dirs_durably(path: Path) -> None:
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        fsync_dir(directory.parent)
