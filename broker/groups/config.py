"""The group coordinator's settings, under Kafka's names where Kafka has them.

| key | default | meaning |
|---|---|---|
| ``group.min.session.timeout.ms`` | 6000 | smallest session timeout a JoinGroup may ask for |
| ``group.max.session.timeout.ms`` | 300000 | largest session timeout a JoinGroup may ask for |
| ``group.initial.rebalance.delay.ms`` | 0 | wait this long for more members before the first rebalance of an empty group (Kafka's default is 3000; a test broker wants the lone consumer assigned at once) |
| ``offsets.topic.num.partitions`` | 4 | partitions of ``__consumer_offsets`` when it is created (Kafka: 50); an existing topic keeps its count |
| ``offsets.topic.segment.bytes`` | 104857600 | segment size of ``__consumer_offsets`` |
| ``offsets.topic.replication.factor`` | 3 | in a cluster, replicas of each ``__consumer_offsets`` partition; the topic is created once this many brokers are live (until then COORDINATOR_NOT_AVAILABLE). A single broker ignores it |
| ``offsets.commit.required.acks`` | -1 | in a cluster, -1 answers an OffsetCommit once every ISR member has it (below the high watermark), 1 once the leader has |
| ``offsets.commit.timeout.ms`` | 5000 | in a cluster, how long an OffsetCommit waits for that; then COORDINATOR_NOT_AVAILABLE |
| ``offsets.retention.minutes`` | 1440 | committed offsets expire this long after their commit (OffsetCommit v2 may ask for another retention) |
| ``offsets.retention.check.interval.ms`` | 600000 | how often expired offsets are removed |
| ``offset.metadata.max.bytes`` | 4096 | longest metadata string of a commit (longer: OFFSET_METADATA_TOO_LARGE) |
| ``offsets.snapshot.interval.events`` | 10000 | write a partition's snapshot after this many events since the last one (minikafka) |
| ``offsets.snapshot.interval.bytes`` | 10485760 | ... or after this many bytes of events since the last one (minikafka) |

A snapshot is also written at clean shutdown when a partition has events after its last one.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class GroupConfigError(ValueError):
    """A group coordinator setting with an unusable value. (``broker.config`` builds its key
    table from ``GroupConfig._KEYS`` and validates these keys first, so this module must not
    import it.)"""


class GroupConfig(NamedTuple):
    """Typed group coordinator settings (see the module docstring for the key table)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 300000
    initial_rebalance_delay_ms: int = 0
    offsets_topic_num_partitions: int = 4
    offsets_topic_segment_bytes: int = 104857600
    offsets_topic_replication_factor: int = 3
    offsets_commit_required_acks: int = -1
    offsets_commit_timeout_ms: int = 5000
    offsets_retention_ms: int = 1440 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    snapshot_interval_events: int = 10000
    snapshot_interval_bytes: int = 10 * 1024 * 1024

    # (Kafka name, field, minimum, multiplier from the key's unit to the field's)
    _KEYS = (
        ("group.min.session.timeout.ms", "min_session_timeout_ms", 0, 1),
        ("group.max.session.timeout.ms", "max_session_timeout_ms", 0, 1),
        ("group.initial.rebalance.delay.ms", "initial_rebalance_delay_ms", 0, 1),
        ("offsets.topic.num.partitions", "offsets_topic_num_partitions", 1, 1),
        ("offsets.topic.segment.bytes", "offsets_topic_segment_bytes", 1024, 1),
        ("offsets.topic.replication.factor", "offsets_topic_replication_factor", 1, 1),
        ("offsets.commit.required.acks", "offsets_commit_required_acks", -1, 1),
        ("offsets.commit.timeout.ms", "offsets_commit_timeout_ms", 1, 1),
        ("offsets.retention.minutes", "offsets_retention_ms", 1, 60 * 1000),
        ("offsets.retention.check.interval.ms", "offsets_retention_check_interval_ms", 1, 1),
        ("offset.metadata.max.bytes", "offset_metadata_max_bytes", 0, 1),
        ("offsets.snapshot.interval.events", "snapshot_interval_events", 1, 1),
        ("offsets.snapshot.interval.bytes", "snapshot_interval_bytes", 1, 1),
    )

    @classmethod
    def from_broker_config(cls, config: Any) -> "GroupConfig":
        """Read the keys given explicitly to a ``BrokerConfig`` (``is_set(name)``, ``get(name)``:
        the typed value of a key in the broker's table or the raw string of a passthrough key).
        Keys left unset take the defaults above, which are the coordinator's own."""
        values: dict[str, int] = {}
        for name, field_name, minimum, unit in cls._KEYS:
            if not config.is_set(name):
                continue
            raw = config.get(name)
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise GroupConfigError(f"{name}: {raw!r} is not an integer") from None
            if value < minimum:
                raise GroupConfigError(f"{name}: {value} is below the minimum {minimum}")
            values[field_name] = value * unit
        result = cls(**values)
        if result.offsets_commit_required_acks not in (-1, 1):
            # Kafka refuses 0 too: a commit nobody waits for could be lost unanswered.
            raise GroupConfigError(f"offsets.commit.required.acks: {result.offsets_commit_required_acks} "
                                   f"is neither -1 (all in-sync replicas) nor 1 (the leader)")
        if result.min_session_timeout_ms > result.max_session_timeout_ms:
            raise GroupConfigError("group.min.session.timeout.ms is above group.max.session.timeout.ms")
        return result

