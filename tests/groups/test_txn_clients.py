"""``send_offsets_to_transaction`` with each Python client against a real broker process:
the offsets a transaction sends become the group's committed offsets when it commits and
leave them as they were when it aborts (TxnOffsetCommit, then the markers of EndTxn)."""

from __future__ import annotations

import asyncio
import time

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import kafka_request

CLIENTS = ["confluent", "aiokafka", "kafka-python"]


def transaction(client: str, bootstrap: str, transactional_id: str, group: str, offsets: dict[int, int],
                commit: bool) -> None:
    """One transaction of ``client``: a record to ``out``, ``offsets`` of ``in`` for ``group``."""
    if client == "confluent":
        from confluent_kafka import Consumer, Producer
        from confluent_kafka import TopicPartition as ConfluentPartition

        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            producer.init_transactions(30)
            producer.begin_transaction()
            producer.produce("out", b"x")
            producer.send_offsets_to_transaction(
                [ConfluentPartition("in", partition, offset) for partition, offset in offsets.items()],
                consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30) if commit else producer.abort_transaction(30)
        finally:
            consumer.close()
    elif client == "aiokafka":
        from aiokafka import AIOKafkaProducer
        from aiokafka.structs import TopicPartition as AioPartition

        async def run() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
            await producer.start()
            try:
                await producer.begin_transaction()
                await producer.send_and_wait("out", b"x")
                await producer.send_offsets_to_transaction(
                    {AioPartition("in", partition): offset for partition, offset in offsets.items()}, group)
                await (producer.commit_transaction() if commit else producer.abort_transaction())
            finally:
                await producer.stop()

        asyncio.run(run())
    else:
        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("out", b"x")
            producer.send_offsets_to_transaction(
                {TopicPartition("in", partition): OffsetAndMetadata(offset, "", -1)
                 for partition, offset in offsets.items()}, group)
            producer.commit_transaction() if commit else producer.abort_transaction()
        finally:
            producer.close()


def committed(bootstrap: str, group: str) -> dict[int, int]:
    """The group's committed offsets of ``in`` once no transactional commit is pending on them:
    OffsetFetch v7 with ``require_stable`` (KIP-447), retried while UNSTABLE_OFFSET_COMMIT. As in
    Kafka, EndTxn is answered once the transaction is prepared; the markers that make its offsets
    the group's (or drop them) are written after, so a plain fetch may still see the old ones."""
    deadline = time.monotonic() + 30
    while True:
        answer = kafka_request(bootstrap, ApiKey.OFFSET_FETCH, 7, {
            "group_id": group, "topics": [{"name": "in", "partition_indexes": [0, 1]}], "require_stable": True})
        partitions = answer.topics[0].partitions
        if all(p.error_code != ErrorCode.UNSTABLE_OFFSET_COMMIT for p in partitions):
            assert all(p.error_code == ErrorCode.NONE for p in partitions), partitions
            return {p.partition_index: p.committed_offset for p in partitions if p.committed_offset >= 0}
        assert time.monotonic() < deadline, "a transactional offset commit still pending after 30 s"
        time.sleep(0.05)


@pytest.mark.parametrize("client", CLIENTS)
def test_send_offsets_to_transaction_commits_with_the_transaction_only(minikafka_broker, client):
    bootstrap = minikafka_broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic("in", 2, 1), NewTopic("out", 1, 1)])
        transaction(client, bootstrap, f"{client}-tx", "g", {0: 5, 1: 7}, commit=True)
        assert committed(bootstrap, "g") == {0: 5, 1: 7}
        transaction(client, bootstrap, f"{client}-tx", "g", {0: 9}, commit=False)
        assert committed(bootstrap, "g") == {0: 5, 1: 7}
        transaction(client, bootstrap, f"{client}-tx", "g", {0: 11}, commit=True)
        assert committed(bootstrap, "g") == {0: 11, 1: 7}
    finally:
        admin.close()


def test_transactional_offsets_keep_their_leader_epoch(minikafka_broker):
    """TxnOffsetCommit v2+ carries each offset's leader epoch (KIP-320), which OffsetFetch then
    answers, as for OffsetCommit (kafka-python's integration suite checks it)."""
    bootstrap = minikafka_broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="epochs")
    try:
        admin.create_topics([NewTopic("in", 1, 1), NewTopic("out", 1, 1)])
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", b"x")
        producer.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(3, "m", 0)}, "g")
        producer.commit_transaction()
        # EndTxn is answered once the commit is decided; the offsets become visible when the
        # coordinator has written its markers, a moment later (as in Kafka).
        committed = {}
        deadline = time.monotonic() + 30
        while not committed and time.monotonic() < deadline:
            committed = admin.list_group_offsets({"g": None})["g"]
            time.sleep(0.05)
        assert committed == {TopicPartition("in", 0): OffsetAndMetadata(3, "m", 0)}
    finally:
        producer.close()
        admin.close()
