"""Transactions with each Python client against a broker process (issue 26): confluent-kafka,
kafka-python and aiokafka transactional producers commit and abort; a read_committed consumer
sees exactly the committed records in order, a read_uncommitted one every record; a second
producer with the same transactional id fences the first; a broker killed with a transaction
open aborts it after restart (its timeout) and serves the id again."""

from __future__ import annotations

import asyncio
import time

import pytest

COMMITTED = [b"c0", b"c1", b"c2"]
EVERYTHING = [b"c0", b"c1", b"a0", b"c2"]


def read(bootstrap: str, topic: str, count: int, isolation: str, *, settle: float = 1.0,
         timeout: float = 30.0) -> list[bytes]:
    """Values of partition 0 from offset 0 with confluent-kafka at ``isolation``: until ``count``
    are read, then ``settle`` seconds more (anything past them would be a record too many)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(values) < count:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
        settle_until = time.monotonic() + settle
        while time.monotonic() < settle_until:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
    finally:
        consumer.close()
    return values


def confluent_transactions(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-confluent"})
    producer.init_transactions(30)
    for values, commit in (([b"c0", b"c1"], True), ([b"a0"], False), ([b"c2"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value, partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)   # the aborted records are in the log, as read_uncommitted shows
            producer.abort_transaction(30)


def kafka_python_transactions(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-kafka-python")
    try:
        producer.init_transactions()
        for values, commit in (([b"c0", b"c1"], True), ([b"a0"], False), ([b"c2"], True)):
            producer.begin_transaction()
            for value in values:
                producer.send(topic, value, partition=0)
            producer.flush()
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()


def aiokafka_transactions(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-aiokafka")
        await producer.start()
        try:
            for values, commit in (([b"c0", b"c1"], True), ([b"a0"], False), ([b"c2"], True)):
                await producer.begin_transaction()
                for value in values:
                    await producer.send_and_wait(topic, value, partition=0)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


@pytest.mark.parametrize("transact", [confluent_transactions, kafka_python_transactions, aiokafka_transactions],
                         ids=["confluent-kafka", "kafka-python", "aiokafka"])
def test_committed_records_are_read_committed_and_aborted_ones_only_uncommitted(minikafka_broker, transact):
    minikafka_broker.create_topic("txns")
    transact(minikafka_broker.bootstrap, "txns")
    assert read(minikafka_broker.bootstrap, "txns", 3, "read_committed") == COMMITTED
    assert read(minikafka_broker.bootstrap, "txns", 4, "read_uncommitted") == EVERYTHING


def confluent_fenced(bootstrap: str, topic: str) -> None:
    from confluent_kafka import KafkaException, Producer

    config = {"bootstrap.servers": bootstrap, "transactional.id": "shared"}
    first = Producer(config)
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, b"from-the-first", partition=0)
    first.flush(30)
    second = Producer(config)
    second.init_transactions(30)   # aborts the first one's open transaction
    second.begin_transaction()
    second.produce(topic, b"from-the-second", partition=0)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(30)
    assert raised.value.args[0].fatal()   # fenced: this producer can do nothing more


def kafka_python_fenced(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    first = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="shared")
    second = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="shared")
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, b"from-the-first", partition=0)
        first.flush()
        second.init_transactions()
        second.begin_transaction()
        second.send(topic, b"from-the-second", partition=0)
        second.commit_transaction()
        with pytest.raises(KafkaError, match="(?i)fenc|epoch"):
            first.commit_transaction()
    finally:
        first.close(timeout=5)
        second.close()


def aiokafka_fenced(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def run() -> None:
        first = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="shared")
        second = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="shared")
        await first.start()
        try:
            await first.begin_transaction()
            await first.send_and_wait(topic, b"from-the-first", partition=0)
            await second.start()
            await second.begin_transaction()
            await second.send_and_wait(topic, b"from-the-second", partition=0)
            await second.commit_transaction()
            with pytest.raises(KafkaError, match="(?i)fenc|epoch"):
                await first.commit_transaction()
        finally:
            await second.stop()
            await first.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


@pytest.mark.parametrize("fence", [confluent_fenced, kafka_python_fenced, aiokafka_fenced],
                         ids=["confluent-kafka", "kafka-python", "aiokafka"])
def test_a_second_producer_with_the_same_transactional_id_fences_the_first(minikafka_broker, fence):
    minikafka_broker.create_topic("fenced")
    fence(minikafka_broker.bootstrap, "fenced")
    assert read(minikafka_broker.bootstrap, "fenced", 1, "read_committed") == [b"from-the-second"]
    assert read(minikafka_broker.bootstrap, "fenced", 2, "read_uncommitted") == [b"from-the-first",
                                                                                 b"from-the-second"]


def test_a_transaction_open_when_the_broker_is_killed_is_aborted_after_restart(minikafka_broker_factory):
    from confluent_kafka import Producer

    broker = minikafka_broker_factory(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    broker.create_topic("killed")
    config = {"bootstrap.servers": broker.bootstrap, "transactional.id": "open-at-kill",
              "transaction.timeout.ms": "2000"}
    producer = Producer(config)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("killed", b"c0", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("killed", b"open", partition=0)
    producer.flush(30)
    broker.kill()
    broker.restart()
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    plain.produce("killed", b"plain", partition=0)
    plain.flush(30)
    # The coordinator loaded the transaction as Ongoing; its timeout aborts it, and the ABORT
    # marker moves the last stable offset past it: read_committed reaches the plain record.
    assert read(broker.bootstrap, "killed", 2, "read_committed") == [b"c0", b"plain"]
    again = Producer({**config, "bootstrap.servers": broker.bootstrap})
    again.init_transactions(30)
    again.begin_transaction()
    again.produce("killed", b"c1", partition=0)
    again.commit_transaction(30)
    assert read(broker.bootstrap, "killed", 3, "read_committed") == [b"c0", b"plain", b"c1"]
    assert read(broker.bootstrap, "killed", 4, "read_uncommitted") == [b"c0", b"open", b"plain", b"c1"]
    assert "open longer than 2000 ms" in broker.stderr_since_start()
