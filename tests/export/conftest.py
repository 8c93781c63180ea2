"""Shared fixtures of the export tests: one local SparkSession for the whole run, and helpers
that write Kafka-layout log directories from message sets.

Spark's start-up (~10 s) dominates these tests, so every Spark test shares ``spark``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minikafka.protocol.records import build_message_set


@pytest.fixture(scope="session")
def spark():
    from minikafka.export.session import spark_session

    session = spark_session("local[2]", app_name="minikafka export tests")
    session.conf.set("spark.sql.shuffle.partitions", "1")
    yield session
    session.stop()


def write_segments(log_dir: Path, topic: str, partition: int, segments: list[tuple[int, bytes]]) -> list[Path]:
    """Write ``<log_dir>/<topic>-<partition>/<base offset, 20 digits>.log`` files from
    ``(base offset, message set bytes)`` pairs; as in Kafka, the last one is the active segment."""
    directory = log_dir / f"{topic}-{partition}"
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for base, data in segments:
        path = directory / f"{base:020d}.log"
        path.write_bytes(data)
        paths.append(path)
    return paths


def plain_segment(first_offset: int, count: int, *, timestamp0: int = 1_700_000_000_000,
                  step_ms: int = 1000) -> tuple[int, bytes]:
    """A segment of ``count`` uncompressed magic 1 messages: key ``k<offset>``, value ``v<offset>``,
    timestamp ``timestamp0 + offset * step_ms``."""
    return first_offset, b"".join(
        build_message_set([(b"k%d" % o, b"v%d" % o, timestamp0 + o * step_ms)], base_offset=o)
        for o in range(first_offset, first_offset + count))
