"""The on-disk log: segments, offset and time indexes, logs, the log manager, checkpoints.

Kafka's own layout (``<log dir>/<topic>-<partition>/<base offset>.log|.index|.timeindex``),
synchronous, no network, driven by an injected :class:`Clock`.
"""

from storage.checkpoint import CorruptCheckpoint, OffsetCheckpointFile
from storage.clock import Clock, FakeClock, SystemClock
from storage.config import LogConfig
from storage.leader_epoch import LeaderEpochCache
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
from storage.log_manager import LogManager
from storage.names import InvalidTopicName, validate_topic_name
from storage.offline import list_segments
from storage.partition_metadata import new_topic_id, read_topic_id
from storage.snapshot import SnapshotStore
from storage.types import (
    AppendResult,
    CorruptPartitionMetadata,
    FileSlice,
    OffsetOutOfRange,
    SegmentInfo,
    TopicAlreadyExists,
    UnknownTopic,
)

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "AppendResult",
    "Clock",
    "CorruptCheckpoint",
    "CorruptPartitionMetadata",
    "FakeClock",
    "FileSlice",
    "InvalidTopicName",
    "LeaderEpochCache",
    "Log",
    "LogConfig",
    "LogManager",
    "OffsetCheckpointFile",
    "OffsetOutOfRange",
    "SegmentInfo",
    "SnapshotStore",
    "SystemClock",
    "TopicAlreadyExists",
    "UnknownTopic",
    "list_segments",
    "new_topic_id",
    "read_topic_id",
    "validate_topic_name",
]
