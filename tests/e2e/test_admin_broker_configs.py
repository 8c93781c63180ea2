"""Dynamic broker configs (Kafka's DynamicBrokerConfig) on a single broker, from the clients'
admin interfaces: the topic defaults set for this broker or the cluster default take effect on
running logs at once, show as DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG with their
synonyms, and survive a restart; read-only settings and bad values are refused and change
nothing."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import NewTopic as ConfluentNewTopic
from kafka import KafkaProducer
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import MessageSizeTooLargeError

from minikafka.protocol.apis import ApiKey
from minikafka.testing import MinikafkaBroker, kafka_request

pytestmark = pytest.mark.timeout(120)

DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC = 2, 3, 4


def _described(broker, resource_type: int, name: str, keys: list[str]) -> dict[str, tuple]:
    answer = kafka_request(broker.bootstrap, ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [
        {"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True})
    (result,) = answer.results
    assert result.error_code == 0, result.error_message
    return {c.name: (c.value, c.config_source, c.read_only, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs}


def _too_large(broker, topic: str, size: int) -> bool:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=10_000_000, retries=0)
    try:
        producer.send(topic, b"x" * size).get(timeout=15)
    except MessageSizeTooLargeError:
        return True
    finally:
        producer.close()
    return False


def test_dynamic_topic_defaults_take_effect_at_once_and_persist(tmp_path):
    with MinikafkaBroker(tmp_path / "b", {"log.retention.hours": "100"}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic("plain", 1, 1)])
        assert not _too_large(broker, "plain", 200_000)
        admin.alter_configs([KpConfigResource(ConfigResourceType.BROKER, "0",
                                              {"message.max.bytes": "100000", "log.retention.ms": "3600000"})])
        admin.close()
        assert _too_large(broker, "plain", 200_000)   # the running log, without a restart
        confluent = AdminClient({"bootstrap.servers": broker.bootstrap})
        # The cluster default (the empty name), which librdkafka does not let its callers name.
        answer = kafka_request(broker.bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "log.segment.bytes", "config_operation": 0, "value": "2000000"}]}], "validate_only": False})
        assert [r.error_code for r in answer.responses] == [0]

        def check():
            described = _described(broker, 4, "0", ["log.retention.ms", "log.segment.bytes", "num.partitions"])
            assert described["log.retention.ms"][:3] == ("3600000", DYNAMIC_BROKER, False)
            assert described["log.segment.bytes"][:3] == ("2000000", DYNAMIC_DEFAULT, False)
            assert described["num.partitions"][2] is True
            assert _described(broker, 4, "", None) == {"log.segment.bytes": (
                "2000000", DYNAMIC_DEFAULT, False, [("log.segment.bytes", "2000000", DYNAMIC_DEFAULT)])}
            topic = _described(broker, 2, "plain", ["retention.ms", "segment.bytes"])
            assert topic["retention.ms"][:2] == ("3600000", DYNAMIC_BROKER)
            assert topic["retention.ms"][3] == [("log.retention.ms", "3600000", DYNAMIC_BROKER),
                                                ("log.retention.hours", "100", STATIC)]
            assert topic["segment.bytes"][:2] == ("2000000", DYNAMIC_DEFAULT)

        check()
        broker.restart()
        check()
        assert _too_large(broker, "plain", 200_000)

        # Back to the static settings once the dynamic ones are deleted.
        delete = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
        confluent.incremental_alter_configs([delete])[delete].result(timeout=15)
        assert not _too_large(broker, "plain", 200_000)


def test_read_only_settings_and_bad_values_are_refused(tmp_path):
    with MinikafkaBroker(tmp_path / "b", {}) as broker:
        confluent = AdminClient({"bootstrap.servers": broker.bootstrap})
        for configs in ({"num.partitions": "3"}, {"log.retention.ms": "soon"},
                        {"log.retention.ms": "60000", "broker.id": "7"}):
            resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
            with pytest.raises(KafkaException, match="INVALID_REQUEST|Invalid config|Cannot update"):
                confluent.incremental_alter_configs([resource])[resource].result(timeout=15)
        answer = kafka_request(broker.bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": 4, "resource_name": "5", "configs": [
                {"name": "log.retention.ms", "config_operation": 0, "value": "60000"}]}], "validate_only": False})
        assert [r.error_code for r in answer.responses] == [42]  # INVALID_REQUEST: another broker's
        described = _described(broker, 4, "0", ["log.retention.ms", "num.partitions"])
        assert described["log.retention.ms"][1] == 5 and described["num.partitions"][1] == 5  # DEFAULT_CONFIG
        assert not (broker.log_dir / "dynamic-broker-configs.json").exists()


def _distinct_keys_when_cleaned(broker, topic: str, records: int) -> bool:
    """Whether the compacted topic holds fewer records than were written (the cleaner ran)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000)
    try:
        return len(list(consumer)) < records
    finally:
        consumer.close()


def test_cleaner_settings_are_dynamic_and_restart_the_cleaner(tmp_path):
    """The log cleaner's settings (Kafka's LogCleaner.ReconfigurableConfigs) change without a
    restart: a cleaner asleep for an hour of log.cleaner.backoff.ms wakes under the new backoff,
    as Kafka's reconfigure stops its cleaner threads and starts new ones."""
    import time

    with MinikafkaBroker(tmp_path / "b", {"log.cleaner.backoff.ms": "3600000"}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic("compacted", 1, 1, topic_configs={
            "cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"})])
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        for i in range(200):
            producer.send("compacted", key=b"k%d" % (i % 5), value=b"v" * 50).get(timeout=15)
        producer.close()
        assert not _distinct_keys_when_cleaned(broker, "compacted", 200)
        admin.alter_configs([KpConfigResource(ConfigResourceType.BROKER, "0", {
            "log.cleaner.backoff.ms": "50", "log.cleaner.io.max.bytes.per.second": "100000000.0",
            "log.cleaner.dedupe.buffer.size": "1000000"})])
        admin.close()
        described = _described(broker, 4, "0", ["log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size"])
        assert described["log.cleaner.backoff.ms"][:3] == ("50", DYNAMIC_BROKER, False)
        assert described["log.cleaner.dedupe.buffer.size"][:3] == ("1000000", DYNAMIC_BROKER, False)
        deadline = time.monotonic() + 60
        while not _distinct_keys_when_cleaned(broker, "compacted", 200):
            assert time.monotonic() < deadline, "the cleaner never ran under the new backoff"


def test_cleaner_threads_change_within_kafkas_bounds(tmp_path):
    """Kafka's LogCleaner.validateReconfiguration: at least 1, at most double and at least half
    the current count; anything else is INVALID_REQUEST and changes nothing."""
    with MinikafkaBroker(tmp_path / "b", {"log.cleaner.threads": "2"}) as broker:
        def alter(value: str) -> int:
            answer = kafka_request(broker.bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
                {"resource_type": 4, "resource_name": "0", "configs": [
                    {"name": "log.cleaner.threads", "config_operation": 0, "value": value}]}],
                "validate_only": False})
            return answer.responses[0].error_code

        assert [alter(v) for v in ("0", "5", "4")] == [42, 42, 0]
        assert _described(broker, 4, "0", ["log.cleaner.threads"])["log.cleaner.threads"][:3] == (
            "4", DYNAMIC_BROKER, False)


def _advertised_hosts(bootstrap: str) -> set[str]:
    """The broker addresses a new kafka-python client learns from Metadata."""
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {f"{b['host']}:{b['port']}" for b in client.describe_cluster()["brokers"]}
    finally:
        client.close()


def test_advertised_listeners_change_live_for_this_broker_only(tmp_path):
    """Kafka 2.x's DynamicListenerConfig: a broker's advertised.listeners is a per-broker dynamic
    setting. Clients learn the new address from Metadata at once (and use it), DescribeConfigs
    shows it as DYNAMIC_BROKER_CONFIG, it survives a restart; a listener name that is not in
    ``listeners``, or the cluster default, is refused and changes nothing."""
    with MinikafkaBroker(tmp_path / "b", {}) as broker:
        assert _described(broker, 4, "0", ["advertised.listeners"])["advertised.listeners"][2] is False  # read_only
        renamed = f"localhost:{broker.port}"  # the same socket, by another name
        confluent = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[ConfigEntry(
            "advertised.listeners", f"SSL://localhost:{broker.port}", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException, match="SSL is not one of the listeners"):
            confluent.incremental_alter_configs([resource])[resource].result(timeout=15)
        # The cluster default (confluent-kafka refuses an empty broker name itself).
        answer = kafka_request(broker.bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "advertised.listeners", "config_operation": 0, "value": f"PLAINTEXT://{renamed}"}]}],
            "validate_only": False})
        assert [r.error_code for r in answer.responses] == [42]  # INVALID_REQUEST
        assert _advertised_hosts(broker.bootstrap) == {broker.bootstrap}

        resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry("advertised.listeners", f"PLAINTEXT://{renamed}", incremental_operation=AlterConfigOpType.SET)])
        confluent.incremental_alter_configs([resource])[resource].result(timeout=15)
        assert _advertised_hosts(broker.bootstrap) == {renamed}
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        assert producer.send("renamed", b"through the new address").get(timeout=15).offset == 0
        producer.close()
        value, source, _, _ = _described(broker, 4, "0", ["advertised.listeners"])["advertised.listeners"]
        assert (value, source) == (f"PLAINTEXT://{renamed}", DYNAMIC_BROKER)
        broker.restart()
        assert _advertised_hosts(broker.bootstrap) == {renamed}


def test_min_insync_replicas_has_a_cluster_default_only_when_set(tmp_path):
    """``min.insync.replicas`` is a dynamic topic default as in Kafka 1.1+ (DynamicLogConfig). The
    broker writes no cluster default of its own: Kafka 4.1's KRaft controller does when it enables
    ELR (KIP-966), which confluent-kafka-python's test_incremental_alter_configs expects; one set
    through the admin API shows on every topic as DYNAMIC_DEFAULT_BROKER_CONFIG, as there."""
    with MinikafkaBroker(tmp_path / "b", {}) as broker:
        confluent = AdminClient({"bootstrap.servers": broker.bootstrap})
        confluent.create_topics([ConfluentNewTopic("guarded", 1, 1)])["guarded"].result(timeout=15)
        topic = ConfigResource(ConfigResource.Type.TOPIC, "guarded")

        def set_by_hand() -> list[str]:
            entries = confluent.describe_configs([topic])[topic].result(timeout=15).values()
            return sorted(str(entry) for entry in entries if not entry.is_default)

        assert "min.insync.replicas" not in " ".join(set_by_hand())
        answer = kafka_request(broker.bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "min.insync.replicas", "config_operation": 0, "value": "1"}]}], "validate_only": False})
        assert [r.error_code for r in answer.responses] == [0]
        assert set_by_hand() == ['min.insync.replicas="1"']
        assert _described(broker, 2, "guarded", ["min.insync.replicas"])["min.insync.replicas"][:2] == (
            "1", DYNAMIC_DEFAULT)
