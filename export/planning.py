"""Which bytes of which segment files a read covers: options in, segment slices out.

Shared by the Spark data source (one Spark input partition per slice) and the exporter
(which plans whole closed segments after its recorded progress). No pyspark here.

Selection: ``topics`` (comma-separated; Spark's name ``subscribe`` works too), ``partitions``
(comma-separated numbers, for every selected topic) or Spark's ``assign``, JSON
``{"topic": [0, 1]}`` naming exact topic-partitions.

Offset options follow Spark's Kafka source where they make sense for a batch read:

``startingOffsets``  ``"earliest"`` (default) or JSON ``{"topic": {"0": 23, "1": -2}}``;
                     -2 means earliest; partitions left out start at the earliest.
``endingOffsets``    ``"latest"`` (default) or JSON ``{"topic": {"0": 50, "1": -1}}``;
                     exclusive; -1 means latest; partitions left out end at the latest.
``startingTimestamp`` milliseconds; per partition, reading starts at the first record whose
                     timestamp is at least this (Kafka's offset-for-timestamp) and overrides
                     ``startingOffsets``, as in Spark. A partition without such a record is
                     read as empty.
``segments``         the exact slices to read (``segments_option``), instead of scanning the
                     log directories: for a caller that planned the read itself and must get
                     exactly those files read (the exporter). A running broker's retention may
                     rename a planned segment to ``.deleted`` before Spark reads it; a rescan
                     would leave it out, the planned file is still read (``read_segment``).
``chunks``           groups of exact slices (``chunks_option``), each group read by one Spark
                     task: an offset range spread over several segment files (a cluster's
                     export chunk, see ``export.cluster_progress``) then yields one output
                     file per date, as it does on the replica whose single segment held it.

"Latest" is the end of the readable data: the end of the last closed segment, or of the
active segment with ``includeActiveSegment``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ReadOptions", "SegmentSlice", "chunks_option", "parse_options", "plan_slices", "scan_log_dirs",
           "segments_option"]

EARLIEST = -2
LATEST = -1


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """The records of one segment file to read: ``start_offset <= offset < end_offset``."""

    topic: str
    partition: int
    log_path: str
    base_offset: int
    start_offset: int
    end_offset: int
    start_timestamp: int | None
    size: int


@dataclass(frozen=True)
class ReadOptions:
    """Parsed, validated data source options."""

    log_dirs: tuple[Path, ...]
    topics: tuple[str, ...] | None
    partitions: tuple[int, ...] | None
    assign: frozenset[tuple[str, int]] | None
    starting: dict[tuple[str, int], int]
    ending: dict[tuple[str, int], int]
    starting_timestamp: int | None
    include_active_segment: bool
    segments: tuple[SegmentSlice, ...] | None = None
    chunks: tuple[tuple[SegmentSlice, ...], ...] | None = None
    include_headers: bool = False


_SLICE_FIELDS = ("topic", "partition", "log_path", "base_offset", "start_offset", "end_offset",
                 "start_timestamp", "size")


def segments_option(slices) -> str:
    """The ``segments`` option's value: these slices, read as they are."""
    return json.dumps([[getattr(s, name) for name in _SLICE_FIELDS] for s in slices])


def chunks_option(groups) -> str:
    """The ``chunks`` option's value: each group of slices read by one task, in order."""
    return json.dumps([json.loads(segments_option(group)) for group in groups])


def _slices(fields_list) -> tuple[SegmentSlice, ...]:
    return tuple(SegmentSlice(*fields) for fields in fields_list)


def _segments(text: str) -> tuple[SegmentSlice, ...]:
    try:
        return _slices(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"option segments must be what export.planning.segments_option writes, "
                         f"not {text[:80]!r}") from exc


def _chunks(text: str) -> tuple[tuple[SegmentSlice, ...], ...]:
    try:
        return tuple(_slices(group) for group in json.loads(text))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"option chunks must be what export.planning.chunks_option writes, "
                         f"not {text[:80]!r}") from exc


def includes_headers(options) -> bool:
    """Option ``includeHeaders`` (default false, as Spark's Kafka source): it also decides the
    schema, which Spark asks for before the other options are read."""
    return _bool("includeHeaders", options.get("includeHeaders") or "false")


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name} must be true or false, not {text!r}")


def _offsets(name: str, text: str | None, default_word: str, other_word: str) -> dict[tuple[str, int], int]:
    if text is None or text.strip().lower() == default_word:
        return {}
    if text.strip().lower() == other_word:
        raise ValueError(f"option {name}={other_word} is not allowed for a batch read")
    try:
        parsed = json.loads(text)
        result = {}
        for topic, partitions in parsed.items():
            for partition, offset in partitions.items():
                result[(str(topic), int(partition))] = int(offset)
        return result
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"option {name} must be {default_word!r} or JSON like "
                         f'{{"topic": {{"0": 42}}}}, not {text!r}') from exc


def check_log_dir(log_dir: Path) -> None:
    """ValueError saying what is wrong with a log directory to read: missing, or a file."""
    if not log_dir.is_dir():
        problem = "is not a directory" if log_dir.exists() else "does not exist"
        raise ValueError(f"log directory {str(log_dir)!r} {problem}")


def parse_options(options) -> ReadOptions:
    """Validate data source options (a case-insensitive mapping, as Spark passes them)."""
    path = options.get("path") or options.get("logDirs")
    if not path:
        raise ValueError('no log directory: use .load("/path/to/log.dir") (comma-separate several)')
    log_dirs = tuple(Path(p.strip()) for p in str(path).split(",") if p.strip())
    for log_dir in log_dirs:
        check_log_dir(log_dir)
    topics_text = options.get("topics") or options.get("subscribe")
    topics = tuple(t.strip() for t in topics_text.split(",") if t.strip()) if topics_text else None
    partitions_text = options.get("partitions")
    try:
        partitions = (tuple(int(p) for p in partitions_text.split(",") if p.strip())
                      if partitions_text else None)
    except ValueError:
        raise ValueError(f"option partitions must be comma-separated integers, not {partitions_text!r}") from None
    assign_text = options.get("assign")
    assign = None
    if assign_text:
        try:
            assign = frozenset((str(t), int(p)) for t, ps in json.loads(assign_text).items() for p in ps)
        except (ValueError, AttributeError, TypeError):
            raise ValueError(f'option assign must be JSON like {{"topic": [0, 1]}}, not {assign_text!r}') from None
        topics = tuple(sorted({t for t, _ in assign}))
    timestamp_text = options.get("startingTimestamp")
    try:
        starting_timestamp = int(timestamp_text) if timestamp_text is not None else None
    except ValueError:
        raise ValueError(f"option startingTimestamp must be milliseconds since the epoch, not {timestamp_text!r}") from None
    return ReadOptions(
        log_dirs=log_dirs,
        topics=topics,
        partitions=partitions,
        assign=assign,
        starting=_offsets("startingOffsets", options.get("startingOffsets"), "earliest", "latest"),
        ending=_offsets("endingOffsets", options.get("endingOffsets"), "latest", "earliest"),
        starting_timestamp=starting_timestamp,
        include_active_segment=_bool("includeActiveSegment", options.get("includeActiveSegment") or "false"),
        segments=_segments(options["segments"]) if options.get("segments") else None,
        chunks=_chunks(options["chunks"]) if options.get("chunks") else None,
        include_headers=includes_headers(options),
    )


def scan_log_dirs(log_dirs) -> dict[tuple[str, int], list]:
    """Every partition's segments (``storage.SegmentInfo``), in offset order."""
    from minikafka.storage import list_segments  # on the driver only: workers never scan directories

    by_partition: dict[tuple[str, int], list] = defaultdict(list)
    for log_dir in log_dirs:
        for info in list_segments(Path(log_dir)):
            by_partition[(info.topic, info.partition)].append(info)
    for segments in by_partition.values():
        segments.sort(key=lambda info: info.base_offset)
    return dict(by_partition)


def plan_slices(opts: ReadOptions) -> list[SegmentSlice]:
    """One slice per segment holding records in the requested range, in (topic, partition, offset) order."""
    if opts.segments is not None:
        return list(opts.segments)
    segments_by_partition = scan_log_dirs(opts.log_dirs)
    known_topics = {topic for topic, _ in segments_by_partition}
    if opts.topics is not None:
        missing = [t for t in opts.topics if t not in known_topics]
        if missing:
            raise ValueError(f"topic {missing[0]!r} not found in {', '.join(map(str, opts.log_dirs))}")
    slices = []
    for (topic, partition), segments in sorted(segments_by_partition.items()):
        if opts.topics is not None and topic not in opts.topics:
            continue
        if opts.partitions is not None and partition not in opts.partitions:
            continue
        if opts.assign is not None and (topic, partition) not in opts.assign:
            continue
        readable = [s for s in segments if s.closed or opts.include_active_segment]
        if not readable:
            continue
        start = opts.starting.get((topic, partition), EARLIEST)
        end = opts.ending.get((topic, partition), LATEST)
        if end == LATEST:
            end = readable[-1].next_offset
        start_timestamp = opts.starting_timestamp
        if start_timestamp is not None:
            # Kafka's offset-for-timestamp: the first segment whose largest timestamp reaches
            # the target holds the first such record; earlier segments are skipped whole.
            while readable and readable[0].max_timestamp < start_timestamp:
                readable.pop(0)
            start = EARLIEST
        for position, info in enumerate(readable):
            first = max(info.base_offset, start if start >= 0 else 0)
            last = min(info.next_offset, end)
            if first >= last:
                continue
            slices.append(SegmentSlice(
                topic=topic, partition=partition, log_path=str(info.log_path),
                base_offset=info.base_offset, start_offset=first, end_offset=last,
                start_timestamp=start_timestamp if position == 0 else None, size=info.size,
            ))
    return slices
