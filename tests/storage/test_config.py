"""LogConfig from Kafka's topic-level and broker-level names."""

import pytest

from protocol.records import LOG_APPEND_TIME
from storage import LogConfig


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


def test_broker_defaults_and_precedence():
    config = LogConfig.from_broker_configs({
        "log.segment.bytes": "1048576", "log.retention.hours": "1", "log.retention.minutes": "30",
        "log.roll.hours": "2", "message.max.bytes": "5000", "listeners": "PLAINTEXT://:9092",
    })
    assert config.segment_bytes == 1048576
    assert config.retention_ms == 30 * 60_000  # minutes beat hours
    assert config.segment_ms == 2 * 3600_000
    assert config.max_message_bytes == 5000
    assert LogConfig.from_broker_configs({"log.retention.hours": "1", "log.retention.ms": "10"}).retention_ms == 10
    assert LogConfig.from_broker_configs({"log.retention.ms": "-1"}).retention_ms == -1


@pytest.mark.parametrize("properties, field, expected", [
    ({"log.roll.ms": "60000"}, "segment_ms", 60000),
    # log.roll.ms beats log.roll.hours, whichever comes first in the file
    ({"log.roll.ms": "60000", "log.roll.hours": "2"}, "segment_ms", 60000),
    ({"log.roll.hours": "2", "log.roll.ms": "60000"}, "segment_ms", 60000),
    ({"log.flush.interval.messages": "10"}, "flush_interval_messages", 10),
    ({"log.flush.interval.messages": str(2**63 - 1)}, "flush_interval_messages", None),  # Kafka's "never"
    ({"log.flush.interval.ms": "1000"}, "flush_interval_ms", 1000),
    ({}, "flush_interval_messages", None),  # unset: the page cache decides
    ({}, "flush_interval_ms", None),
])
def test_broker_roll_and_flush_names(properties, field, expected):
    assert getattr(LogConfig.from_broker_configs(properties), field) == expected


@pytest.mark.parametrize("name", ["log.roll.ms", "log.flush.interval.messages", "log.flush.interval.ms"])
def test_bad_broker_roll_and_flush_values_name_the_setting(name):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        LogConfig.from_broker_configs({name: "-5"})


def test_compact_only_policy_keeps_data():
    assert not LogConfig.from_topic_configs(LogConfig(), {"cleanup.policy": "compact"}).deletes_old_segments
    assert LogConfig.from_topic_configs(LogConfig(), {"cleanup.policy": "compact,delete"}).deletes_old_segments
