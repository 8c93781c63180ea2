"""Per-log configuration with Kafka's topic-level config names.

:class:`LogConfig` holds what the log enforces. :meth:`LogConfig.from_topic_configs` applies
topic overrides by their Kafka names (``segment.bytes``, ``retention.ms``, ...), refusing
unknown names and bad values with a readable ``ValueError`` (the broker answers
INVALID_CONFIG). The broker-wide defaults (``log.segment.bytes``, ...) are read by
``broker.config.BrokerConfig.log_config``, the one place that maps those names. A few Kafka
topic configs that have no effect here are accepted, validated and persisted but not
enforced; see ``_ACCEPTED_ONLY``.
"""

from __future__ import annotations

import re
from typing import Callable, NamedTuple

from minikafka.protocol import records
from minikafka.protocol.compression import Codec

# Re-exported: the storage contract lists these value types beside LogConfig.
from minikafka.storage.types import AppendResult, FileSlice, OffsetOutOfRange, SegmentInfo  # noqa: F401

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
_MAX_LONG = 2**63 - 1
_MAX_INT = 2**31 - 1
# Smallest legal message on disk: 12-byte offset+size prefix + 14-byte magic-0 message.
_MIN_ENTRY_BYTES = 26


class LogConfig(NamedTuple):
    """Settings one partition's log runs with (Kafka topic config name in each comment)."""

    segment_bytes: int = 1 << 30                      # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000            # segment.ms
    segment_index_bytes: int = 10 * 1024 * 1024       # segment.index.bytes
    index_interval_bytes: int = 4096                  # index.interval.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000          # retention.ms (-1: unlimited)
    retention_bytes: int = -1                         # retention.bytes (-1: unlimited)
    flush_interval_messages: int | None = None        # flush.messages (None: page cache)
    flush_interval_ms: int | None = None              # flush.ms (None: page cache)
    file_delete_delay_ms: int = 60000                 # file.delete.delay.ms
    message_timestamp_type: str = CREATE_TIME         # message.timestamp.type
    message_timestamp_difference_max_ms: int = _MAX_LONG  # message.timestamp.difference.max.ms
    max_message_bytes: int = 1048588                  # max.message.bytes
    cleanup_policy: str = "delete"                    # cleanup.policy
    delete_retention_ms: int = 24 * 3600 * 1000       # delete.retention.ms
    min_compaction_lag_ms: int = 0                    # min.compaction.lag.ms
    min_cleanable_dirty_ratio: float = 0.5            # min.cleanable.dirty.ratio
    producer_id_expiration_ms: int = 24 * 3600 * 1000  # broker-wide producer.id.expiration.ms, no topic name
    message_format_version: str = "3.0"               # message.format.version (see record_magic)
    compression_type: str = "producer"                # compression.type (magic 2 logs only)

    @classmethod
    def from_topic_configs(cls, base: "LogConfig", overrides: dict[str, str]) -> "LogConfig":
        """``base`` with Kafka topic-level ``overrides`` applied; ValueError names the bad one."""
        changes = {}
        for name, value in overrides.items():
            value = value if isinstance(value, str) else str(value)
            if name in _TOPIC_CONFIGS:
                field, parse = _TOPIC_CONFIGS[name]
                changes[field] = parse(value, name)
            elif name in _ACCEPTED_ONLY:
                _ACCEPTED_ONLY[name](value, name)
            else:
                raise ValueError(f"unknown topic config {name!r}")
        return base._replace(**changes)

    def validation_config(self) -> records.ValidationConfig:
        """The protocol layer's ValidationConfig for appends to this log."""
        return records.ValidationConfig(
            max_message_bytes=self.max_message_bytes,
            timestamp_type=(records.LOG_APPEND_TIME if self.message_timestamp_type == LOG_APPEND_TIME
                            else records.CREATE_TIME),
            max_timestamp_difference_ms=self.message_timestamp_difference_max_ms,
            magic=self.record_magic,
            codec=_COMPRESSION_TYPES[self.compression_type],
        )

    def kafka_values(self) -> dict[str, str]:
        """The settings enforced here as Kafka's topic configs show them (DescribeConfigs):
        name -> value as text, "no limit" as Kafka's Long.MAX_VALUE."""
        values = {}
        for name, (field, _) in _TOPIC_CONFIGS.items():
            value = getattr(self, field)
            values[name] = str(_MAX_LONG if value is None else value)
        return values

    @property
    def record_magic(self) -> int:
        """The magic appends are written in: 2 from ``message.format.version`` 0.11.0 on,
        else 1, this broker's magic 0/1 log (``protocol.records``), which keeps the magic 0 or 1
        each producer sends and converts magic 2 batches to magic 1 (so 0.9.0/0.10.0, magic 0
        in Kafka, are served as that log too: what every topic was before magic 2 was stored)."""
        return message_format_magic(self.message_format_version)

    @property
    def deletes_old_segments(self) -> bool:
        """Retention applies unless the topic asked for compaction only (never deleting)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        """The log cleaner keeps the latest record per key (storage.cleaner)."""
        return "compact" in self.cleanup_policy.split(",")


# Kafka's ApiVersion names before 0.11.0 and the magic each wrote; every later version
# (0.11.0, 1.0 ... 3.x, with or without an -IVn suffix) writes magic 2. Kafka 3.0 ignores the
# setting under inter.broker.protocol.version 3.0; it is honoured here because topics of the
# older formats are what this broker's older clients and readers are built around.
_MAGIC_0_VERSIONS = ("0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0")
_MAGIC_1_VERSIONS = ("0.10.1", "0.10.2")


def message_format_magic(version: str) -> int:
    """The record magic a ``message.format.version`` value writes (ValueError if it is not a
    Kafka version)."""
    parts = version.split("-")[0].split(".")
    if len(parts) < 2 or not all(part.isdigit() for part in parts) or (parts[0] == "0" and len(parts) < 3):
        raise ValueError(f"message.format.version: {version!r} is not a Kafka version such as 0.10.2 or 2.8")
    release = ".".join(parts[:3])
    if release in _MAGIC_0_VERSIONS:
        return 0
    if release in _MAGIC_1_VERSIONS:
        return 1
    if parts[0] == "0" and int(parts[1]) < 11:
        raise ValueError(f"message.format.version: {version!r} is not a Kafka version")
    return 2


def _message_format_version(value: str, name: str) -> str:
    message_format_magic(value)
    return value


def _long(value: str, name: str, *, minimum: int, maximum: int = _MAX_LONG) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not an integer") from None
    if not minimum <= number <= maximum:
        raise ValueError(f"{name}: {number} is out of range [{minimum}, {maximum}]")
    return number


def _int(minimum: int) -> Callable[[str, str], int]:
    return lambda value, name: _long(value, name, minimum=minimum, maximum=_MAX_INT)


def _long_at_least(minimum: int) -> Callable[[str, str], int]:
    return lambda value, name: _long(value, name, minimum=minimum)


def _optional_long(value: str, name: str) -> int | None:
    number = _long(value, name, minimum=0)
    return None if number == _MAX_LONG else number


def _timestamp_type(value: str, name: str) -> str:
    if value not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"{name}: {value!r} is neither {CREATE_TIME} nor {LOG_APPEND_TIME}")
    return value


def _cleanup_policy(value: str, name: str) -> str:
    if not value.strip():
        return ""  # Kafka's empty list (ConfigDef reads "" so): neither deleted nor compacted
    parts = [p.strip() for p in value.split(",")]
    if any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"{name}: {value!r} must be a list of 'delete' and 'compact'")
    return ",".join(parts)


def _ratio(value: str, name: str) -> float:
    try:
        number = float(value.strip())
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not a number") from None
    if not 0 <= number <= 1:
        raise ValueError(f"{name}: {number} is out of range [0, 1]")
    return number


def _one_of(*choices: str) -> Callable[[str, str], str]:
    def check(value: str, name: str) -> str:
        if value not in choices:
            raise ValueError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        return value

    return check


def _boolean(value: str, name: str) -> str:
    if value.lower() not in ("true", "false"):
        raise ValueError(f"{name}: {value!r} is not true or false")
    return value.lower()


def _text(value: str, name: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError(f"{name}: value must be a single line")
    return value


def _throttled_replicas(value: str, name: str) -> str:
    """Kafka's ThrottledReplicaListValidator: ``*``, or ``partition:broker`` entries (empty
    ones allowed, as in Kafka's list). The replication throttles read it (replication.quota)."""
    entries = [entry.strip() for entry in value.split(",")]
    if entries == ["*"] or all(not entry or re.fullmatch(r"\d+:\d+", entry) for entry in entries):
        return value
    raise ValueError(f"{name} must be the literal '*' or a list of replicas in the following format: "
                     "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


# compression.type's values and the codec each stores records in (producer: the producer's)
_COMPRESSION_TYPES = {"uncompressed": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4,
                      "zstd": Codec.ZSTD, "producer": None}

# Kafka name -> (LogConfig field, parser)
_TOPIC_CONFIGS: dict[str, tuple[str, Callable]] = {
    "segment.bytes": ("segment_bytes", _int(_MIN_ENTRY_BYTES)),
    "segment.ms": ("segment_ms", _long_at_least(1)),
    # 24 bytes: room for one time-index entry plus the slot reserved for the roll.
    "segment.index.bytes": ("segment_index_bytes", _int(24)),
    "index.interval.bytes": ("index_interval_bytes", _int(0)),
    "retention.ms": ("retention_ms", _long_at_least(-1)),
    "retention.bytes": ("retention_bytes", _long_at_least(-1)),
    "flush.messages": ("flush_interval_messages", _optional_long),
    "flush.ms": ("flush_interval_ms", _optional_long),
    "file.delete.delay.ms": ("file_delete_delay_ms", _long_at_least(0)),
    "message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", _long_at_least(0)),
    "max.message.bytes": ("max_message_bytes", _int(0)),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", _long_at_least(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long_at_least(0)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "message.format.version": ("message_format_version", _message_format_version),
    "compression.type": ("compression_type", _one_of(*_COMPRESSION_TYPES)),
}

# Kafka topic configs the log does not apply: validated and persisted here, and read from the
# topic's overrides where the broker applies them (min.insync.replicas, the replication
# throttles' replica lists) or changing nothing (the broker stores what producers send).
_ACCEPTED_ONLY: dict[str, Callable] = {
    "min.insync.replicas": _int(1),
    "unclean.leader.election.enable": _boolean,
    "preallocate": _boolean,
    "segment.jitter.ms": _long_at_least(0),
    "leader.replication.throttled.replicas": _throttled_replicas,
    "follower.replication.throttled.replicas": _throttled_replicas,
    "message.downconversion.enable": _boolean,
}

# Every topic config name a topic may set (enforced or accepted only).
TOPIC_CONFIG_NAMES = frozenset(_TOPIC_CONFIGS) | frozenset(_ACCEPTED_ONLY)
