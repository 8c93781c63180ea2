"""list_segments: a read-only view for offline readers, with or without a broker."""

import os

from minikafka.protocol.records import iter_records
from minikafka.storage import FakeClock, LogConfig, LogManager, list_segments

from .conftest import START_MS, message_set


def _snapshot(directory):
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*")}


def test_list_segments_matches_the_log_and_changes_nothing(tmp_path):
    manager = LogManager([tmp_path], LogConfig(segment_bytes=600), FakeClock(START_MS))
    manager.startup()
    log = manager.create_topic("events", 2, {})[0]
    for i in range(20):
        log.append_as_leader(message_set(1, START_MS + i))
    manager.create_topic("empty", 1, {})
    expected = log.segments()
    before = _snapshot(tmp_path)
    listed = list_segments(tmp_path)
    assert _snapshot(tmp_path) == before
    assert [s for s in listed if s.topic == "events" and s.partition == 0] == expected
    assert [(s.topic, s.partition, s.base_offset, s.closed) for s in listed if s.topic != "events" or s.partition] == [
        ("empty", 0, 0, False), ("events", 1, 0, False)]
    assert list_segments(tmp_path / "events-0") == expected
    # A reader can take each closed segment's bytes as they are.
    offsets = [r.offset for s in listed if s.closed for r in iter_records(s.log_path.read_bytes())]
    assert offsets == list(range(expected[-1].base_offset))
    manager.shutdown()
    after = list_segments(tmp_path)
    assert [s for s in after if s.topic == "events" and s.partition == 0] == expected


def test_list_segments_copes_with_crashed_indexes_and_skips_deletions(tmp_path):
    manager = LogManager([tmp_path], LogConfig(), FakeClock(START_MS))
    manager.startup()
    log = manager.create_topic("t", 1, {})[0]
    for i in range(50):
        log.append_as_leader(message_set(1, START_MS + i * 10, value_size=200))
    # Not shut down: the active indexes are still preallocated, as after a crash.
    (tmp_path / "t-0.0a1b-delete").mkdir()
    (tmp_path / "t-0.0a1b-delete" / "00000000000000000000.log").write_bytes(b"junk")
    [info] = list_segments(tmp_path)
    assert (info.base_offset, info.next_offset, info.max_timestamp, info.closed) == (0, 50, START_MS + 490, False)
    assert info.size == os.path.getsize(info.log_path)
