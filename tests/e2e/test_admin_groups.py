"""DeleteGroups and OffsetDelete from kafka-python's KafkaAdminClient and confluent-kafka's
AdminClient against a single broker: an empty group goes with its offsets, for good (a restart
does not bring it back); a group with members stays (NON_EMPTY_GROUP), as do the offsets of
the topics its members consume (GROUP_SUBSCRIBED_TO_TOPIC)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import kafka_request

pytestmark = pytest.mark.timeout(120)


def _commit(broker, group, offsets):
    """Commit ``{TopicPartition: offset}`` outside group management, as a tool would."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    consumer.commit({tp: OffsetAndMetadata(offset, "", -1) for tp, offset in offsets.items()})
    consumer.close()


def _committed(broker, group, partition):
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    found = consumer.committed(partition)
    consumer.close()
    return found


def test_kafka_python_deletes_empty_groups(broker, admin, new_topic):
    topic = new_topic("grouped")
    admin.create_topics([NewTopic(topic, 1, 1)])
    _commit(broker, "emptied", {TopicPartition(topic, 0): 5})
    assert dict(admin.delete_groups(["emptied", "never-seen"])) == {"emptied": "OK", "never-seen": "GroupIdNotFoundError"}
    assert _committed(broker, "emptied", TopicPartition(topic, 0)) is None


def test_confluent_refuses_a_group_with_members(broker, admin, new_topic):
    topic = new_topic("joined")
    admin.create_topics([NewTopic(topic, 1, 1)])
    member = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id="busy", consumer_timeout_ms=2000)
    list(member)  # joined
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
        client.delete_consumer_groups(["busy"])["busy"].result(timeout=15)
    assert dict(admin.delete_groups(["busy"])) == {"busy": "NonEmptyGroupError"}
    member.close()
    client.delete_consumer_groups(["busy"])["busy"].result(timeout=15)


def test_offsets_of_consumed_topics_stay(broker, admin, new_topic):
    consumed, other = new_topic("consumed"), new_topic("other")
    admin.create_topics([NewTopic(consumed, 1, 1), NewTopic(other, 1, 1)])
    member = KafkaConsumer(consumed, bootstrap_servers=broker.bootstrap, group_id="partial",
                           enable_auto_commit=False, consumer_timeout_ms=2000)
    list(member)  # joined
    member.commit({TopicPartition(consumed, 0): OffsetAndMetadata(1, "", -1),
                   TopicPartition(other, 0): OffsetAndMetadata(2, "", -1)})
    answer = admin.delete_group_offsets("partial", [TopicPartition(consumed, 0), TopicPartition(other, 0),
                                                    TopicPartition(other, 7)])
    assert {tp: error.__name__ for tp, error in answer.items()} == {
        TopicPartition(consumed, 0): "GroupSubscribedToTopicError", TopicPartition(other, 0): "NoError",
        TopicPartition(other, 7): "UnknownTopicOrPartitionError"}
    assert member.committed(TopicPartition(consumed, 0)) == 1
    assert member.committed(TopicPartition(other, 0)) is None
    member.close()
    missing = kafka_request(broker.bootstrap, ApiKey.OFFSET_DELETE, 0, {"group_id": "never-seen", "topics": [
        {"name": other, "partitions": [{"partition_index": 0}]}]})
    assert (missing.error_code, missing.topics) == (ErrorCode.GROUP_ID_NOT_FOUND, [])


def test_a_deleted_group_stays_deleted_after_a_restart(minikafka_broker_factory, new_topic):
    broker = minikafka_broker_factory()
    topic = new_topic("restarted")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    _commit(broker, "gone", {TopicPartition(topic, 0): 3})
    _commit(broker, "kept", {TopicPartition(topic, 0): 4})
    assert dict(admin.delete_groups(["gone"])) == {"gone": "OK"}
    admin.close()
    broker.restart()
    assert _committed(broker, "gone", TopicPartition(topic, 0)) is None
    assert _committed(broker, "kept", TopicPartition(topic, 0)) == 4
