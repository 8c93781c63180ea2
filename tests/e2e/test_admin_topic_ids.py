"""Topic ids (KIP-516) through the clients' admin interfaces against a single broker:
CreateTopics v7 answers the id that every partition's ``partition.metadata`` holds, with the
topic's partition count, replication factor and configs (v5); Metadata v10+ answers it and
v12 finds a topic by it; DeleteTopics v6 deletes by it."""

from __future__ import annotations

import base64
import uuid

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient
from kafka.admin import NewTopic
from kafka.errors import UnknownTopicIdError

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.types import ZERO_UUID
from minikafka.storage import read_topic_id
from minikafka.testing import kafka_request

pytestmark = pytest.mark.timeout(120)


def _as_uuid(topic_id: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


def test_created_topics_answer_their_id_partitions_and_configs(broker, admin, new_topic):
    topic = new_topic("ided")
    answer = kafka_request(broker.bootstrap, ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": topic, "num_partitions": 2, "replication_factor": -1, "assignments": [],
         "configs": [{"name": "retention.ms", "value": "3600000"}]}], "timeout_ms": 10000})
    (created,) = answer.topics
    assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 2, 1)
    assert {read_topic_id(broker.log_dir / f"{topic}-{p}") for p in range(2)} == {created.topic_id}
    configs = {c.name: (c.value, c.config_source, c.read_only) for c in created.configs}
    assert configs["retention.ms"] == ("3600000", 1, False)      # TOPIC_CONFIG
    assert configs["cleanup.policy"] == ("delete", 5, False)     # DEFAULT_CONFIG

    # validate_only answers the same description, without an id: nothing was created.
    answer = kafka_request(broker.bootstrap, ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": new_topic("checked"), "num_partitions": 3, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout_ms": 10000, "validate_only": True})
    (checked,) = answer.topics
    assert (checked.error_code, checked.num_partitions, checked.topic_id) == (0, 3, ZERO_UUID)
    assert {c.name for c in checked.configs} >= {"retention.ms", "segment.bytes"}

    # Metadata v12 by name and by id, through kafka-python.
    (by_name,) = admin.describe_topics([topic])
    assert by_name["topic_id"] == str(_as_uuid(created.topic_id))
    (by_id,) = admin.describe_topics([_as_uuid(created.topic_id)])
    assert (by_id["name"], by_id["error_code"]) == (topic, 0)
    answer = kafka_request(broker.bootstrap, ApiKey.METADATA, 12, {"topics": [
        {"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "name": None}]})
    assert [(t.error_code, t.name) for t in answer.topics] == [(ErrorCode.UNKNOWN_TOPIC_ID, None)]
    # Before v12 a topic may not be named by id.
    answer = kafka_request(broker.bootstrap, ApiKey.METADATA, 11, {"topics": [
        {"topic_id": created.topic_id, "name": None}]})
    assert [t.error_code for t in answer.topics] == [ErrorCode.INVALID_REQUEST]


def test_confluent_kafka_describes_a_topic_with_its_id(broker, admin, new_topic):
    topic = new_topic("described")
    admin.create_topics([NewTopic(topic, 1, 1)])
    confluent = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = confluent.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    # librdkafka prints ids in standard base64, Kafka in its URL-safe form.
    assert str(described.topic_id).translate(str.maketrans("+/", "-_")) == read_topic_id(broker.log_dir / f"{topic}-0")


def test_topics_are_deleted_by_id(broker, admin, new_topic):
    topic, kept = new_topic("by-id"), new_topic("kept")
    admin.create_topics([NewTopic(topic, 2, 1), NewTopic(kept, 1, 1)])
    topic_id = read_topic_id(broker.log_dir / f"{topic}-0")
    result = admin.delete_topics([_as_uuid(topic_id)])
    assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
    assert not list(broker.log_dir.glob(f"{topic}-*"))
    with pytest.raises(UnknownTopicIdError):
        admin.delete_topics([_as_uuid(topic_id)])
    answer = kafka_request(broker.bootstrap, ApiKey.DELETE_TOPICS, 6, {"topics": [
        {"name": kept, "topic_id": read_topic_id(broker.log_dir / f"{kept}-0")}], "timeout_ms": 10000})
    assert [r.error_code for r in answer.responses] == [ErrorCode.INVALID_REQUEST]
    assert list(broker.log_dir.glob(f"{kept}-*"))
