"""AlterPartitionReassignments and ListPartitionReassignments against a single broker, from
kafka-python's KafkaAdminClient and raw requests (no other client library has them): its one
possible replica set is itself, a move there is NONE and nothing is in progress, any other
broker is refused, as is cancelling a move that does not run and an unknown partition."""

from __future__ import annotations

import pytest
from kafka import TopicPartition
from kafka.admin import NewTopic
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import kafka_request

pytestmark = pytest.mark.timeout(120)


def test_kafka_python_moves_a_partition_to_its_only_broker_and_lists_nothing_in_progress(broker, admin, new_topic):
    topic = new_topic("moved")
    admin.create_topics([NewTopic(topic, 2, 1)])
    node_id = admin.describe_cluster()["brokers"][0]["broker_id"]
    tp = TopicPartition(topic, 0)
    assert admin.alter_partition_reassignments({tp: [node_id]}) == {tp: None}
    assert admin.list_partition_reassignments() == {}
    assert admin.list_partition_reassignments([tp]) == {}
    answer = admin.alter_partition_reassignments({
        tp: [node_id + 1], TopicPartition(topic, 1): None, TopicPartition(topic, 7): [node_id],
        TopicPartition("no-such-topic", 0): [node_id]})
    assert answer == {tp: InvalidReplicationAssignmentError, TopicPartition(topic, 1): NoReassignmentInProgressError,
                      TopicPartition(topic, 7): UnknownTopicOrPartitionError,
                      TopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError}
    assert sorted(d.name for d in broker.log_dir.glob(f"{topic}-*")) == [f"{topic}-0", f"{topic}-1"]


def test_raw_requests_get_kafkas_answers(broker, new_topic):
    topic = new_topic("raw")
    kafka_request(broker.bootstrap, ApiKey.CREATE_TOPICS, 0, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 10000})
    answer = kafka_request(broker.bootstrap, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 10000, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "replicas": [5, 5]}]}]})
    assert answer.error_code == ErrorCode.NONE
    (result,) = answer.responses[0].partitions
    assert (result.partition_index, result.error_code) == (0, ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    assert result.error_message
    listed = kafka_request(broker.bootstrap, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 10000,
                                                                                      "topics": None})
    assert (listed.error_code, list(listed.topics)) == (ErrorCode.NONE, [])
