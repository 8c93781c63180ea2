"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs from kafka-python's
KafkaAdminClient, confluent-kafka's AdminClient and aiokafka's AIOKafkaAdminClient against a
single broker: effective values and their sources, changes that take effect on the running
topic and persist, and the refused cases, which change nothing."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient, NewTopic

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import MinikafkaBroker, kafka_request

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("admin-configs")
    with MinikafkaBroker(work, {"log.retention.hours": "100", "auto.create.topics.enable": "false"}) as running:
        yield running


@pytest.fixture(scope="module")
def confluent(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _topic_configs(admin, topic, keys=None, *, synonyms=False):
    found = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic, keys)],
                                   include_synonyms=synonyms, config_filter="all")
    return found["topic"][topic]


def _stored_overrides(broker, topic):
    text = (broker.log_dir / f"{topic}-0" / "topic-config.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_topic_configs_show_overrides_broker_settings_and_defaults(admin, new_topic):
    topic = new_topic("described")
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"segment.bytes": "1048576"})])
    configs = _topic_configs(admin, topic, synonyms=True)
    assert configs["segment.bytes"]["value"] == "1048576"
    assert configs["segment.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["synonyms"][0] == {"name": "segment.bytes", "value": "1048576",
                                                       "source": "DYNAMIC_TOPIC_CONFIG"}
    # retention.ms falls back on the broker's log.retention.hours, set in its properties.
    assert configs["retention.ms"]["value"] == str(100 * 3600 * 1000)
    assert configs["retention.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["retention.ms"]["synonyms"] == [
        {"name": "log.retention.hours", "value": "100", "source": "STATIC_BROKER_CONFIG"}]
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    assert not configs["retention.ms"]["read_only"]
    assert set(_topic_configs(admin, topic, ["retention.ms"])) == {"retention.ms"}


def test_confluent_describes_topic_and_broker(broker, confluent, admin, new_topic):
    topic = new_topic("confluent-described")
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "3600000"})])
    topic_resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    found = confluent.describe_configs([topic_resource, broker_resource])
    topic_configs = found[topic_resource].result(timeout=15)
    assert topic_configs["retention.ms"].value == "3600000"
    assert topic_configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    broker_configs = found[broker_resource].result(timeout=15)
    assert broker_configs["log.retention.hours"].value == "100"
    assert broker_configs["log.retention.hours"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert broker_configs["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    assert broker_configs["num.partitions"].is_read_only


def test_incremental_alter_takes_effect_at_once_and_persists(broker, admin, new_topic):
    topic = new_topic("altered")
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "3600000"})])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(topic, b"create time", timestamp_ms=1000).get(timeout=15)
    admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                          {"message.timestamp.type": "LogAppendTime"})])
    producer.send(topic, b"append time", timestamp_ms=1000).get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    stamped = [(m.value, m.timestamp_type, m.timestamp) for m in consumer]
    consumer.close()
    assert stamped[0] == (b"create time", 0, 1000)
    assert stamped[1][:2] == (b"append time", 1) and stamped[1][2] > 1000
    # Incremental: retention.ms stays.
    assert _stored_overrides(broker, topic) == {"retention.ms": "3600000", "message.timestamp.type": "LogAppendTime"}
    assert _topic_configs(admin, topic)["message.timestamp.type"]["value"] == "LogAppendTime"


def test_legacy_alter_replaces_every_override(broker, admin, new_topic):
    topic = new_topic("replaced")
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "3600000"})])
    admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic, {"segment.ms": "600000"})],
                        incremental=False, raise_on_unknown=False)
    configs = _topic_configs(admin, topic)
    assert configs["segment.ms"]["value"] == "600000"
    # kafka-python fills in the other modified keys itself before a non-incremental alter.
    assert configs["retention.ms"]["value"] == "3600000"
    assert _stored_overrides(broker, topic) == {"retention.ms": "3600000", "segment.ms": "600000"}


def test_confluent_incremental_append_and_delete(broker, confluent, admin, new_topic):
    topic = new_topic("appended")
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "3600000"})])
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    confluent.incremental_alter_configs([resource])[resource].result(timeout=15)
    assert _stored_overrides(broker, topic) == {"cleanup.policy": "delete,compact"}


def test_confluent_subtracts_the_last_cleanup_policy(broker, confluent, admin, new_topic):
    """An empty cleanup.policy is Kafka's empty list (ConfigDef parses "" so, and ValidList takes
    it): neither compacted nor trimmed by retention (confluent-kafka's own suite subtracts
    ``delete`` from the default)."""
    topic = new_topic("unpoliced")
    admin.create_topics([NewTopic(topic, 1, 1)])
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    confluent.incremental_alter_configs([resource])[resource].result(timeout=15)
    assert _stored_overrides(broker, topic) == {"cleanup.policy": ""}
    assert _topic_configs(admin, topic, ["cleanup.policy"])["cleanup.policy"]["value"] == ""


def test_refused_resources_change_nothing(broker, confluent, admin, new_topic):
    topic = new_topic("refused")
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "3600000"})])

    def refused(resource):
        with pytest.raises(KafkaException) as caught:
            confluent.incremental_alter_configs([resource])[resource].result(timeout=15)
        return caught.value.args[0].name()

    def alter(name, configs):
        return ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET) for key, value in configs.items()])

    # A good config beside a bad one is not applied either.
    assert refused(alter(topic, {"segment.ms": "600000", "retention.ms": "soon"})) == "INVALID_REQUEST"
    assert refused(alter(topic, {"segment.ms": "600000", "no.such.config": "1"})) == "INVALID_CONFIG"
    assert refused(alter("no-such-topic", {"segment.ms": "600000"})) == "UNKNOWN_TOPIC_OR_PART"
    append = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)])
    assert refused(append) == "INVALID_CONFIG"
    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
    assert refused(broker_resource) == "INVALID_REQUEST"
    # A null value (legacy AlterConfigs), of a topic or of the cluster's broker default.
    for resource_type, name, configs in ((2, topic, {"segment.ms": "600000", "retention.ms": None}),
                                         (4, "", {"log.retention.ms": None})):
        answer = kafka_request(broker.bootstrap, ApiKey.ALTER_CONFIGS, 0, {"resources": [
            {"resource_type": resource_type, "resource_name": name,
             "configs": [{"name": key, "value": value} for key, value in configs.items()]}], "validate_only": False})
        assert [(r.error_code, r.error_message) for r in answer.responses] == [
            (ErrorCode.INVALID_REQUEST, f"Null value not supported for : {list(configs)[-1]}")]
    assert _stored_overrides(broker, topic) == {"retention.ms": "3600000"}
    unknown = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
    with pytest.raises(KafkaException) as caught:
        confluent.describe_configs([unknown])[unknown].result(timeout=15)
    assert caught.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"


def test_validate_only_changes_nothing(broker, admin, new_topic):
    topic = new_topic("validated")
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "3600000"})])
    admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "60000"})],
                        validate_only=True)
    assert _topic_configs(admin, topic)["retention.ms"]["value"] == "3600000"


def test_aiokafka_describes_and_alters(broker, admin, new_topic):
    topic = new_topic("aiokafka")
    admin.create_topics([NewTopic(topic, 1, 1)])

    async def scenario():
        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            await client.alter_configs([AioConfigResource(AioConfigResourceType.TOPIC, topic,
                                                          {"retention.ms": "7200000"})])
            return await client.describe_configs([AioConfigResource(AioConfigResourceType.TOPIC, topic)])
        finally:
            await client.close()

    (response,) = asyncio.run(scenario())
    ((error_code, _, _, name, entries),) = response.resources
    assert (error_code, name) == (0, topic)
    values = {entry[0]: entry[1] for entry in entries}
    assert values["retention.ms"] == "7200000"
    assert _stored_overrides(broker, topic) == {"retention.ms": "7200000"}


def test_altered_configs_survive_a_restart(minikafka_broker_factory, new_topic):
    broker = minikafka_broker_factory()
    topic = new_topic("restarted")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic, {"retention.bytes": "1048576"})])
    admin.close()
    broker.restart()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    assert _topic_configs(admin, topic)["retention.bytes"]["value"] == "1048576"
    admin.close()
