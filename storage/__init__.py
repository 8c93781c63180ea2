"""The on-disk log: segments, offset and time indexes, logs, the log manager, checkpoints.

Kafka's own layout (``<log dir>/<topic>-<partition>/<base offset>.log|.index|.timeindex``),
synchronous, no network, driven by an injected :class:`Clock`.
"""

from __future__ import annotations

import importlib

# Each public name and the module that defines it, imported on first access (PEP 562): a
# broker that needs one submodule (storage needs message sets, not the request schemas)
# does not pay at start-up for the package's others.
_WHERE = {
    "EARLIEST_TIMESTAMP": "minikafka.storage.log",
    "LATEST_TIMESTAMP": "minikafka.storage.log",
    "Log": "minikafka.storage.log",
    "AppendResult": "minikafka.storage.types",
    "CorruptPartitionMetadata": "minikafka.storage.types",
    "FileSlice": "minikafka.storage.types",
    "OffsetOutOfRange": "minikafka.storage.types",
    "SegmentInfo": "minikafka.storage.types",
    "TopicAlreadyExists": "minikafka.storage.types",
    "UnknownTopic": "minikafka.storage.types",
    "Clock": "minikafka.storage.clock",
    "FakeClock": "minikafka.storage.clock",
    "SystemClock": "minikafka.storage.clock",
    "CorruptCheckpoint": "minikafka.storage.checkpoint",
    "OffsetCheckpointFile": "minikafka.storage.checkpoint",
    "InvalidTopicName": "minikafka.storage.names",
    "validate_topic_name": "minikafka.storage.names",
    "LeaderEpochCache": "minikafka.storage.leader_epoch",
    "LogConfig": "minikafka.storage.config",
    "LogManager": "minikafka.storage.log_manager",
    "SnapshotStore": "minikafka.storage.snapshot",
    "list_segments": "minikafka.storage.offline",
    "new_topic_id": "minikafka.storage.partition_metadata",
    "read_topic_id": "minikafka.storage.partition_metadata",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
