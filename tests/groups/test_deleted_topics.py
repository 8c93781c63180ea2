"""Offsets of a deleted topic go with it (Kafka 0.10.2's handleDeletedPartitions), so a topic
re-created under the same name is consumed from its start (issue 31, defect 9)."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

pytestmark = pytest.mark.timeout(120)


def committed(bootstrap: str, group: str, partitions: list[TopicPartition]) -> dict:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {(tp.topic, tp.partition): consumer.committed(tp) for tp in partitions}
    finally:
        consumer.close()


@pytest.mark.parametrize("restart", ["clean", "kill"])
def test_offsets_of_a_deleted_topic_are_removed(minikafka_broker, restart):
    bootstrap = minikafka_broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic("gone", 2, 1), NewTopic("kept", 1, 1)])
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="g", enable_auto_commit=False)
        try:
            consumer.commit({TopicPartition("gone", 0): OffsetAndMetadata(80, "", -1),
                             TopicPartition("gone", 1): OffsetAndMetadata(3, "", -1),
                             TopicPartition("kept", 0): OffsetAndMetadata(5, "", -1)})
        finally:
            consumer.close()
        admin.delete_topics(["gone"])
        admin.create_topics([NewTopic("gone", 2, 1)])
    finally:
        admin.close()
    partitions = [TopicPartition("gone", 0), TopicPartition("gone", 1), TopicPartition("kept", 0)]
    expected = {("gone", 0): None, ("gone", 1): None, ("kept", 0): 5}
    assert committed(bootstrap, "g", partitions) == expected
    minikafka_broker.restart(clean=restart == "clean")   # the removal is in the log
    assert committed(minikafka_broker.bootstrap, "g", partitions) == expected
