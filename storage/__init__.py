"""The on-disk log: segments, offset and time indexes, logs, the log manager, checkpoints.

Kafka's own layout (``<log dir>/<topic>-<partition>/<base offset>.log|.index|.timeindex``),
synchronous, no network, driven by an injected :class:`Clock`.
"""

from minikafka.storage.checkpoint import CorruptCheckpoint, OffsetCheckpointFile
from minikafka.storage.clock import Clock, FakeClock, SystemClock
from minikafka.storage.config import LogConfig
from minikafka.storage.leader_epoch import LeaderEpochCache
from minikafka.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from minikafka.storage.log_manager import LogManager
from minikafka.storage.names import InvalidTopicName, validate_topic_name
from minikafka.storage.offline import list_segments
from minikafka.storage.partition_metadata import new_topic_id, read_topic_id
from minikafka.storage.snapshot import SnapshotStore
from minikafka.storage.types import (
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
    "MAX_TIMESTAMP",
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
