"""Transaction markers written through the partition interface a transaction coordinator uses
(``Partitions.append_txn_marker``), on a real broker, read back by Fetch over a real socket."""

from __future__ import annotations

import time

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.record_batch import build_record_batch, end_txn_marker, iter_batches

IDEMPOTENT = {"transactional_id": None, "transaction_timeout_ms": 60000}


async def producer_id(client) -> int:
    answer = await client.request(ApiKey.INIT_PRODUCER_ID, 0, IDEMPOTENT)
    assert answer.error_code == ErrorCode.NONE
    return answer.producer_id


def transactional_batch(producer: int, sequence: int, *values: bytes) -> bytes:
    now = int(time.time() * 1000)
    return bytes(build_record_batch([(None, value, now, ()) for value in values], producer_id=producer,
                                    producer_epoch=0, base_sequence=sequence, transactional=True))


async def fetched_batches(client, topic: str):
    answer = await client.fetch(topic, 0, 0, version=4)
    assert answer.error_code == ErrorCode.NONE
    data = bytes(answer.records)
    return [(batch, data[batch.position:batch.position + batch.size]) for batch in iter_batches(data)]


async def test_markers_end_transactions_and_are_fetched_as_control_batches(broker, client):
    pid = await producer_id(client)
    await client.metadata("tx")
    produced = await client.produce("tx", 0, transactional_batch(pid, 0, b"a", b"b"), acks=-1, version=3)
    assert produced.error_code == ErrorCode.NONE
    partitions = broker.partitions
    assert await partitions.append_txn_marker("tx", 0, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                              commit=True) == ErrorCode.NONE
    produced = await client.produce("tx", 0, transactional_batch(pid, 2, b"c"), acks=-1, version=3)
    assert (produced.error_code, produced.base_offset) == (ErrorCode.NONE, 3)
    assert await partitions.append_txn_marker("tx", 0, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                              commit=False) == ErrorCode.NONE
    batches = await fetched_batches(client, "tx")
    assert [(b.base_offset, b.is_transactional, b.is_control) for b, _ in batches] == [
        (0, True, False), (2, True, True), (3, True, False), (4, True, True)]
    assert [end_txn_marker(raw).commit for b, raw in batches if b.is_control] == [True, False]
    log = partitions.leader_log("tx", 0)
    assert (log.log_end_offset, log.high_watermark) == (5, 5)
    assert log.producer_state.first_unstable_offset() is None


async def test_a_refused_marker_answers_its_error(broker, client):
    pid = await producer_id(client)
    await client.metadata("tx")
    await client.produce("tx", 0, transactional_batch(pid, 0, b"a"), version=3)
    partitions = broker.partitions
    assert await partitions.append_txn_marker("tx", 0, producer_id=pid, producer_epoch=0, coordinator_epoch=7,
                                              commit=False) == ErrorCode.NONE
    assert await partitions.append_txn_marker("tx", 0, producer_id=pid, producer_epoch=0, coordinator_epoch=6,
                                              commit=False) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert await partitions.append_txn_marker("nowhere", 0, producer_id=pid, producer_epoch=0, coordinator_epoch=7,
                                              commit=False) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert await partitions.append_txn_marker("tx", 5, producer_id=pid, producer_epoch=0, coordinator_epoch=7,
                                              commit=False) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_marker_goes_to_the_consumer_offsets_topic_too(broker, client):
    coordinator = await broker.groups()
    from minikafka.broker.groups.coordinator import GROUP_METADATA_TOPIC
    assert broker.partitions.topic_exists(GROUP_METADATA_TOPIC)
    assert coordinator is not None
    assert await broker.partitions.append_txn_marker(GROUP_METADATA_TOPIC, 0, producer_id=9, producer_epoch=0,
                                                     coordinator_epoch=0, commit=True) == ErrorCode.NONE
    log = broker.partitions.leader_log(GROUP_METADATA_TOPIC, 0)
    assert log.high_watermark == log.log_end_offset
