"""ListOffsets v6 (flexible) and v7 (KIP-734: timestamp -3, MAX_TIMESTAMP) from the clients that
ask for them: confluent-kafka's ``list_offsets`` with ``OffsetSpec.max_timestamp()`` and
kafka-python's ``list_partition_offsets`` with ``OffsetSpec.MAX_TIMESTAMP``; both need v7 and
refuse a broker below it."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.protocol.consumer.offsets import OffsetSpec as KpOffsetSpec

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import kafka_request

pytestmark = pytest.mark.timeout(120)

# The largest timestamp is the second record's and the fourth's; the answer is the first of them,
# inside the batch (not the batch's last offset, which Kafka before 3.8 answered).
OFFSETS_FROM_NOW = (-5000, -1000, -8000, -1000, -9000)


def _one_batch(broker, admin, topic) -> int:
    """``topic`` with one batch of records timed by OFFSETS_FROM_NOW; the largest timestamp."""
    admin.create_topics([NewTopic(topic, 1, 1)])
    now = int(time.time() * 1000)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5000)
    futures = [producer.send(topic, b"record %d" % i, partition=0, timestamp_ms=now + delta)
               for i, delta in enumerate(OFFSETS_FROM_NOW)]
    producer.flush(timeout=30)
    assert [f.get(timeout=0).offset for f in futures] == [0, 1, 2, 3, 4]
    producer.close()
    return now + max(OFFSETS_FROM_NOW)


def test_kafka_python_lists_the_offset_of_the_max_timestamp(broker, admin, new_topic):
    topic = new_topic("max-timestamp")
    largest = _one_batch(broker, admin, topic)
    partition = TopicPartition(topic, 0)
    found = admin.list_partition_offsets({partition: KpOffsetSpec.MAX_TIMESTAMP})[partition]
    assert (found.offset, found.timestamp, found.leader_epoch) == (1, largest, 0)
    latest = admin.list_partition_offsets({partition: KpOffsetSpec.LATEST})[partition]
    assert latest.offset == 5


def test_confluent_lists_the_offset_of_the_max_timestamp(broker, admin, new_topic):
    topic = new_topic("max-timestamp")
    largest = _one_batch(broker, admin, topic)
    partition = ConfluentTopicPartition(topic, 0)
    confluent = AdminClient({"bootstrap.servers": broker.bootstrap})
    found = confluent.list_offsets({partition: OffsetSpec.max_timestamp()})[partition].result(30)
    assert (found.offset, found.timestamp, found.leader_epoch) == (1, largest, 0)
    # An empty partition has no record with a timestamp.
    empty = new_topic("empty")
    admin.create_topics([NewTopic(empty, 1, 1)])
    none = ConfluentTopicPartition(empty, 0)
    found = confluent.list_offsets({none: OffsetSpec.max_timestamp()})[none].result(30)
    assert (found.offset, found.timestamp) == (-1, -1)


@pytest.mark.parametrize("version", [6, 7])
def test_flexible_versions_answer_like_v5(broker, admin, new_topic, version):
    topic = new_topic("flexible")
    largest = _one_batch(broker, admin, topic)
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "current_leader_epoch": 0, "timestamp": timestamp}
        for timestamp in (-1, -2, -3, largest - 1)]}, {"name": new_topic("unknown"), "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]}
    answer = kafka_request(broker.bootstrap, ApiKey.LIST_OFFSETS, version, body)
    found, unknown = answer.topics
    assert [(p.error_code, p.offset, p.timestamp, p.leader_epoch) for p in found.partitions] == [
        (ErrorCode.NONE, 5, -1, 0), (ErrorCode.NONE, 0, -1, 0), (ErrorCode.NONE, 1, largest, 0),
        (ErrorCode.NONE, 1, largest, 0)]
    assert unknown.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_read_committed_is_not_told_of_an_open_transactions_max_timestamp(broker, admin, new_topic):
    """The record with the largest timestamp sits at the last stable offset, in a transaction
    still open: a READ_COMMITTED consumer may not read it, so it is not its answer (Kafka 3.0's
    ``offset < lastFetchableOffset``); READ_UNCOMMITTED's is."""
    topic = new_topic("open-transaction")
    admin.create_topics([NewTopic(topic, 1, 1)])
    plain = KafkaProducer(bootstrap_servers=broker.bootstrap)
    plain.send(topic, b"committed", partition=0, timestamp_ms=1_700_000_001_000).get(timeout=30)
    plain.close()
    transactional = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"{topic}-txn")
    transactional.init_transactions()
    transactional.begin_transaction()
    transactional.send(topic, b"open", partition=0, timestamp_ms=1_700_000_009_000).get(timeout=30)
    try:
        answers = {}
        for level in (0, 1):
            body = {"replica_id": -1, "isolation_level": level, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "timestamp": -3}]}]}
            (found,) = kafka_request(broker.bootstrap, ApiKey.LIST_OFFSETS, 7, body).topics[0].partitions
            answers[level] = (found.error_code, found.offset, found.timestamp)
        assert answers == {0: (ErrorCode.NONE, 1, 1_700_000_009_000), 1: (ErrorCode.NONE, -1, -1)}
    finally:
        transactional.abort_transaction()
        transactional.close()
