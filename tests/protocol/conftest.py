"""Helpers shared by the protocol tests: kafka-python as the independent implementation our
message sets and schemas are checked against.

They are fixtures because the suite runs with ``--import-mode=importlib``, under which test
modules cannot import a sibling helper module.
"""

from __future__ import annotations

import uuid
from typing import Any

import kafka.codec
import pytest

from minikafka.protocol.types import uuid_bytes
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords


class KafkaPythonLegacyRecords:
    """kafka-python's own magic 0/1 record builder and reader."""

    @staticmethod
    def build(magic, codec, records, offsets=None) -> bytes:
        """A set as kafka-python's producer builds it (wrapper at offset 0, timestamp 0);
        ``offsets`` overrides the producer's 0..n-1."""
        builder = LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 30)
        for index, (key, value, timestamp) in enumerate(records):
            offset = index if offsets is None else offsets[index]
            assert builder.append(offset, timestamp, key, value) is not None
        return bytes(builder.build())

    @staticmethod
    def read(buf) -> list[tuple]:
        """``(offset, timestamp, timestamp_type, key, value)`` of every record as kafka-python's
        consumer reads it, every CRC checked; magic 0 gives None timestamps."""
        records = MemoryRecords(bytes(buf))
        out = []
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            for record in batch:
                assert record.validate_crc()
                out.append((record.offset, record.timestamp, record.timestamp_type, record.key, record.value))
        return out


@pytest.fixture(scope="module")
def kafka_python_records():
    """kafka-python's legacy record code (its magic 0 lz4 needs the ``xxhash`` package, which
    the test extra installs). Module-scoped so hypothesis tests can use it."""
    assert kafka.codec.xxhash is not None, "pip install xxhash: kafka-python's magic 0 lz4 needs it"
    return KafkaPythonLegacyRecords()


def _kafka_python_kwargs(struct_field, value: dict) -> dict[str, Any]:
    """Constructor arguments of a kafka-python message (or nested DataContainer) from one of
    our plain dict values."""
    kwargs = {}
    for name, item in value.items():
        if name not in struct_field.fields and name in ("cluster_authorized_operations", "topic_authorized_operations"):
            name = "authorized_operations"  # kafka-python's Metadata names both so (json_patch)
        field = struct_field.fields[name]
        if field.is_struct_array() and item is not None:
            item = [field.data_class(**_kafka_python_kwargs(field, element)) for element in item]
        elif field.is_struct() and item is not None:
            item = field.data_class(**_kafka_python_kwargs(field, item))
        elif field.type_str == "uuid":  # ours are Kafka's text form, theirs uuid.UUID
            item = uuid.UUID(bytes=uuid_bytes(item))
        elif field.type_str == "bitfield":  # Kafka's int32 bit sets, a set of bit numbers there
            item = {bit for bit in range(32) if item & (1 << bit)}
        kwargs[name] = item
    return kwargs


@pytest.fixture(scope="session")
def kafka_python_message():
    """``make(cls, version, value)``: kafka-python's message ``cls[version]`` holding ``value``."""

    def make(cls, version: int, value: dict):
        return cls[version](**_kafka_python_kwargs(cls._struct, value))

    return make


@pytest.fixture(scope="module", autouse=True)
def _both_records_implementations(records_implementation):
    """Every test here runs against the C accelerator and the pure-Python loops."""
    return records_implementation
