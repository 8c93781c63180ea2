"""A consumer-group member as a separate process, for tests that stop or crash members.

    python group_consumer.py CLIENT BOOTSTRAP TOPIC GROUP HEARTBEAT_MS [SESSION_TIMEOUT_MS]

CLIENT is kafka-python, confluent or aiokafka. The member subscribes to TOPIC in GROUP,
starting from the earliest offset when the group has no commit. After every batch it prints
``{"consumed": [[partition, offset], ...], "t": TIME}`` on stdout, commits synchronously,
and prints ``{"committed": [[partition, next offset], ...], "t": TIME}`` once the commit
succeeded. A commit refused because the group is rebalancing is reported on stderr and the
member carries on, as an application would (those messages may be consumed again).
SIGTERM makes it close the consumer properly (LeaveGroup); SIGKILL is a crash. Without
SESSION_TIMEOUT_MS the client's default session timeout is used. A member learns of a
rebalance from its next heartbeat, so the tests ask for short HEARTBEAT_MS.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

stopping = False


def emit(pairs) -> None:
    if pairs:
        print(json.dumps({"consumed": sorted(pairs), "t": time.time()}), flush=True)


def emit_committed(pairs) -> None:
    """``pairs``: (partition, last consumed offset) of the batch just committed."""
    latest: dict[int, int] = {}
    for partition, offset in pairs:
        latest[partition] = max(latest.get(partition, -1), offset + 1)
    print(json.dumps({"committed": sorted(latest.items()), "t": time.time()}), flush=True)


def commit_failed(exc) -> None:
    print(f"commit failed: {exc!r}", file=sys.stderr, flush=True)


def on_sigterm(*_) -> None:
    global stopping
    stopping = True


def run_kafka_python(bootstrap, topic, group, heartbeat_ms, session_ms) -> None:
    from kafka import KafkaConsumer

    extra = {"heartbeat_interval_ms": heartbeat_ms}
    if session_ms:
        extra["session_timeout_ms"] = session_ms
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, **extra)
    # The subscribed topic's metadata before the first JoinGroup (the update sets the
    # coordinator's metadata snapshot): kafka-python 3.0.12 otherwise may join with none,
    # rejoin as leader once it arrives (its assignment snapshot differs), and if poll()'s
    # timeout ends while that rejoin's SyncGroup is in flight, the finished join is never
    # applied (need_rejoin() is False by then): no heartbeats, the member expires and never
    # returns. Seen with the client's debug log in a loop of the crash tests (~1 run in 10).
    consumer.partitions_for_topic(topic)
    from kafka.errors import CommitFailedError, RebalanceInProgressError

    while not stopping:
        batch = consumer.poll(200)
        pairs = [(tp.partition, m.offset) for tp, messages in batch.items() for m in messages]
        emit(pairs)
        if pairs:
            try:
                consumer.commit()
            except (CommitFailedError, RebalanceInProgressError) as exc:
                commit_failed(exc)
            else:
                emit_committed(pairs)
    consumer.close()


def run_confluent(bootstrap, topic, group, heartbeat_ms, session_ms) -> None:
    from confluent_kafka import Consumer

    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "heartbeat.interval.ms": heartbeat_ms}
    if session_ms:
        config["session.timeout.ms"] = session_ms
    consumer = Consumer(config)
    consumer.subscribe([topic])
    from confluent_kafka import KafkaException

    while not stopping:
        messages = [m for m in consumer.consume(100, 0.2) if m.error() is None]
        pairs = [(m.partition(), m.offset()) for m in messages]
        emit(pairs)
        if pairs:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                commit_failed(exc)
            else:
                emit_committed(pairs)
    consumer.close()


async def run_aiokafka(bootstrap, topic, group, heartbeat_ms, session_ms) -> None:
    from aiokafka import AIOKafkaConsumer

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)
    extra = {"heartbeat_interval_ms": heartbeat_ms}
    if session_ms:
        extra["session_timeout_ms"] = session_ms
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False, **extra)
    await consumer.start()
    try:
        from aiokafka.errors import CommitFailedError, IllegalStateError, RebalanceInProgressError

        while not stopping:
            batch = await consumer.getmany(timeout_ms=200)
            pairs = [(tp.partition, m.offset) for tp, messages in batch.items() for m in messages]
            emit(pairs)
            if pairs:
                try:
                    await consumer.commit()
                except (CommitFailedError, IllegalStateError, RebalanceInProgressError) as exc:
                    commit_failed(exc)
                else:
                    emit_committed(pairs)
    finally:
        await consumer.stop()


def main() -> None:
    client, bootstrap, topic, group = sys.argv[1:5]
    heartbeat_ms = int(sys.argv[5])
    session_ms = int(sys.argv[6]) if len(sys.argv) > 6 else None
    signal.signal(signal.SIGTERM, on_sigterm)
    if client == "kafka-python":
        run_kafka_python(bootstrap, topic, group, heartbeat_ms, session_ms)
    elif client == "confluent":
        run_confluent(bootstrap, topic, group, heartbeat_ms, session_ms)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, topic, group, heartbeat_ms, session_ms))
    else:
        raise SystemExit(f"unknown client {client!r}")


if __name__ == "__main__":
    main()
