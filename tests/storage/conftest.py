"""Helpers for storage tests: real files in tmp_path, a fake clock, message sets built by
the protocol layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from minikafka.protocol.records import Codec, build_message_set, iter_records
from minikafka.storage import FakeClock, Log, LogConfig

START_MS = 1_700_000_000_000
# A log of magic 0/1 (the format before magic 2 was stored), for tests of its byte layout.
MAGIC_1 = {"message_format_version": "0.10.2"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START_MS)


def message_set(count: int, timestamp: int, *, codec: Codec = Codec.NONE, magic: int = 1,
                value_size: int = 10, tag: str = "") -> bytes:
    """``count`` messages with values ``b"<tag><i>"`` padded to ``value_size``."""
    return build_message_set(
        [(None, f"{tag}{i}".encode().ljust(value_size, b"."), timestamp) for i in range(count)],
        magic=magic, codec=codec,
    )


def open_log(directory: Path, clock: FakeClock, **settings) -> Log:
    return Log(directory, "t", 0, LogConfig(**settings), clock)


def all_records(log: Log, start: int | None = None):
    """Every record from ``start`` (default: log start) to the end, following read()."""
    offset = log.log_start_offset if start is None else start
    records = []
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        batch = [r for r in iter_records(chunk.read_bytes()) if r.offset >= offset]
        assert batch, f"no progress reading at {offset}"
        records.extend(batch)
        offset = batch[-1].offset + 1
    return records


@pytest.fixture(scope="module", autouse=True)
def _both_records_implementations(records_implementation):
    """Every test here runs against the C accelerator and the pure-Python loops."""
    return records_implementation
