"""Per-log configuration with Kafka's topic-level config names.

:class:`LogConfig` holds what the log enforces. :meth:`LogConfig.from_topic_configs` applies
topic overrides by their Kafka names (``segment.bytes``, ``retention.ms``, ...), refusing
unknown names and bad values with a readable ``ValueError`` (the broker answers
INVALID_CONFIG). The broker-wide defaults (``log.segment.bytes``, ...) are read by
``broker.config.BrokerConfig.log_config``, the one place that maps those names. A few Kafka topic configs that have no effect on a single broker without a
log cleaner are accepted, validated and persisted but not enforced; see ``_ACCEPTED_ONLY``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from minikafka.protocol import records

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
    producer_id_expiration_ms: int = 24 * 3600 * 1000  # broker-wide producer.id.expiration.ms, no topic name

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
        )

    @property
    def deletes_old_segments(self) -> bool:
        """Retention applies unless the topic asked for compaction only (never deleting)."""
        return "delete" in self.cleanup_policy.split(",")


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
    parts = [p.strip() for p in value.split(",")]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"{name}: {value!r} must be a list of 'delete' and 'compact'")
    return ",".join(parts)


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
}

# Kafka topic configs that clients commonly set but that change nothing here (one replica,
# no log cleaner, the broker stores what producers send). Validated and persisted only.
_ACCEPTED_ONLY: dict[str, Callable] = {
    "compression.type": _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "min.insync.replicas": _int(1),
    "unclean.leader.election.enable": _boolean,
    "preallocate": _boolean,
    "segment.jitter.ms": _long_at_least(0),
    "delete.retention.ms": _long_at_least(0),
    "min.compaction.lag.ms": _long_at_least(0),
    "min.cleanable.dirty.ratio": _text,
    "message.format.version": _text,
    "leader.replication.throttled.replicas": _text,
    "follower.replication.throttled.replicas": _text,
    "message.downconversion.enable": _boolean,
}
