"""Restarts: a clean stop loses nothing; a SIGKILL loses nothing that was acknowledged.

Both run once per client, each client producing and consuming with its own code path
(kafka-python, confluent-kafka, aiokafka; kcat too for the clean restart: it has no delivery
callback to tell which messages were acknowledged before a kill).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
from functools import partial

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AIOTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaTimeoutError

Records = list[tuple[bytes, bytes]]


# -- produce a list of (key, value) and return the offsets acknowledged for them (None: the
#    client does not report them); consume `count` records from `offset` as (offset, key, value)

def kafka_python_produce(bootstrap: str, topic: str, records: Records) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4")
    try:
        futures = [producer.send(topic, key=key, value=value) for key, value in records]
        producer.flush(30)
        return [future.get(10).offset for future in futures]
    finally:
        producer.close(10)


def kafka_python_consume(bootstrap: str, topic: str, count: int, offset: int = 0):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = KafkaTopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, offset)
        records = []
        deadline = time.monotonic() + 30
        while len(records) < count and time.monotonic() < deadline:
            records.extend(consumer.poll(timeout_ms=500).get(tp, []))
        return [(r.offset, r.key, r.value) for r in records]
    finally:
        consumer.close()


def confluent_produce(bootstrap: str, topic: str, records: Records) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "snappy"})
    offsets: dict[int, int] = {}

    def on_delivery(index, err, msg):
        assert err is None, err
        offsets[index] = msg.offset()

    for index, (key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=partial(on_delivery, index))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0
    return [offsets[index] for index in range(len(records))]


def confluent_consume(bootstrap: str, topic: str, count: int, offset: int = 0):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-assign-only"})
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        records = []
        deadline = time.monotonic() + 30
        while len(records) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                records.append((msg.offset(), msg.key(), msg.value()))
        return records
    finally:
        consumer.close()


def aiokafka_produce(bootstrap: str, topic: str, records: Records) -> list[int]:
    async def produce():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=key, value=value) for key, value in records]
            return [metadata.offset for metadata in await asyncio.gather(*futures)]
        finally:
            await producer.stop()
    return asyncio.run(asyncio.wait_for(produce(), 60))


def aiokafka_consume(bootstrap: str, topic: str, count: int, offset: int = 0):
    async def consume():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        tp = AIOTopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.start()
        try:
            consumer.seek(tp, offset)
            records = []
            deadline = time.monotonic() + 30
            while len(records) < count and time.monotonic() < deadline:
                records.extend((await consumer.getmany(tp, timeout_ms=500)).get(tp, []))
            return [(r.offset, r.key, r.value) for r in records]
        finally:
            await consumer.stop()
    return asyncio.run(asyncio.wait_for(consume(), 60))


def kcat_produce(bootstrap: str, topic: str, records: Records) -> None:
    lines = "".join(f"{key.decode()}:{value.decode()}\n" for key, value in records)
    result = subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-K:", "-z", "gzip"],
                            input=lines, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def kcat_consume(bootstrap: str, topic: str, count: int, offset: int = 0):
    result = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", str(offset), "-e", "-J"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    envelopes = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return [(m["offset"], m["key"].encode(), m["payload"].encode()) for m in envelopes]


needs_kcat = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")

CLIENTS = {
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "confluent-kafka": (confluent_produce, confluent_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
    "kcat": (kcat_produce, kcat_consume),
}


@pytest.mark.parametrize("client", [
    pytest.param(name, marks=[needs_kcat] if name == "kcat" else []) for name in CLIENTS])
def test_clean_restart_between_produce_and_consume_loses_nothing(minikafka_broker, topic, client):
    produce, consume = CLIENTS[client]
    broker = minikafka_broker
    records = [(str(i).encode(), f"v{i}-".encode() + b"x" * (i % 700)) for i in range(3000)]
    offsets = produce(broker.bootstrap, topic, records)
    assert offsets is None or offsets == list(range(3000))

    broker.restart()

    assert consume(broker.bootstrap, topic, 3000) == [(i, key, value) for i, (key, value) in enumerate(records)]
    # The restarted broker takes new writes after the old ones.
    after = [(b"after", b"restart")]
    assert produce(broker.bootstrap, topic, after) in (None, [3000])
    assert consume(broker.bootstrap, topic, 1, offset=3000) == [(3000, b"after", b"restart")]


# -- produce str(seq) values with acks=1 until `stop` is set; acknowledged[seq] = the offset the
#    broker acknowledged for it. Once stopped, whatever is still in flight is dropped, never
#    retried: the producer must be gone before the broker comes back.

def kafka_python_produce_until(bootstrap, topic, stop, acknowledged):
    def on_ack(seq, metadata):
        acknowledged[seq] = metadata.offset

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    seq = 0
    while not stop.is_set():
        producer.send(topic, str(seq).encode()).add_callback(partial(on_ack, seq))
        seq += 1
    try:
        producer.close(timeout=1)
    except KafkaTimeoutError:
        # kafka-python 3's close() flushes first and raises when that times out, before it
        # gets to force-closing its sender thread, which would otherwise keep retrying and
        # deliver the queued batches to the restarted broker. Do what close() does next.
        producer._sender.force_close()
        producer._sender.join(10)
        producer.close(timeout=0)


def confluent_produce_until(bootstrap, topic, stop, acknowledged):
    def on_delivery(err, msg):
        if err is None:
            acknowledged[int(msg.value())] = msg.offset()

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1})
    seq = 0
    while not stop.is_set():
        try:
            producer.produce(topic, str(seq).encode(), on_delivery=on_delivery)
            seq += 1
        except BufferError:
            producer.poll(0.01)
        if seq % 100 == 0:
            producer.poll(0)
    producer.flush(1)
    producer.purge()
    producer.flush(1)


def aiokafka_produce_until(bootstrap, topic, stop, acknowledged):
    def on_ack(seq, future):
        if not future.cancelled() and future.exception() is None:
            acknowledged[seq] = future.result().offset

    async def send_forever(producer):
        seq = 0
        while True:
            (await producer.send(topic, str(seq).encode())).add_done_callback(partial(on_ack, seq))
            seq += 1
            if seq % 100 == 0:
                await asyncio.sleep(0)  # let the sender task run

    async def produce():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1)
        await producer.start()
        sending = asyncio.ensure_future(send_forever(producer))
        try:
            while not stop.is_set():
                if sending.done():
                    sending.result()  # a send failed while the broker was up
                await asyncio.sleep(0.01)
        finally:
            # Once the broker is gone a send may wait for room in the accumulator, and stop()
            # for a flush, up to request_timeout_ms: cancel rather than wait. asyncio.run
            # then cancels what is left.
            sending.cancel()
            try:
                await asyncio.wait_for(producer.stop(), 1)
            except Exception:
                pass
    asyncio.run(produce())


PRODUCE_UNTIL_STOPPED = {
    "kafka-python": kafka_python_produce_until,
    "confluent-kafka": confluent_produce_until,
    "aiokafka": aiokafka_produce_until,
}


def read_all(bootstrap, topic, partition=0, timeout=30.0):
    """Every (offset, value) of a partition, up to its end offset at the time of the call."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-assign-only"})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0)])
        messages = []
        deadline = time.monotonic() + timeout
        while (not messages or messages[-1][0] < end - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                messages.append((msg.offset(), msg.value()))
        return messages
    finally:
        consumer.close()


@pytest.mark.parametrize("client", PRODUCE_UNTIL_STOPPED)
def test_kill_9_while_producing_keeps_every_acknowledged_message_once_in_order(minikafka_broker, topic, client):
    broker = minikafka_broker
    acknowledged: dict[int, int] = {}  # sequence number -> offset the broker gave it
    stop_producing = threading.Event()
    producer_thread = threading.Thread(
        target=PRODUCE_UNTIL_STOPPED[client], args=(broker.bootstrap, topic, stop_producing, acknowledged))
    producer_thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(acknowledged) < 5000 and time.monotonic() < deadline:
            time.sleep(0.01)
        broker.kill()
    finally:
        stop_producing.set()
        producer_thread.join(30)
    assert not producer_thread.is_alive()
    assert len(acknowledged) >= 5000

    broker.start()
    stored = read_all(broker.bootstrap, topic)
    offsets = [offset for offset, _ in stored]
    assert offsets == list(range(len(stored)))  # recovery left no hole and no torn message
    position = {int(value): offset for offset, value in stored}
    sequences = [int(value) for _, value in stored]
    assert len(set(sequences)) == len(sequences)  # nothing stored twice
    # Every acknowledged message is there, at the offset its acknowledgement named.
    assert {seq: position.get(seq) for seq in acknowledged} == acknowledged
    assert sequences == sorted(sequences)  # one producer, one partition: log order = send order


# One side of storage.log_manager.FSYNC_EACH_MAX_PARTITIONS each: a few partitions are made
# durable by fsyncs of what was made, many by a filesystem sync.
@pytest.mark.parametrize("partitions", [1, 3, 40])
def test_kill_9_right_after_creating_a_topic_leaves_it_whole(minikafka_broker, topic, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = minikafka_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    created = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
    created[topic].result(30)  # raises on a creation error
    broker.kill()

    broker.start()
    assert sorted(p.name for p in broker.log_dir.iterdir() if p.name.endswith("-delete")) == []
    listed = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=30).topics[topic]
    assert listed.error is None
    assert sorted(listed.partitions) == list(range(partitions))
    # Every partition is a working log: a message produced to the last one is read back at offset 0.
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"after the crash", partition=partitions - 1)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-check",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partitions - 1, 0)])
        deadline = time.monotonic() + 30
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        assert message is not None and message.error() is None
        assert (message.offset(), message.value()) == (0, b"after the crash")
    finally:
        consumer.close()


def test_kill_9_right_after_auto_creating_a_topic_keeps_it_and_its_message(minikafka_broker, topic):
    """Metadata's auto-creation answers before its fsyncs (LogManager.create_topic's
    fsync_now): what it made is in the page cache, which a kill -9 leaves whole."""
    broker = minikafka_broker
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1})
    producer.produce(topic, b"before the crash", partition=0)
    assert producer.flush(30) == 0
    broker.kill()

    broker.start()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-check",
                         "enable.auto.commit": False, "allow.auto.create.topics": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        assert message is not None and message.error() is None
        assert (message.offset(), message.value()) == (0, b"before the crash")
    finally:
        consumer.close()


def test_kill_9_after_recreating_a_topic_keeps_its_records_from_offset_0(minikafka_broker_factory, topic):
    # The deleted topic's log start, moved by retention and checkpointed, must not become the
    # new topic's after a kill -9 that no checkpoint preceded since its creation.
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = minikafka_broker_factory(**{"log.retention.check.interval.ms": "100",
                                         "log.flush.offset.checkpoint.interval.ms": "600000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    watermarks = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-watermarks"})
    try:
        admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "1024", "retention.bytes": "2048"})],
                            operation_timeout=30)[topic].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(160):
            producer.produce(topic, b"old-%d-" % i + b"." * 100)
            producer.flush(30)
        deadline = time.monotonic() + 30
        while watermarks.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0] == 0:
            assert time.monotonic() < deadline, "retention never moved the log start"
            time.sleep(0.1)
        admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
        admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)[topic].result(30)
        acked = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(10):
            producer.produce(topic, b"new-%d" % i, on_delivery=lambda err, msg: acked.append((msg.offset(), msg.value()))
                             if err is None else None)
            producer.flush(30)
        assert acked == [(i, b"new-%d" % i) for i in range(10)]
    finally:
        watermarks.close()
    broker.kill()

    broker.start()
    assert read_all(broker.bootstrap, topic) == acked
