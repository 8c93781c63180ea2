"""Which version of each API today's clients pick from the broker's table, recorded on the wire.

Every client connection goes through a proxy that notes the API key and version of each
request frame (the broker advertises the proxy's address, so the clients' connections to the
coordinator go through it too). Each client runs a consumer group to the end (join, sync,
heartbeat, commits, offsets, leave) and its admin client's group and topic calls; the test
pins the highest version each client used per API, so a change to the advertised table or to
a client shows up here as a changed pick.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections import defaultdict

import pytest

from minikafka.protocol import ApiKey
from minikafka.testing.broker import MinikafkaBroker, free_port

TOPIC = "negotiated"
HEARTBEAT_MS = 100


class RecordingProxy:
    """Forwards TCP connections to ``target`` and records ``(api key, version)`` of each
    request a client sends."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target: tuple[str, int] | None = None
        self.seen: dict[int, set[int]] = defaultdict(set)
        self._sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        pending = b""
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                if not requests:
                    continue
                pending += data
                while len(pending) >= 8 and len(pending) >= 4 + struct.unpack_from(">i", pending)[0]:
                    size, key, version = struct.unpack_from(">ihh", pending)
                    self.seen[key].add(version)
                    pending = pending[4 + size:]
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def picked(self) -> dict[str, int]:
        """The highest version used per API, by Kafka's API name."""
        return {ApiKey(key).name: max(versions) for key, versions in sorted(self.seen.items())}

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


@pytest.fixture
def proxied(tmp_path):
    proxy = RecordingProxy()
    broker = MinikafkaBroker(tmp_path, {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    broker.port = free_port()   # where it listens; its ready line names the advertised port
    proxy.target = (broker.host, broker.port)
    broker.start()
    try:
        yield proxy
    finally:
        broker.stop()
        proxy.close()


def _wait(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _produce(bootstrap: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for index in range(10):
        producer.send(TOPIC, f"{index}".encode(), partition=index % 2)
    producer.flush()
    producer.close()


def test_kafka_python_3(proxied):
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient, NewTopic

    bootstrap = f"127.0.0.1:{proxied.port}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    proxied.seen.clear()   # what follows is the consumer's and the admin's group calls
    _produce(bootstrap)
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="kp", auto_offset_reset="earliest",
                             enable_auto_commit=False, heartbeat_interval_ms=HEARTBEAT_MS)
    # By offset: a rebalance before the first commit (kafka-python 3 rejoins once it has the
    # topic's metadata) sends it back to the earliest offsets, so it may read some twice.
    consumed = {}
    _wait(lambda: consumed.update(((m.partition, m.offset), m.value) for batch in consumer.poll(200).values()
                                  for m in batch) or len(consumed) == 10, "the messages")
    consumer.commit()
    _wait(lambda: consumer.poll(100) == {} and ApiKey.HEARTBEAT in proxied.seen, "a heartbeat")
    consumer.close()
    admin.list_groups()
    admin.describe_groups(["kp"])
    admin.list_group_offsets({"kp": None})
    admin.delete_topics([TOPIC])
    admin.close()
    picked = proxied.picked()
    assert {name: picked[name] for name in GROUP_AND_TOPIC_APIS if name in picked} == {
        "OFFSET_COMMIT": 8, "OFFSET_FETCH": 8, "FIND_COORDINATOR": 4, "JOIN_GROUP": 7, "HEARTBEAT": 4,
        "LEAVE_GROUP": 4, "SYNC_GROUP": 5, "DESCRIBE_GROUPS": 5, "LIST_GROUPS": 4, "DELETE_TOPICS": 6,
    }


def test_aiokafka_0_14(proxied):
    from aiokafka import AIOKafkaConsumer

    bootstrap = f"127.0.0.1:{proxied.port}"
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    _produce(bootstrap)
    proxied.seen.clear()

    async def consume():
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="aio",
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    heartbeat_interval_ms=HEARTBEAT_MS)
        await consumer.start()
        consumed = 0
        while consumed < 10:
            consumed += sum(len(batch) for batch in (await consumer.getmany(timeout_ms=200)).values())
        await consumer.commit()
        while ApiKey.HEARTBEAT not in proxied.seen:
            await consumer.getmany(timeout_ms=100)
        await consumer.stop()

    asyncio.run(asyncio.wait_for(consume(), 60))
    picked = proxied.picked()
    assert {name: picked[name] for name in GROUP_AND_TOPIC_APIS if name in picked} == {
        "OFFSET_COMMIT": 3, "OFFSET_FETCH": 3, "FIND_COORDINATOR": 1, "JOIN_GROUP": 5, "HEARTBEAT": 1,
        "LEAVE_GROUP": 1, "SYNC_GROUP": 3,
    }


def test_confluent_kafka_librdkafka_2(proxied):
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = f"127.0.0.1:{proxied.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(30)
    _produce(bootstrap)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rdk", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "heartbeat.interval.ms": HEARTBEAT_MS})
    consumer.subscribe([TOPIC])
    consumed = []
    _wait(lambda: consumed.extend(m for m in consumer.consume(10, 0.2) if m.error() is None) or len(consumed) >= 10,
          "the messages")
    consumer.commit(asynchronous=False)
    _wait(lambda: not consumer.consume(10, 0.1) and ApiKey.HEARTBEAT in proxied.seen, "a heartbeat")
    consumer.close()
    admin.list_consumer_groups().result(30)
    admin.describe_consumer_groups(["rdk"])["rdk"].result(30)
    for future in admin.delete_topics([TOPIC]).values():
        future.result(30)
    picked = proxied.picked()
    assert {name: picked[name] for name in GROUP_AND_TOPIC_APIS if name in picked} == {
        "CREATE_TOPICS": 4, "OFFSET_COMMIT": 8, "OFFSET_FETCH": 8, "FIND_COORDINATOR": 2, "JOIN_GROUP": 5,
        "HEARTBEAT": 3, "LEAVE_GROUP": 1, "SYNC_GROUP": 3, "DESCRIBE_GROUPS": 5, "LIST_GROUPS": 4,
        "DELETE_TOPICS": 4,
    }


# The APIs this file pins (Produce, Fetch, Metadata and the other issue-25 APIs evolve elsewhere).
GROUP_AND_TOPIC_APIS = ["CREATE_TOPICS", "DELETE_TOPICS", "OFFSET_COMMIT", "OFFSET_FETCH", "FIND_COORDINATOR",
                        "JOIN_GROUP", "HEARTBEAT", "LEAVE_GROUP", "SYNC_GROUP", "DESCRIBE_GROUPS", "LIST_GROUPS",
                        "SASL_HANDSHAKE", "SASL_AUTHENTICATE"]
