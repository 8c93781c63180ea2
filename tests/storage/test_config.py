"""LogConfig from Kafka's topic-level and broker-level names."""

import pytest

from minikafka.protocol.records import LOG_APPEND_TIME
from minikafka.storage import LogConfig


def test_topic_overrides_by_kafka_name():
    config = LogConfig.from_topic_configs(LogConfig(), {
        "segment.bytes": "4096", "segment.ms": "60000", "retention.ms": "-1", "retention.bytes": "1000000",
        "message.timestamp.type": "LogAppendTime", "message.timestamp.difference.max.ms": "5000",
        "max.message.bytes": "2000", "index.interval.bytes": "100", "segment.index.bytes": "1024",
        "flush.messages": "10", "flush.ms": "1000", "file.delete.delay.ms": "0", "cleanup.policy": "delete",
        "min.insync.replicas": "1", "compression.type": "producer",
    })
    assert (config.segment_bytes, config.segment_ms, config.retention_ms, config.retention_bytes) == (
        4096, 60000, -1, 1000000)
    assert (config.flush_interval_messages, config.flush_interval_ms, config.file_delete_delay_ms) == (10, 1000, 0)
    validation = config.validation_config()
    assert validation.timestamp_type == LOG_APPEND_TIME
    assert validation.max_timestamp_difference_ms == 5000
    assert validation.max_message_bytes == 2000


def test_base_is_not_modified():
    base = LogConfig(retention_ms=5)
    LogConfig.from_topic_configs(base, {"retention.ms": "6"})
    assert base.retention_ms == 5


@pytest.mark.parametrize("name,value", [
    ("unknown.config", "1"), ("segment.bytes", "abc"), ("segment.bytes", "10"), ("segment.ms", "0"),
    ("retention.ms", "-2"), ("message.timestamp.type", "WallClock"), ("cleanup.policy", "shred"),
    ("max.message.bytes", str(2**31)), ("min.insync.replicas", "0"), ("compression.type", "brotli"),
])
def test_bad_overrides_are_refused_with_their_name(name, value):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        LogConfig.from_topic_configs(LogConfig(), {name: value})


def test_compact_only_policy_keeps_data():
    assert not LogConfig.from_topic_configs(LogConfig(), {"cleanup.policy": "compact"}).deletes_old_segments
    assert LogConfig.from_topic_configs(LogConfig(), {"cleanup.policy": "compact,delete"}).deletes_old_segments


def test_the_cleaner_settings_are_topic_configs():
    config = LogConfig.from_topic_configs(LogConfig(), {
        "delete.retention.ms": "5", "min.compaction.lag.ms": "7", "min.cleanable.dirty.ratio": "0.01"})
    assert (config.delete_retention_ms, config.min_compaction_lag_ms, config.min_cleanable_dirty_ratio) == (5, 7, 0.01)
    assert LogConfig.from_topic_configs(LogConfig(), {"cleanup.policy": "delete,compact"}).compacts
    with pytest.raises(ValueError, match="min.cleanable.dirty.ratio"):
        LogConfig.from_topic_configs(LogConfig(), {"min.cleanable.dirty.ratio": "1.5"})
