"""Values storage hands to the layers above: file slices, append results, segment facts, errors."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Iterator, NamedTuple


class OffsetOutOfRange(Exception):
    """A read asked for an offset outside [log start offset, log end offset]."""


class TopicAlreadyExists(Exception):
    """create_topic for a topic that already has partitions (TOPIC_ALREADY_EXISTS)."""


class TooManyPartitions(ValueError):
    """More partitions than the process can keep open; the message names the limit."""


class UnknownTopic(KeyError):
    """An operation on a topic this broker does not hold (UNKNOWN_TOPIC_OR_PARTITION)."""


class CorruptPartitionMetadata(ValueError):
    """A ``partition.metadata`` file that is not Kafka's format (damage from outside: it is
    written atomically); the topic's identity cannot be guessed, so loading stops."""


class SegmentFile(io.FileIO):
    """A segment's ``.log`` file, opened read/write, shared by the segment and its readers.

    Retention may unlink the file while a fetch still holds a :class:`FileSlice` of it; the
    descriptor stays valid until the last reference goes, so such a file is closed by its last
    owner rather than by the log (no ResourceWarning: dropping it is the intended close).
    """

    def __del__(self) -> None:
        self.close()


class FileSlice(NamedTuple):
    """``length`` bytes of ``file`` from ``position``: message sets exactly as stored.

    The broker sends it with ``os.sendfile(sock, slice.fileno(), position, length)``; paths
    that must convert the bytes call :meth:`read_bytes`. Neither moves the file position.
    """

    file: io.FileIO
    position: int
    length: int

    def fileno(self) -> int:
        return self.file.fileno()

    def read_bytes(self) -> bytes:
        return b"".join(self.chunks(self.length))

    def chunks(self, size: int) -> Iterator[bytes]:
        """The slice's bytes in consecutive pieces of at most ``size``, each read when it is
        asked for; a file truncated under us (follower truncation) ends them early."""
        fd = self.file.fileno()
        position, remaining = self.position, self.length
        while remaining > 0:
            chunk = os.pread(fd, min(remaining, size), position)
            if not chunk:
                return
            yield chunk
            position += len(chunk)
            remaining -= len(chunk)


class AppendResult(NamedTuple):
    """Where an appended set landed. ``log_append_time`` is -1 under CreateTime."""

    first_offset: int
    last_offset: int
    log_append_time: int
    record_count: int


class SegmentInfo(NamedTuple):
    """What the export path needs to know about one segment.

    ``next_offset`` is one past the segment's last offset; ``max_timestamp`` its largest
    message timestamp, where a message without one (magic 0) counts at the time the broker
    appended it (see storage.segment), -1 when none is known (an empty segment, or a live
    active one listed by storage.offline before its time index records any); ``closed`` is
    False only for the active segment, which may still grow. ``topic_id`` is the partition's
    topic id (storage.partition_metadata), None for a directory from before topic ids that
    no broker has loaded since: a topic deleted and created again under the same name gets
    a new id, so (topic, topic_id, partition, offset) names a record for good.
    """

    topic: str
    partition: int
    base_offset: int
    next_offset: int
    log_path: Path
    size: int
    max_timestamp: int
    closed: bool
    topic_id: str | None = None
