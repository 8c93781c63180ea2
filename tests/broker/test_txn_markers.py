"""Transaction markers written through the partition interface a transaction coordinator uses
(``Partitions.append_txn_marker``), on a real broker, read back by Fetch over a real socket."""

from __future__ import annotations

import time

import pytest
import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.record_batch import build_record_batch, end_txn_marker, iter_batches

from .conftest import fetch_body

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


async def write_transactions(broker, client, topic: str) -> int:
    """Offsets 0-1 committed, 3-4 aborted, 6 plain, 7 open: returns the producer id. The first
    producer's transactions interleave with another's aborted one (offsets 8, 9 its marker)."""
    pid = await producer_id(client)
    other = await producer_id(client)
    await client.metadata(topic)
    partitions = broker.partitions

    async def end(producer: int, commit: bool) -> None:
        assert await partitions.append_txn_marker(topic, 0, producer_id=producer, producer_epoch=0,
                                                  coordinator_epoch=0, commit=commit) == ErrorCode.NONE

    async def produce(records: bytes) -> None:
        assert (await client.produce(topic, 0, records, version=3)).error_code == ErrorCode.NONE

    await produce(transactional_batch(pid, 0, b"committed-0", b"committed-1"))
    await end(pid, True)  # 2
    await produce(transactional_batch(pid, 2, b"aborted-3", b"aborted-4"))
    await end(pid, False)  # 5
    now = int(time.time() * 1000)
    await produce(bytes(build_record_batch([(None, b"plain-6", now, ())])))
    await produce(transactional_batch(other, 0, b"other-7"))
    await produce(transactional_batch(pid, 4, b"open-8"))
    await end(other, False)  # 9
    return pid


async def test_read_committed_fetches_up_to_the_last_stable_offset_with_the_aborted_transactions(broker, client):
    pid = await write_transactions(broker, client, "rc")
    other = pid + 1
    committed = (await client.request(ApiKey.FETCH, 4, {
        **fetch_body([("rc", 0, 0, 1 << 20)]), "isolation_level": 1})).responses[0].partitions[0]
    assert (committed.high_watermark, committed.last_stable_offset) == (10, 8)
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(pid, 3), (other, 7)]
    assert [b.base_offset for b in iter_batches(bytes(committed.records))] == [0, 2, 3, 5, 6, 7]
    uncommitted = (await client.request(ApiKey.FETCH, 4, {
        **fetch_body([("rc", 0, 0, 1 << 20)]), "isolation_level": 0})).responses[0].partitions[0]
    assert (uncommitted.last_stable_offset, uncommitted.aborted_transactions) == (8, None)
    assert [b.base_offset for b in iter_batches(bytes(uncommitted.records))][-1] == 9
    # ListOffsets v2: the latest offset a READ_COMMITTED consumer sees is the last stable one.
    for isolation, latest in ((0, 10), (1, 8)):
        answer = await client.request(ApiKey.LIST_OFFSETS, 2, {
            "replica_id": -1, "isolation_level": isolation,
            "topics": [{"name": "rc", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        assert answer.topics[0].partitions[0].offset == latest


async def test_a_read_committed_long_poll_wakes_when_the_transaction_ends(broker, client, nursery):
    pid = await write_transactions(broker, client, "poll")
    answers = []

    async def poll() -> None:
        answers.append((await client.request(ApiKey.FETCH, 4, {
            **fetch_body([("poll", 0, 8, 1 << 20)], max_wait_ms=20_000, min_bytes=1),
            "isolation_level": 1})).responses[0].partitions[0])

    nursery.start_soon(poll)
    await trio.sleep(0.2)
    assert not answers
    assert await broker.partitions.append_txn_marker("poll", 0, producer_id=pid, producer_epoch=0,
                                                     coordinator_epoch=0, commit=True) == ErrorCode.NONE
    with trio.fail_after(10):
        while not answers:
            await trio.sleep(0.01)
    assert answers[0].last_stable_offset == 11
    assert [b.base_offset for b in iter_batches(bytes(answers[0].records))] == [8, 9, 10]


def _confluent_values(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rc", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    return _poll_until_plain(lambda: consumer.poll(0.2), lambda m: m.value() if m and not m.error() else None,
                             lambda: consumer.assign([TopicPartition(topic, 0, 0)]), consumer.close)


def _kafka_python_values(bootstrap: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    partition = TopicPartition(topic, 0)

    def assign() -> None:
        consumer.assign([partition])
        consumer.seek(partition, 0)

    return _poll_until_plain(lambda: [r for rs in consumer.poll(200).values() for r in rs],
                             lambda records: [r.value for r in records], assign, consumer.close)


def _poll_until_plain(poll, values, start, close) -> list[bytes]:
    """Values read until the plain record (offset 6) and a second past it, or 30 s."""
    start()
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and b"plain-6" not in seen:
            found = values(poll())
            seen += found if isinstance(found, list) else [found] if found is not None else []
        settle = time.monotonic() + 1
        while time.monotonic() < settle:
            found = values(poll())
            seen += found if isinstance(found, list) else [found] if found is not None else []
    finally:
        close()
    return seen


@pytest.mark.parametrize("read", [_confluent_values, _kafka_python_values], ids=["confluent", "kafka-python"])
async def test_read_committed_consumers_skip_aborted_and_open_transactions(broker, client, read):
    await write_transactions(broker, client, "clients")
    bootstrap = f"{broker.advertised_host}:{broker.advertised_port}"
    values = await trio.to_thread.run_sync(read, bootstrap, "clients")
    assert values == [b"committed-0", b"committed-1", b"plain-6"]
