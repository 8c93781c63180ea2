"""A consumer-group member as a separate process, for tests that stop or crash members.

    python group_consumer.py CLIENT BOOTSTRAP TOPIC GROUP [SESSION_TIMEOUT_MS]

CLIENT is kafka-python, confluent or aiokafka. The member subscribes to TOPIC in GROUP,
starting from the earliest offset when the group has no commit, and after every batch it
prints ``{"consumed": [[partition, offset], ...]}`` on stdout and commits synchronously.
SIGTERM makes it close the consumer properly (LeaveGroup); SIGKILL is a crash. Without
SESSION_TIMEOUT_MS the client's default session timeout is used.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

stopping = False


def emit(pairs) -> None:
    if pairs:
        print(json.dumps({"consumed": sorted(pairs)}), flush=True)


def on_sigterm(*_) -> None:
    global stopping
    stopping = True


def run_kafka_python(bootstrap, topic, group, session_ms) -> None:
    from kafka import KafkaConsumer

    extra = {"session_timeout_ms": session_ms, "heartbeat_interval_ms": session_ms // 3} if session_ms else {}
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, **extra)
    while not stopping:
        batch = consumer.poll(200)
        emit([(tp.partition, m.offset) for tp, messages in batch.items() for m in messages])
        if batch:
            consumer.commit()
    consumer.close()


def run_confluent(bootstrap, topic, group, session_ms) -> None:
    from confluent_kafka import Consumer

    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False}
    if session_ms:
        config.update({"session.timeout.ms": session_ms, "heartbeat.interval.ms": session_ms // 3})
    consumer = Consumer(config)
    consumer.subscribe([topic])
    while not stopping:
        messages = [m for m in consumer.consume(100, 0.2) if m.error() is None]
        emit([(m.partition(), m.offset()) for m in messages])
        if messages:
            consumer.commit(asynchronous=False)
    consumer.close()


async def run_aiokafka(bootstrap, topic, group, session_ms) -> None:
    from aiokafka import AIOKafkaConsumer

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)
    extra = {"session_timeout_ms": session_ms, "heartbeat_interval_ms": session_ms // 3} if session_ms else {}
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False, **extra)
    await consumer.start()
    try:
        while not stopping:
            batch = await consumer.getmany(timeout_ms=200)
            emit([(tp.partition, m.offset) for tp, messages in batch.items() for m in messages])
            if batch:
                await consumer.commit()
    finally:
        await consumer.stop()


def main() -> None:
    client, bootstrap, topic, group = sys.argv[1:5]
    session_ms = int(sys.argv[5]) if len(sys.argv) > 5 else None
    signal.signal(signal.SIGTERM, on_sigterm)
    if client == "kafka-python":
        run_kafka_python(bootstrap, topic, group, session_ms)
    elif client == "confluent":
        run_confluent(bootstrap, topic, group, session_ms)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, topic, group, session_ms))
    else:
        raise SystemExit(f"unknown client {client!r}")


if __name__ == "__main__":
    main()
