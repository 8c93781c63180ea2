"""Bad bytes on a raw socket cost only that connection; everyone else keeps working.

Requests are built by hand here (not with our own encoder) so the bytes on the wire are
exactly the ones described. Request layout (header v1):

    int32 size | int16 api_key | int16 api_version | int32 correlation_id | string client_id | body

where a string is int16 length + bytes. After each bad input the broker must either close the
connection or answer with an error, and a producer/consumer pair that stays connected the
whole time must keep round-tripping messages: every test runs once with each of kafka-python,
confluent-kafka and aiokafka as that pair.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from contextlib import contextmanager

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AIOTopicPartition
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def header(api_key: int, api_version: int, correlation_id: int, client_id: bytes = b"raw") -> bytes:
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def read_response(sock: socket.socket) -> bytes | None:
    """One response frame (without its size), or None if the broker closed the connection."""
    def read_exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            try:
                chunk = sock.recv(n - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    size = read_exactly(4)
    if size is None:
        return None
    return read_exactly(struct.unpack(">i", size)[0])


def closed_by_broker(sock: socket.socket) -> bool:
    """True once the broker has closed the connection (EOF or reset) without answering."""
    return read_response(sock) is None


# A healthy client: ``produce(topic, value) -> offset`` and ``poll() -> [(offset, value)]``
# from a consumer assigned to partition 0 of its topic from offset 0. Each one sends
# b"warm-up" first, so the consumer's topic exists when it is assigned.

@contextmanager
def kafka_python_client(bootstrap: str, topic: str):
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, 0)
    try:
        def produce(to_topic: str, value: bytes) -> int:
            return producer.send(to_topic, value).get(30).offset

        produce(topic, b"warm-up")
        consumer.assign([tp])
        consumer.seek(tp, 0)
        yield produce, lambda: [(r.offset, r.value) for r in consumer.poll(timeout_ms=200).get(tp, [])]
    finally:
        producer.close(10)
        consumer.close()


@contextmanager
def confluent_client(bootstrap: str, topic: str):
    producer = Producer({"bootstrap.servers": bootstrap})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "healthy-assign-only"})
    try:
        def produce(to_topic: str, value: bytes) -> int:
            delivered = []
            producer.produce(to_topic, value, on_delivery=lambda err, msg: delivered.append((err, msg)))
            assert producer.flush(30) == 0
            [(err, msg)] = delivered
            assert err is None, err
            return msg.offset()

        def poll() -> list[tuple[int, bytes]]:
            msg = consumer.poll(0.2)
            if msg is None:
                return []
            assert msg.error() is None, msg.error()
            return [(msg.offset(), msg.value())]

        produce(topic, b"warm-up")
        consumer.assign([ConfluentTopicPartition(topic, 0, 0)])
        yield produce, poll
    finally:
        producer.flush(10)
        consumer.close()


@contextmanager
def aiokafka_client(bootstrap: str, topic: str):
    # One event loop for the module's lifetime, run only while a call is made: between calls
    # the clients' connections stay open and idle, as a quiet application's would.
    loop = asyncio.new_event_loop()
    tp = AIOTopicPartition(topic, 0)

    async def start():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await producer.start()
        await producer.send_and_wait(topic, b"warm-up")
        consumer.assign([tp])
        await consumer.start()
        consumer.seek(tp, 0)
        return producer, consumer

    try:
        producer, consumer = loop.run_until_complete(start())
        try:
            def produce(to_topic: str, value: bytes) -> int:
                return loop.run_until_complete(asyncio.wait_for(producer.send_and_wait(to_topic, value), 30)).offset

            def poll() -> list[tuple[int, bytes]]:
                batches = loop.run_until_complete(consumer.getmany(tp, timeout_ms=200))
                return [(r.offset, r.value) for r in batches.get(tp, [])]

            yield produce, poll
        finally:
            loop.run_until_complete(producer.stop())
            loop.run_until_complete(consumer.stop())
    finally:
        loop.close()


HEALTHY_CLIENTS = {"kafka-python": kafka_python_client, "confluent-kafka": confluent_client,
                   "aiokafka": aiokafka_client}


@pytest.fixture(scope="module", params=HEALTHY_CLIENTS)
def healthy_client(broker, request):
    """A producer and an assigned consumer of one client library that stay connected through
    every bad input: ``healthy_client()`` round-trips one more message, and
    ``healthy_client.produce(topic, value)`` produces with the same producer."""
    topic = f"healthy-{time.monotonic_ns()}"
    with HEALTHY_CLIENTS[request.param](broker.bootstrap, topic) as (produce, poll):
        sent = [b"warm-up"]

        def round_trip() -> None:
            value = f"message-{len(sent)}".encode()
            offset = produce(topic, value)
            sent.append(value)
            assert offset == len(sent) - 1
            received = []
            deadline = time.monotonic() + 20
            while (not received or received[-1][0] < offset) and time.monotonic() < deadline:
                received.extend(poll())
            assert received and received[-1] == (offset, value)

        round_trip.produce = produce
        yield round_trip


def connect(broker) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
    sock.settimeout(20)
    return sock


API_VERSIONS_V0 = frame(header(18, 0, 7))


def test_garbage_closes_the_connection(broker, healthy_client):
    with connect(broker) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")  # size prefix "GET " = 1.2 GB
        assert closed_by_broker(sock)
    with connect(broker) as sock:
        sock.sendall(frame(b"\x01\x02\x03"))  # a frame too short to hold a request header
        assert closed_by_broker(sock)
    healthy_client()


def test_huge_size_prefix_closes_the_connection_without_waiting_for_the_bytes(broker, healthy_client):
    for size in (0x7FFFFFFF, 104857600 + 1, -1):
        with connect(broker) as sock:
            sock.sendall(struct.pack(">i", size))
            assert closed_by_broker(sock)
    healthy_client()


def test_truncated_request_then_eof_closes_the_connection(broker, healthy_client):
    request = frame(header(3, 0, 1) + struct.pack(">i", 1) + struct.pack(">h", 5) + b"topic")
    with connect(broker) as sock:
        sock.sendall(request[:-3])
        sock.shutdown(socket.SHUT_WR)
        assert closed_by_broker(sock)
    healthy_client()


def test_unknown_api_key_closes_the_connection_or_gets_an_error(broker, healthy_client):
    with connect(broker) as sock:
        sock.sendall(frame(header(999, 0, 42)))
        response = read_response(sock)
        if response is not None:
            (correlation_id,) = struct.unpack_from(">i", response)
            assert correlation_id == 42
    healthy_client()


def test_unsupported_version_of_another_api_closes_the_connection_or_gets_an_error(broker, healthy_client):
    with connect(broker) as sock:
        sock.sendall(frame(header(0, 99, 43) + b"\x00" * 16))  # Produce v99
        response = read_response(sock)
        if response is not None:
            assert struct.unpack_from(">i", response)[0] == 43
    healthy_client()


def test_unsupported_api_versions_version_gets_unsupported_version(broker, healthy_client):
    with connect(broker) as sock:
        sock.sendall(frame(header(18, 99, 5)))
        response = read_response(sock)
        assert response is not None
        correlation_id, error_code = struct.unpack_from(">ih", response)
        assert (correlation_id, error_code) == (5, 35)  # UNSUPPORTED_VERSION, with the table
        (count,) = struct.unpack_from(">i", response, 6)
        assert count > 0
    healthy_client()


@pytest.mark.parametrize("body", [
    pytest.param(struct.pack(">i", 1_000_000), id="array-count-beyond-the-frame"),
    pytest.param(struct.pack(">i", 1) + struct.pack(">h", 500) + b"short", id="string-length-beyond-the-frame"),
    pytest.param(struct.pack(">i", 1) + struct.pack(">h", -7), id="negative-string-length"),
])
def test_well_framed_metadata_with_a_broken_body(broker, healthy_client, body):
    with connect(broker) as sock:
        sock.sendall(frame(header(3, 0, 9) + body))
        response = read_response(sock)
        if response is not None:
            assert struct.unpack_from(">i", response)[0] == 9
    healthy_client()


def test_well_framed_produce_with_a_corrupt_message_set(broker, healthy_client):
    # Produce v2: acks, timeout, [topic [partition, message_set_size, message_set]], with a
    # message whose CRC is wrong. The partition is refused with CORRUPT_MESSAGE (2).
    value = b"payload"
    message = struct.pack(">bbq", 1, 0, int(time.time() * 1000)) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    entry = struct.pack(">qi", 0, 4 + len(message)) + struct.pack(">I", 0xDEADBEEF) + message
    topic = f"bad-crc-{time.monotonic_ns()}".encode()
    healthy_client.produce(topic.decode(), b"the topic exists")
    body = (struct.pack(">hi", 1, 10000) + struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic
            + struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", len(entry)) + entry)
    with connect(broker) as sock:
        sock.sendall(frame(header(0, 2, 11) + body))
        response = read_response(sock)
        assert response is not None
        pos = 4 + 4  # correlation id, topic count
        (name_length,) = struct.unpack_from(">h", response, pos)
        pos += 2 + name_length + 4  # topic name, partition count
        partition, error_code = struct.unpack_from(">ih", response, pos)
        assert (partition, error_code) == (0, 2)

        # The same connection is still usable after a per-partition error.
        sock.sendall(API_VERSIONS_V0)
        response = read_response(sock)
        assert response is not None and struct.unpack_from(">ih", response) == (7, 0)
    healthy_client()


def test_a_pipelined_good_request_after_bad_bytes_is_never_answered_out_of_order(broker, healthy_client):
    # Two good requests, then garbage: both answers come back, in order, before the close.
    with connect(broker) as sock:
        sock.sendall(frame(header(18, 0, 1)) + frame(header(18, 0, 2)) + struct.pack(">i", 0x7FFFFFFF))
        first, second = read_response(sock), read_response(sock)
        assert struct.unpack_from(">i", first)[0] == 1
        assert struct.unpack_from(">i", second)[0] == 2
        assert closed_by_broker(sock)
    healthy_client()


def test_clients_keep_working_while_bad_connections_come_and_go(broker, healthy_client):
    stop = threading.Event()
    attacks = 0

    def attack():
        nonlocal attacks
        payloads = [b"\xff" * 64, struct.pack(">i", 0x7FFFFFFF), frame(header(999, 0, 1)),
                    frame(header(3, 0, 2) + struct.pack(">i", 1_000_000)), frame(b"\x00")]
        while not stop.is_set():
            for payload in payloads:
                try:
                    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
                        sock.sendall(payload)
                        sock.shutdown(socket.SHUT_WR)
                        sock.recv(65536)
                except OSError:
                    pass
                attacks += 1

    attackers = [threading.Thread(target=attack) for _ in range(4)]
    for thread in attackers:
        thread.start()
    try:
        for _ in range(30):
            healthy_client()
    finally:
        stop.set()
        for thread in attackers:
            thread.join(30)
    assert attacks > 0
    assert broker.running
