"""Restarts: a clean stop loses nothing; a SIGKILL loses nothing that was acknowledged."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition


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


def test_clean_restart_between_produce_and_consume_loses_nothing(minikafka_broker, topic):
    broker = minikafka_broker
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4")
    futures = [producer.send(topic, key=str(i).encode(), value=b"x" * (i % 700)) for i in range(3000)]
    producer.flush(30)
    assert [f.get(10).offset for f in futures] == list(range(3000))
    producer.close(10)

    broker.restart()

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = KafkaTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records = []
    deadline = time.monotonic() + 30
    while len(records) < 3000 and time.monotonic() < deadline:
        records.extend(consumer.poll(timeout_ms=500).get(tp, []))
    assert consumer.end_offsets([tp]) == {tp: 3000}
    consumer.close()
    assert [(r.offset, r.key, r.value) for r in records] == [
        (i, str(i).encode(), b"x" * (i % 700)) for i in range(3000)]

    # The restarted broker takes new writes after the old ones.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    assert producer.send(topic, b"after restart").get(30).offset == 3000
    producer.close(10)


def test_kill_9_while_producing_keeps_every_acknowledged_message_once_in_order(minikafka_broker, topic):
    broker = minikafka_broker
    acknowledged: dict[int, int] = {}  # sequence number -> offset the broker gave it
    stop_producing = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            acknowledged[int(msg.value())] = msg.offset()

    def produce_until_told():
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1})
        seq = 0
        while not stop_producing.is_set():
            try:
                producer.produce(topic, str(seq).encode(), on_delivery=on_delivery)
                seq += 1
            except BufferError:
                producer.poll(0.01)
            if seq % 100 == 0:
                producer.poll(0)
        # The broker is gone: what is still queued or in flight stays unacknowledged.
        producer.flush(1)
        producer.purge()
        producer.flush(1)

    producer_thread = threading.Thread(target=produce_until_told)
    producer_thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(acknowledged) < 5000 and time.monotonic() < deadline:
            time.sleep(0.01)
        broker.kill()
    finally:
        stop_producing.set()
        producer_thread.join(30)
    assert len(acknowledged) >= 5000

    broker.start()
    stored = read_all(broker.bootstrap, topic)
    offsets = [offset for offset, _ in stored]
    assert offsets == list(range(len(stored)))  # recovery left no hole and no torn message
    position = {int(value): offset for offset, value in stored}
    sequences = [int(value) for _, value in stored]
    assert len(set(sequences)) == len(sequences)  # nothing stored twice
    assert all(position.get(seq) == offset for seq, offset in acknowledged.items())
    assert sequences == sorted(sequences)  # one producer, one partition: log order = send order
