"""Fixtures for the end-to-end tests: real clients against a real ``minikafka serve`` process.

Tests in one module share one broker (module scope) where they cannot disturb each other:
each test works on topics of its own (``topic`` / ``new_topic``). Tests that restart, kill or
reconfigure the broker take a private one from ``minikafka_broker_factory`` instead.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from minikafka.testing import MinikafkaBroker

_counter = itertools.count()


def _new_topic(prefix: str = "t") -> str:
    return f"{prefix}-{next(_counter)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with default settings shared by the tests of a module."""
    with MinikafkaBroker(tmp_path_factory.mktemp("minikafka-e2e")) as running:
        yield running


@pytest.fixture(scope="module")
def admin(broker):
    """A kafka-python KafkaAdminClient on the module's broker."""
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


@pytest.fixture
def new_topic():
    """``new_topic(prefix)`` -> a topic name no other test uses."""
    return _new_topic


@pytest.fixture
def topic():
    """A topic name no other test uses (not created: first use auto-creates it)."""
    return _new_topic()


@pytest.fixture
def sample_records() -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) pairs: keys, null keys, null values, empty and binary bytes, and enough
    repetitive records that a compressed batch holds many messages."""
    return [
        (b"key-0", b"value-0"),
        (None, b"value without a key"),
        (b"key-with-null-value", None),
        (b"\x00\xff binary key", bytes(range(256))),
        (b"", b""),
    ] + [(f"key-{i}".encode(), f"value-{i}-".encode() * 20) for i in range(5, 60)]


@pytest.fixture
def stored_codecs(broker):
    """``stored_codecs(topic)`` -> the codec names of the message-set entries in the topic's
    partition 0 segment files, i.e. what the broker wrote to disk (it recompresses only into a
    topic's compression.type)."""
    from minikafka.protocol.records import iter_entries

    def codecs(topic: str) -> set[str]:
        found = set()
        for segment in sorted((broker.log_dir / f"{topic}-0").glob("*.log")):
            found |= {entry.codec.name.lower() for entry in iter_entries(segment.read_bytes())}
        return found
    return codecs
