"""In-process brokers for the broker's own tests, and a raw Kafka client over a real socket.

``start_broker(**overrides)`` starts a ``Broker`` on 127.0.0.1 port 0 with its data in the
test's ``tmp_path`` inside the test's trio nursery (pytest-trio), and returns it once it
accepts connections. ``RawClient`` speaks the wire protocol with ``protocol.framing``'s client
side, so tests control exactly which bytes are sent and can pipeline requests.
"""

from __future__ import annotations

import errno
import os
import resource
import time
from contextlib import contextmanager

import pytest
import trio

from minikafka.broker.config import BrokerConfig
from minikafka.broker.server import Broker
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.framing import ClientConnection
from minikafka.protocol.records import build_message_set


class RawClient:
    """A Kafka client connection on a trio socket, built on ``ClientConnection``."""

    def __init__(self, stream: trio.SocketStream, client_id: str = "raw-test") -> None:
        self.stream = stream
        self.conn = ClientConnection(client_id=client_id)
        self.known_topics: set[str] = set()

    @classmethod
    async def connect(cls, broker: Broker, client_id: str = "raw-test") -> "RawClient":
        stream = await trio.open_tcp_stream(broker.advertised_host, broker.advertised_port)
        return cls(stream, client_id)

    async def send(self, api_key: int, version: int, body, expect_response: bool = True) -> int:
        correlation_id, frame = self.conn.send_request(api_key, version, body, expect_response)
        await self.stream.send_all(frame)
        return correlation_id

    async def receive(self):
        """The next response (correlation id checked against the order sent)."""
        while True:
            response = self.conn.next_response()
            if response is not None:
                return response
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("broker closed the connection")
            self.conn.receive_data(data)

    async def request(self, api_key: int, version: int, body):
        await self.send(api_key, version, body)
        return (await self.receive()).body

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def closed_by_peer(self) -> bool:
        """True once the broker closes the connection (reading until EOF)."""
        try:
            while await self.stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        return True

    async def aclose(self) -> None:
        await self.stream.aclose()

    # -- conveniences for the common requests

    async def metadata(self, topic: str):
        """Metadata for ``topic``, as a client asks before its first produce to it: that is
        what creates it (auto.create.topics.enable), Produce never does."""
        answer = await self.request(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
        self.known_topics.add(topic)
        return answer

    async def produce(self, topic: str, partition: int, records: bytes, *, acks: int = 1,
                      version: int = 2):
        if topic not in self.known_topics:
            await self.metadata(topic)
        body = {"acks": acks, "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}
        if acks == 0:
            await self.send(ApiKey.PRODUCE, version, body, expect_response=False)
            return None
        response = await self.request(ApiKey.PRODUCE, version, body)
        return response.responses[0].partition_responses[0]

    async def fetch(self, topic: str, partition: int, offset: int, *, version: int = 2,
                    max_wait_ms: int = 0, min_bytes: int = 0, partition_max_bytes: int = 1 << 20,
                    max_bytes: int = 0x7FFFFFFF):
        response = await self.request(ApiKey.FETCH, version, fetch_body(
            [(topic, partition, offset, partition_max_bytes)], max_wait_ms=max_wait_ms,
            min_bytes=min_bytes, max_bytes=max_bytes))
        return response.responses[0].partitions[0]


def fetch_body(partitions, *, max_wait_ms: int = 0, min_bytes: int = 0, max_bytes: int = 0x7FFFFFFF):
    """A Fetch request body for ``(topic, partition, offset, partition_max_bytes)`` tuples."""
    topics: dict[str, list] = {}
    for topic, partition, offset, limit in partitions:
        topics.setdefault(topic, []).append(
            {"partition": partition, "fetch_offset": offset, "partition_max_bytes": limit})
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()]}


def message_set(*values: bytes, key: bytes | None = None, timestamp: int | None = None, **kwargs) -> bytes:
    """A producer's message set of ``values`` (magic 1, CreateTime now unless given)."""
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    return build_message_set([(key, value, ts) for value in values], **kwargs)


@pytest.fixture
def broker_config(tmp_path):
    """``broker_config({"kafka.name": "value"}, kafka_name="value")`` -> a BrokerConfig on
    127.0.0.1 port 0 with data under tmp_path (underscores in keyword names stand for dots)."""

    def make(properties: dict[str, str] | None = None, **overrides) -> BrokerConfig:
        merged = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data")}
        merged.update({key.replace("_", "."): str(value) for key, value in overrides.items()})
        merged.update(properties or {})
        return BrokerConfig(merged)

    return make


@pytest.fixture
def started_brokers() -> list[Broker]:
    return []


@pytest.fixture
def start_broker(nursery, broker_config, started_brokers):
    """``await start_broker(properties, **overrides)`` -> a running in-process Broker."""

    async def start(properties: dict[str, str] | None = None, **overrides) -> Broker:
        broker = Broker(broker_config(properties, **overrides))
        await nursery.start(broker.serve)
        started_brokers.append(broker)
        return broker

    return start


# The broker default that writes new topics in magic 0/1, the format before magic 2 was
# stored: for the tests of that format (marked magic_1_topics) and of its conversions.
MAGIC_1_TOPICS = {"log.message.format.version": "0.10.2"}


@pytest.fixture
async def broker(start_broker, request):
    return await start_broker(MAGIC_1_TOPICS if request.node.get_closest_marker("magic_1_topics") else None)


@pytest.fixture
async def connect(started_brokers):
    """``await connect(broker=None)`` -> a new RawClient to ``broker``, by default the last one
    started in this test (closed after the test)."""
    clients = []

    async def open_client(target: Broker | None = None, client_id: str = "raw-test") -> RawClient:
        raw = await RawClient.connect(target or started_brokers[-1], client_id)
        clients.append(raw)
        return raw

    yield open_client
    for raw in clients:
        await trio.aclose_forcefully(raw.stream)


@pytest.fixture
async def client(broker, connect):
    return await connect(broker)


@contextmanager
def open_file_limit(spare: int):
    """Leave this process, and so the in-process broker, exactly ``spare`` free descriptors
    (a lower soft open-file limit, filled up to it), so the disk and accept() run out of
    descriptors for real; the limit is restored on leaving."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + spare + 16, hard))
    fillers: list[int] = []
    try:
        while True:
            try:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as exc:
                if exc.errno != errno.EMFILE:
                    raise
                break
        for _ in range(spare):
            os.close(fillers.pop())
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# Test modules are imported with importlib (no package), so helpers travel as fixtures.
@pytest.fixture(name="open_file_limit")
def open_file_limit_fixture():
    return open_file_limit



@pytest.fixture(name="message_set")
def message_set_fixture():
    return message_set


@pytest.fixture(name="fetch_body")
def fetch_body_fixture():
    return fetch_body
