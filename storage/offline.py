"""Read-only listing of segments for offline readers (the Spark export), broker or not.

Nothing here writes, truncates or rebuilds: a broker may be running on the same directory.
Facts come from the files as they are; an index that fails its sanity check is ignored and
the segment's entry heads are read instead. Each segment carries its partition's topic id
(``partition.metadata``; None for a directory from before topic ids, which is not written
here), so a reader can tell a topic deleted and created again under the same name.
"""

from __future__ import annotations

import os
from pathlib import Path

from minikafka.storage.index import CorruptIndex, OffsetIndex, TimeIndex
from minikafka.storage.names import DELETE_DIR_SUFFIX, parse_partition_dir_name
from minikafka.storage.partition_metadata import read_topic_id
from minikafka.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, iter_headers, segment_file_stem
from minikafka.storage.types import SegmentInfo


def list_segments(log_dir: Path) -> list[SegmentInfo]:
    """Segments under a log dir (every partition) or under one partition directory.

    Ordered by topic, partition and base offset. A partition's last segment is reported
    ``closed=False`` (a broker may still append to it); only closed segments are final.
    Raises CorruptPartitionMetadata (a ValueError) for an unreadable ``partition.metadata``.
    """
    log_dir = Path(log_dir)
    if any(name.endswith(LOG_SUFFIX) for name in os.listdir(log_dir)):
        parsed = parse_partition_dir_name(log_dir.name)
        if parsed is None:
            raise ValueError(f"{log_dir} holds segments but is not named <topic>-<partition>")
        return _partition_segments(log_dir, *parsed)
    found = []
    for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
        if not entry.is_dir(follow_symlinks=False) or entry.name.endswith(DELETE_DIR_SUFFIX):
            continue
        parsed = parse_partition_dir_name(entry.name)
        if parsed is not None:
            found.extend(_partition_segments(Path(entry.path), *parsed))
    return sorted(found, key=lambda info: (info.topic, info.partition, info.base_offset))


def _partition_segments(directory: Path, topic: str, partition: int) -> list[SegmentInfo]:
    """The partition's segments; ones a running broker deletes meanwhile are left out."""
    try:
        topic_id = read_topic_id(directory)
        names = os.listdir(directory)
    except FileNotFoundError:  # the topic is being deleted
        return []
    bases = sorted(
        int(name[:20]) for name in names
        if name.endswith(LOG_SUFFIX) and len(name) == 20 + len(LOG_SUFFIX) and name[:20].isdigit()
    )
    infos = []
    for i, base in enumerate(bases):
        stem = directory / segment_file_stem(base)
        log_path = stem.with_name(stem.name + LOG_SUFFIX)
        closed = i + 1 < len(bases)
        try:
            file = open(log_path, "rb")
        except FileNotFoundError:  # retention renamed it to .deleted
            continue
        with file:
            size = os.fstat(file.fileno()).st_size
            scanned_next, max_timestamp = _scan_facts(file.fileno(), stem, base, size, closed=closed)
        # A segment rolls at the log end, so a closed one ends where the next one starts.
        next_offset = bases[i + 1] if closed else scanned_next
        infos.append(SegmentInfo(topic, partition, base, next_offset, log_path, size, max_timestamp, closed,
                                 topic_id))
    return infos


def _scan_facts(fd: int, stem: Path, base: int, size: int, *, closed: bool) -> tuple[int | None, int]:
    """(next offset, largest timestamp): from the indexes plus the tail when they look
    sane, else from every entry head (the next offset is None when not scanned). A closed
    segment's last time-index entry is its largest timestamp (written at roll, counting
    messages without one at their append time), so its tail is only read for the active one."""
    start, max_timestamp, offset_of_max = 0, -1, base
    offset_index_path = stem.with_name(stem.name + INDEX_SUFFIX)
    time_index_path = stem.with_name(stem.name + TIME_INDEX_SUFFIX)
    if offset_index_path.exists() and time_index_path.exists():
        offset_index = OffsetIndex(offset_index_path, base, 1 << 62)
        time_index = TimeIndex(time_index_path, base, 1 << 62)
        try:
            offset_index.sanity_check(fd, size)
            time_index.sanity_check()
            if time_index.entries:
                max_timestamp, offset_of_max = time_index.last_entry()
                if closed:
                    return None, max_timestamp
                start = offset_index.lookup(offset_of_max)[1]
        except CorruptIndex:
            start, max_timestamp = 0, -1
        finally:
            offset_index.close()
            time_index.close()
    last_offset = None
    for head in iter_headers(fd, start, size):
        max_timestamp = max(max_timestamp, head.timestamp)
        last_offset = head.offset
    return (base if last_offset is None else last_offset + 1), max_timestamp
