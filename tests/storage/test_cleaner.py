"""The log cleaner on real files with a fake clock (after Kafka's LogCleanerTest)."""

from __future__ import annotations

import os
import signal
import threading
import time
import shutil

import pytest

from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import BATCH_OVERHEAD, build_record_batch, iter_batches
from minikafka.protocol.records import Codec, build_message_set, iter_entries, iter_records
from minikafka.storage import Log, LogConfig
from minikafka.storage.checkpoint import OffsetCheckpointFile
from minikafka.storage.cleaner import (CLEANER_OFFSET_CHECKPOINT, Cleaner, CleanerConfig, LogCleaner,
                                       Throttler, cleanable_range, group_segments)
from minikafka.storage.segment import CLEANED_SUFFIX, DELETED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX

from .conftest import START_MS, all_records

HOUR = 3600_000
DAY = 24 * HOUR


OLD_FORMAT = "0.10.2"  # message.format.version of a magic 0/1 log


def compacted_log(directory, clock, **settings) -> Log:
    settings.setdefault("cleanup_policy", "compact")
    settings.setdefault("min_cleanable_dirty_ratio", 0.0)
    return Log(directory, "t", 0, LogConfig(**settings), clock)


def keyed(*pairs, timestamp: int = START_MS, magic: int = 1, codec: Codec = Codec.NONE) -> bytes:
    """A message set of ``(key, value)`` pairs (str, or None for a null value)."""
    return build_message_set(
        [(k.encode() if k is not None else None, v.encode() if v is not None else None, timestamp)
         for k, v in pairs], magic=magic, codec=codec)


def write(log: Log, pairs, *, per_segment: int, **kwargs) -> None:
    """Append one record per pair, rolling after every ``per_segment``; then one more
    record ("end") in the active segment, which the cleaner must leave alone."""
    for i, pair in enumerate(pairs):
        log.append_as_leader(keyed(pair, **kwargs))
        if (i + 1) % per_segment == 0:
            log.roll()
    log.append_as_leader(keyed(("end", "x")))
    log.high_watermark = log.log_end_offset


def clean(log: Log, clock, **config):
    """One pass of a LogCleaner over ``log`` alone."""
    return LogCleaner(lambda: [log], CleanerConfig(**config), clock).clean_filthiest()


def view(log: Log) -> list[tuple[int, str | None, str | None]]:
    return [(r.offset, r.key and r.key.decode(), r.value and r.value.decode()) for r in all_records(log)]


def test_the_latest_value_of_each_key_survives_at_its_offset(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock)
    pairs = [(f"k{i % 3}", f"v{i}") for i in range(12)]
    write(log, pairs, per_segment=4)
    stats = clean(log, clock)
    assert stats.end_offset == 12  # the active segment holds offset 12
    assert view(log) == [(9, "k0", "v9"), (10, "k1", "v10"), (11, "k2", "v11"), (12, "end", "x")]
    assert log.log_start_offset == 0 and log.log_end_offset == 13
    # Every offset still reads, from wherever a consumer stands.
    assert [r.offset for r in all_records(log, 3)] == [9, 10, 11, 12]
    log.close()
    reopened = compacted_log(tmp_path / "t-0", clock)
    assert view(reopened) == [(9, "k0", "v9"), (10, "k1", "v10"), (11, "k2", "v11"), (12, "end", "x")]
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]


def test_the_clean_part_is_cleaned_again_against_newer_keys(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock)
    write(log, [("a", "1"), ("b", "1"), ("a", "2"), ("c", "1")], per_segment=2)
    clean(log, clock)
    assert [o for o, _, _ in view(log)] == [1, 2, 3, 4]
    log.append_as_leader(keyed(("b", "2")))
    log.roll()
    log.append_as_leader(keyed(("d", "1")))
    log.high_watermark = log.log_end_offset
    stats = clean(log, clock)
    assert stats.first_dirty_offset == 4
    assert view(log) == [(2, "a", "2"), (3, "c", "1"), (4, "end", "x"), (5, "b", "2"), (6, "d", "1")]


def test_tombstones_stay_until_the_delete_horizon(tmp_path, clock):
    # Two records a segment (36 bytes each, a tombstone 35), so cleaned segments stay apart.
    log = compacted_log(tmp_path / "t-0", clock, delete_retention_ms=DAY, segment_bytes=72)
    later = START_MS + DAY + 1

    def append(*pairs, timestamp=START_MS):
        for pair in pairs:
            log.append_as_leader(keyed(pair, timestamp=timestamp))
        log.high_watermark = log.log_end_offset

    append(("a", "1"), ("b", "1"), ("a", None), ("c", "1"), ("z", "1"))
    clean(log, clock)
    # Kept: the horizon is the newest time of the clean part minus a day, and nothing was clean.
    assert view(log) == [(1, "b", "1"), (2, "a", None), (3, "c", "1"), (4, "z", "1")]
    append(("d", "1"), ("e", "1"), timestamp=later)
    clean(log, clock)
    assert (2, "a", None) in view(log)  # the clean part's newest record is from START_MS
    append(("f", "1"), ("g", "1"), timestamp=later)
    clean(log, clock)
    # Now segment 4 (d at START_MS + a day + 1) is clean: the tombstone's segment is older
    # than the horizon.
    assert view(log) == [(1, "b", "1"), (3, "c", "1"), (4, "z", "1"), (5, "d", "1"), (6, "e", "1"),
                         (7, "f", "1"), (8, "g", "1")]


def test_produce_without_a_key_is_refused_and_old_unkeyed_records_are_dropped(tmp_path, clock):
    directory = tmp_path / "t-0"
    plain = Log(directory, "t", 0, LogConfig(), clock)
    plain.append_as_leader(build_message_set([(None, b"no key", START_MS), (b"k", b"v", START_MS)]))
    plain.roll()
    plain.close()
    log = compacted_log(directory, clock)
    with pytest.raises(RecordError) as refused:
        log.append_as_leader(build_message_set([(b"k", b"1", START_MS), (None, b"2", START_MS)],
                                               codec=Codec.GZIP))
    assert refused.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 2
    log.append_as_leader(keyed(("k2", "v")))
    log.high_watermark = log.log_end_offset
    clean(log, clock)
    assert view(log) == [(1, "k", "v"), (2, "k2", "v")]


def test_a_full_offset_map_cleans_up_to_where_it_got(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock)
    pairs = [(f"k{i}", "old") for i in range(6)] + [(f"k{i}", "new") for i in range(6)]
    write(log, pairs, per_segment=3)
    # Room for 4 keys: 4 / 0.9 slots of 24 bytes.
    stats = clean(log, clock, dedupe_buffer_size=24 * 5, dedupe_buffer_load_factor=0.9)
    assert stats.keys == 4 and stats.end_offset == 4
    # Offsets 0-3 were mapped, so nothing below them is older; what is past the map's end is kept.
    assert [o for o, _, _ in view(log)] == list(range(13))
    stats = clean(log, clock, dedupe_buffer_size=24 * 5, dedupe_buffer_load_factor=0.9)
    assert stats.first_dirty_offset == 4 and stats.end_offset == 8
    stats = clean(log, clock, dedupe_buffer_size=24 * 5, dedupe_buffer_load_factor=0.9)
    assert stats.end_offset == 12
    assert view(log) == [(6 + i, f"k{i}", "new") for i in range(6)] + [(12, "end", "x")]
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {("t", 0): 12}


def test_the_active_segment_and_the_compaction_lag_are_not_cleaned(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock, min_compaction_lag_ms=HOUR)
    log.append_as_leader(keyed(("a", "1"), timestamp=START_MS - 2 * HOUR))
    log.append_as_leader(keyed(("a", "2"), timestamp=START_MS - 2 * HOUR))
    log.roll()
    log.append_as_leader(keyed(("a", "3"), timestamp=START_MS - 1))  # younger than the lag
    log.append_as_leader(keyed(("a", "4"), timestamp=START_MS - 1))
    log.roll()
    log.append_as_leader(keyed(("a", "5")))
    log.append_as_leader(keyed(("a", "6")))
    log.high_watermark = log.log_end_offset
    assert cleanable_range(log, 0, clock.time_ms()).first_uncleanable == 2
    clean(log, clock)
    assert [o for o, _, _ in view(log)] == [1, 2, 3, 4, 5]
    clock.advance(HOUR)
    assert cleanable_range(log, 2, clock.time_ms()).first_uncleanable == 4
    clean(log, clock)
    assert [o for o, _, _ in view(log)] == [3, 4, 5]


def test_nothing_above_the_high_watermark_is_cleaned(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock)
    write(log, [("a", "1"), ("a", "2"), ("a", "3"), ("a", "4")], per_segment=2)
    log.high_watermark = 2
    assert clean(log, clock).end_offset == 2
    assert [o for o, _, _ in view(log)] == [1, 2, 3, 4]


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("magic", [0, 1, 2])
def test_compressed_wrappers_and_batches(tmp_path, clock, codec, magic):
    # Magic 2: a magic 1 set up-converted to a batch by a log of the current format.
    log = compacted_log(tmp_path / "t-0", clock, message_format_version=OLD_FORMAT if magic < 2 else "2.8")
    produced = min(magic, 1)
    whole = keyed(("x", "1"), ("y", "1"), magic=produced, codec=codec)
    log.append_as_leader(keyed(("a", "1"), ("b", "1"), ("c", "1"), ("d", "1"), magic=produced, codec=codec))
    log.append_as_leader(whole)
    log.roll()
    log.append_as_leader(keyed(("b", "2"), ("d", "2"), magic=produced, codec=codec))
    log.roll()
    log.append_as_leader(keyed(("end", "x"), magic=produced))
    log.high_watermark = log.log_end_offset
    kept_wrapper = log.read(4, 1 << 20, max_offset=6).read_bytes()
    clean(log, clock)
    records = all_records(log)
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, b"a", b"1"), (2, b"c", b"1"), (4, b"x", b"1"), (5, b"y", b"1"), (6, b"b", b"2"), (7, b"d", b"2"),
        (8, b"end", b"x")]
    assert {r.magic for r in records} == {magic}
    stored = log.read(0, 1 << 20, max_offset=6).read_bytes()
    entries = list(iter_entries(stored))
    # The survivors, recompressed; a batch keeps its last offset (its producer's last sequence).
    assert [(e.offset, e.codec) for e in entries] == [(2 if magic < 2 else 3, codec), (5, codec)]
    assert stored[entries[1].position:] == kept_wrapper  # a wrapper whose records all survive is kept as is
    # A consumer fetching from inside the rebuilt wrapper finds it.
    assert [r.offset for r in iter_records(log.read(1, 1 << 20).read_bytes())][:2] == [0, 2]


def test_log_append_time_wrappers_keep_their_timestamp(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock, message_timestamp_type="LogAppendTime")
    log.append_as_leader(keyed(("a", "1"), ("b", "1"), codec=Codec.GZIP, timestamp=START_MS - DAY))
    log.roll()
    clock.advance(5)
    log.append_as_leader(keyed(("a", "2")))
    log.roll()
    log.append_as_leader(keyed(("end", "x")))
    log.high_watermark = log.log_end_offset
    clean(log, clock)
    survivor = all_records(log)[0]
    assert (survivor.offset, survivor.timestamp) == (1, START_MS)


def test_mixed_magic_segments(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock, message_format_version=OLD_FORMAT)
    log.append_as_leader(keyed(("a", "1"), ("b", "1"), magic=0))
    log.append_as_leader(keyed(("c", "1"), ("a", "2"), magic=0, codec=Codec.SNAPPY))
    log.roll()
    log.append_as_leader(keyed(("b", "2"), ("c", "2"), magic=1, codec=Codec.GZIP))
    log.append_as_leader(keyed(("d", "1"), magic=1))
    log.roll()
    log.append_as_leader(keyed(("c", "3"), magic=1))
    log.roll()
    log.append_as_leader(keyed(("end", "x"), magic=0))
    log.high_watermark = log.log_end_offset
    clean(log, clock)
    assert [(r.offset, r.magic, r.key, r.value) for r in all_records(log)] == [
        (3, 0, b"a", b"2"), (4, 1, b"b", b"2"), (6, 1, b"d", b"1"), (7, 1, b"c", b"3"), (8, 0, b"end", b"x")]


def test_groups_stay_within_segment_bytes_and_merge_sparse_segments(tmp_path, clock):
    one = len(keyed(("k0", "v")))
    log = compacted_log(tmp_path / "t-0", clock, segment_bytes=4 * one, message_format_version=OLD_FORMAT)
    for i in range(16):  # four full segments of four keys, each key written twice
        log.append_as_leader(keyed((f"k{i % 8}", "v")))
    log.append_as_leader(keyed(("end", "x")))
    log.high_watermark = log.log_end_offset
    closed, _ = log.cleaning_snapshot()
    assert [len(g) for g in group_segments(closed, 4 * one, log.config.segment_index_bytes)] == [1, 1, 1, 1]
    assert [len(g) for g in group_segments(closed, 8 * one, log.config.segment_index_bytes)] == [2, 2]
    clean(log, clock)
    # The first two segments lost every record but each keeps its place; the next pass
    # merges them with the next one, as their sizes now allow.
    assert [o for o, _, _ in view(log)] == list(range(8, 17))
    log.append_as_leader(keyed(("k0", "w")))
    log.roll()
    log.append_as_leader(keyed(("end", "y")))
    log.high_watermark = log.log_end_offset
    clean(log, clock)
    segments = log.segments()
    assert [s.base_offset for s in segments] == [0, 12, 16, 18]
    assert view(log)[0] == (9, "k1", "v")
    log.close()
    reopened = compacted_log(tmp_path / "t-0", clock, segment_bytes=4 * one, message_format_version=OLD_FORMAT)
    assert [o for o, _, _ in view(reopened)] == list(range(9, 16)) + [16, 17, 18]


def test_cleaned_segments_keep_a_working_time_index(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock, index_interval_bytes=1)
    for i in range(10):
        log.append_as_leader(keyed((f"k{i % 5}", str(i)), timestamp=START_MS + i))
    log.roll()
    log.append_as_leader(keyed(("end", "x"), timestamp=START_MS + 100))
    log.high_watermark = log.log_end_offset
    clean(log, clock)
    assert log.offset_for_timestamp(START_MS + 2) == (5, START_MS + 5)
    assert log.offset_for_timestamp(START_MS + 7) == (7, START_MS + 7)
    log.close()
    reopened = compacted_log(tmp_path / "t-0", clock, index_interval_bytes=1)
    assert reopened.offset_for_timestamp(START_MS + 7) == (7, START_MS + 7)
    segment = next(iter(reopened._segments))
    assert segment.indexes_look_sane()


def test_compact_and_delete_also_applies_retention(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock, cleanup_policy="compact,delete", retention_ms=DAY)
    write(log, [("a", "1"), ("a", "2"), ("b", "1"), ("b", "2")], per_segment=2, timestamp=START_MS - 2 * DAY)
    clean(log, clock)
    assert view(log) == [(1, "a", "2"), (3, "b", "2"), (4, "end", "x")]
    assert log.delete_expired_segments() == 1  # the one cleaned segment
    assert view(log) == [(4, "end", "x")]


def test_the_filthiest_log_is_cleaned_first_and_the_ratio_is_respected(tmp_path, clock):
    quiet = compacted_log(tmp_path / "q-0", clock, min_cleanable_dirty_ratio=0.5)
    busy = compacted_log(tmp_path / "b-0", clock, min_cleanable_dirty_ratio=0.5)
    quiet.topic, busy.topic = "q", "b"
    write(quiet, [(f"q{i}", "1") for i in range(4)], per_segment=2)
    write(busy, [(f"b{i}", "1") for i in range(4)], per_segment=2)
    cleaner = LogCleaner(lambda: [quiet, busy], CleanerConfig(), clock)
    passes = cleaner.clean_until_idle()
    assert {(s.topic, s.end_offset) for s in passes} == {("q", 4), ("b", 4)}
    assert cleaner.filthiest() is None  # all clean now
    # A little new dirt, under half of the log, is not worth a pass; much is.
    write(quiet, [("q0", "2")], per_segment=1)
    write(busy, [(f"b{i}", "2") for i in range(6)], per_segment=3)
    assert cleanable_range(quiet, 4, clock.time_ms()).ratio < 0.5
    assert cleaner.filthiest().log is busy
    assert [s.topic for s in cleaner.clean_until_idle()] == ["b"]
    written = (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text()
    assert written.splitlines() == ["0", "2", "b 0 11", "q 0 4"]


def test_a_log_truncated_while_it_is_cleaned_keeps_its_segments(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock)
    write(log, [("a", "1"), ("a", "2"), ("a", "3"), ("a", "4")], per_segment=2)
    target = cleanable_range(log, 0, clock.time_ms())
    cleaner = Cleaner(CleanerConfig())
    original = log.replace_segments

    def truncate_first(cleaned, old, truncations):
        log.truncate_to(3)
        return original(cleaned, old, truncations)

    log.replace_segments = truncate_first
    with pytest.raises(Exception, match="changed while it was cleaned"):
        cleaner.clean(log, target.first_dirty, target.first_uncleanable)
    assert [o for o, _, _ in view(log)] == [0, 1, 2]
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(CLEANED_SUFFIX)]


# -- crash at each step of the swap -----------------------------------------------------------

def _crashed_clean(tmp_path, clock):
    """A log of three closed segments and a cleaned segment for all of them written as
    ``.cleaned`` files, then the process "killed": nothing closed, files as they are."""
    directory = tmp_path / "t-0"
    log = compacted_log(directory, clock)
    write(log, [("a", "1"), ("b", "1"), ("a", "2"), ("b", "2"), ("a", "3"), ("c", "1")], per_segment=2)
    log.flush()
    target = cleanable_range(log, 0, clock.time_ms())
    cleaner = Cleaner(CleanerConfig())
    cleaned = []
    log.replace_segments = lambda new, old, truncations: cleaned.append((new, old)) or True
    cleaner.clean(log, target.first_dirty, target.first_uncleanable)
    [(new, old)] = cleaned
    assert [s.base_offset for s in old] == [0, 2, 4]
    return directory, new, old


def _reopened(directory, clock):
    log = Log(directory, "t", 0, LogConfig(cleanup_policy="compact"), clock, needs_recovery=True)
    names = os.listdir(directory)
    assert not [n for n in names if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX))], names
    return log


BEFORE = [(0, "a", "1"), (1, "b", "1"), (2, "a", "2"), (3, "b", "2"), (4, "a", "3"), (5, "c", "1"),
          (6, "end", "x")]
AFTER = [(3, "b", "2"), (4, "a", "3"), (5, "c", "1"), (6, "end", "x")]


def _rename(segment_files, suffix_from: str, suffix_to: str) -> None:
    for path in segment_files:
        os.replace(path, str(path)[: len(str(path)) - len(suffix_from)] + suffix_to)


def _files(directory, base: int, suffix: str):
    stem = f"{base:020d}"
    return [directory / f"{stem}{ext}{suffix}" for ext in (".index", ".timeindex", LOG_SUFFIX)]


def test_crash_with_cleaned_files_keeps_the_old_segments(tmp_path, clock):
    directory, _, _ = _crashed_clean(tmp_path, clock)
    assert (directory / f"{0:020d}{LOG_SUFFIX}{CLEANED_SUFFIX}").exists()
    assert view(_reopened(directory, clock)) == BEFORE


def test_crash_with_a_swap_file_finishes_the_swap(tmp_path, clock):
    directory, _, _ = _crashed_clean(tmp_path, clock)
    _rename(_files(directory, 0, CLEANED_SUFFIX), CLEANED_SUFFIX, SWAP_SUFFIX)
    log = _reopened(directory, clock)
    assert view(log) == AFTER
    assert [s.base_offset for s in log.segments()] == [0, 6]


def test_crash_with_a_swap_file_and_the_log_file_not_yet_renamed(tmp_path, clock):
    directory, _, _ = _crashed_clean(tmp_path, clock)
    _rename(_files(directory, 0, CLEANED_SUFFIX)[:2], CLEANED_SUFFIX, SWAP_SUFFIX)  # indexes only
    assert view(_reopened(directory, clock)) == BEFORE


@pytest.mark.parametrize("renamed", [1, 2, 3])
def test_crash_with_some_old_segments_deleted(tmp_path, clock, renamed):
    directory, _, old = _crashed_clean(tmp_path, clock)
    _rename(_files(directory, 0, CLEANED_SUFFIX), CLEANED_SUFFIX, SWAP_SUFFIX)
    for segment in old[:renamed]:
        _rename(_files(directory, segment.base_offset, ""), "", DELETED_SUFFIX)
    log = _reopened(directory, clock)
    assert view(log) == AFTER
    assert [s.base_offset for s in log.segments()] == [0, 6]


def test_crash_after_the_swap_with_deleted_files_left(tmp_path, clock):
    directory, _, old = _crashed_clean(tmp_path, clock)
    for segment in old:
        _rename(_files(directory, segment.base_offset, ""), "", DELETED_SUFFIX)
    _rename(_files(directory, 0, CLEANED_SUFFIX), CLEANED_SUFFIX, "")
    log = _reopened(directory, clock)
    assert view(log) == AFTER


def test_an_interrupted_swap_whose_cleaned_segment_is_empty(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = compacted_log(directory, clock)
    write(log, [("a", "1"), ("a", "2"), ("a", "3")], per_segment=2)
    log.flush()
    shutil.copyfile(directory / f"{0:020d}{LOG_SUFFIX}", tmp_path / "first")
    os.truncate(tmp_path / "first", 0)
    os.replace(tmp_path / "first", directory / f"{0:020d}{LOG_SUFFIX}{SWAP_SUFFIX}")
    reopened = _reopened(directory, clock)
    assert view(reopened) == [(2, "a", "3"), (3, "end", "x")]


def test_a_truncation_below_the_checkpoint_makes_what_follows_dirty_again(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock)
    write(log, [("a", "1"), ("b", "1"), ("c", "1"), ("d", "1")], per_segment=2)
    cleaner = LogCleaner(lambda: [log], CleanerConfig(), clock)
    assert cleaner.clean_filthiest().end_offset == 4
    log.truncate_to(2)  # a follower following a new leader
    for pair in [("a", "2"), ("b", "2"), ("x", "1"), ("y", "1")]:
        log.append_as_leader(keyed(pair))
    log.roll()
    log.append_as_leader(keyed(("end", "y")))
    log.high_watermark = log.log_end_offset
    stats = cleaner.clean_filthiest()
    assert (stats.first_dirty_offset, stats.end_offset) == (2, 6)
    assert view(log) == [(2, "a", "2"), (3, "b", "2"), (4, "x", "1"), (5, "y", "1"), (6, "end", "y")]


def test_a_damaged_log_is_left_alone_and_the_others_are_cleaned(tmp_path, clock, caplog):
    damaged = compacted_log(tmp_path / "d-0", clock)
    healthy = compacted_log(tmp_path / "h-0", clock)
    damaged.topic, healthy.topic = "d", "h"
    write(damaged, [("a", "1"), ("a", "2")], per_segment=2)
    write(healthy, [("a", "1"), ("a", "2")], per_segment=2)
    with open(damaged.segments()[0].log_path, "r+b") as f:  # a flipped bit in the first message
        f.seek(30)
        byte = f.read(1)
        f.seek(30)
        f.write(bytes([byte[0] ^ 1]))
    cleaner = LogCleaner(lambda: [damaged, healthy], CleanerConfig(), clock)
    passes = cleaner.clean_until_idle()
    assert [s.topic for s in passes] == ["h"]
    assert "cleaning d-0 failed" in caplog.text
    assert cleaner.filthiest() is None
    assert not [n for n in os.listdir(tmp_path / "d-0") if n.endswith(CLEANED_SUFFIX)]


def test_a_topic_created_again_under_the_same_name_starts_dirty(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock)
    write(log, [("a", "1"), ("a", "2"), ("a", "3"), ("a", "4")], per_segment=2)
    logs = [log]
    cleaner = LogCleaner(lambda: logs, CleanerConfig(), clock)
    assert cleaner.clean_filthiest().end_offset == 4
    log.delete()
    again = compacted_log(tmp_path / "t-0", clock)
    write(again, [("b", "1"), ("b", "2")], per_segment=2)
    logs[:] = [again]
    assert cleaner.clean_filthiest().first_dirty_offset == 0
    assert view(again) == [(1, "b", "2"), (2, "end", "x")]


def _slow_log(directory, clock) -> Log:
    """Four closed segments of 50 keyed 100-byte records over 10 keys, and "end" in the
    active one: a pass throttled to 20 kB/s takes a few seconds over it."""
    log = compacted_log(directory, clock)
    write(log, [(f"k{i % 10}", f"{i}".ljust(100, ".")) for i in range(200)], per_segment=50)
    return log


def _start_pass(cleaner: LogCleaner, directory) -> tuple[threading.Thread, list]:
    """``cleaner.clean_filthiest()`` in a thread, returned once its worker writes a
    ``.cleaned`` segment (the offset map is built)."""
    result = []
    thread = threading.Thread(target=lambda: result.append(cleaner.clean_filthiest()))
    thread.start()
    while not any(n.endswith(CLEANED_SUFFIX) for n in os.listdir(directory)):
        assert thread.is_alive(), result
        time.sleep(0.01)
    return thread, result


def test_an_aborted_pass_leaves_the_log_as_it_was(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock)
    write(log, [("a", "1"), ("a", "2"), ("a", "3"), ("a", "4")], per_segment=2)
    cleaner = LogCleaner(lambda: [log], CleanerConfig(), clock)
    cleaner.abort()  # the broker is stopping
    assert cleaner.clean_until_idle() == []
    assert cleaner.worker_pids() == []
    slow = _slow_log(tmp_path / "s-0", clock)
    before = view(slow)
    cleaner = LogCleaner(lambda: [slow], CleanerConfig(max_io_bytes_per_second=20_000), clock)
    thread, result = _start_pass(cleaner, tmp_path / "s-0")
    cleaner.abort()  # killed mid-pass: the broker's shutdown does not wait for it
    thread.join()
    assert result == [None] and view(slow) == before
    assert not [n for n in os.listdir(tmp_path / "s-0") if n.endswith(CLEANED_SUFFIX)]


def test_a_worker_killed_mid_pass_leaves_the_log_intact_and_the_pass_is_retried(tmp_path, clock, caplog):
    directory = tmp_path / "t-0"
    log = _slow_log(directory, clock)
    before = view(log)
    cleaner = LogCleaner(lambda: [log], CleanerConfig(max_io_bytes_per_second=20_000), clock)
    thread, result = _start_pass(cleaner, directory)
    [killed] = cleaner.worker_pids()
    os.kill(killed, signal.SIGKILL)
    thread.join()
    assert result == [None] and view(log) == before
    assert "worker process ended with exit code -9" in caplog.text and "the pass is retried" in caplog.text
    assert not [n for n in os.listdir(directory) if n.endswith(CLEANED_SUFFIX)]
    assert not (tmp_path / CLEANER_OFFSET_CHECKPOINT).exists()
    stats = cleaner.clean_filthiest()  # in a new worker
    assert cleaner.worker_pids() != [killed]
    assert stats.end_offset == 200 and stats.worker_peak_rss > 0
    assert view(log) == [(o, k, v) for o, k, v in before if o >= 190]
    assert sorted(n for n in os.listdir(directory) if n.endswith(LOG_SUFFIX)) == [
        "00000000000000000000.log", "00000000000000000200.log"]


def test_records_appended_during_a_pass_survive_its_swap(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = _slow_log(directory, clock)
    before = view(log)
    cleaner = LogCleaner(lambda: [log], CleanerConfig(max_io_bytes_per_second=20_000), clock)
    thread, result = _start_pass(cleaner, directory)
    appended = []
    while thread.is_alive():  # into the active segment, and rolled over into closed ones
        appended.append(log.append_as_leader(keyed(("k1", f"new{len(appended)}"))).first_offset)
        if len(appended) % 5 == 0:
            log.roll()
        time.sleep(0.05)
    thread.join()
    log.high_watermark = log.log_end_offset
    [stats] = result
    assert stats.end_offset == 200 and appended
    assert view(log) == [(o, k, v) for o, k, v in before if o >= 190] + [
        (offset, "k1", f"new{i}") for i, offset in enumerate(appended)]


def test_log_cleaner_threads_clean_as_many_logs_at_once_each_in_its_own_worker(tmp_path, clock):
    logs = [_slow_log(tmp_path / f"{topic}-0", clock) for topic in "ab"]
    logs[0].topic, logs[1].topic = "a", "b"
    before = [view(log) for log in logs]
    cleaner = LogCleaner(lambda: logs, CleanerConfig(max_io_bytes_per_second=40_000, threads=2), clock)
    passes = []
    thread = threading.Thread(target=lambda: passes.extend(cleaner.clean_until_idle()))
    thread.start()
    while not all(any(n.endswith(CLEANED_SUFFIX) for n in os.listdir(log.dir)) for log in logs):
        assert thread.is_alive()  # the two passes overlap: each has a group being written
        time.sleep(0.01)
    assert len(set(cleaner.worker_pids())) == 2
    thread.join()
    assert sorted((s.topic, s.end_offset) for s in passes) == [("a", 200), ("b", 200)]
    assert [view(log) for log in logs] == [[(o, k, v) for o, k, v in b if o >= 190] for b in before]
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().splitlines() == ["0", "2", "a 0 200", "b 0 200"]


def test_the_throttle_sleeps_what_the_rate_asks():
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    throttle = Throttler(1000, monotonic=lambda: now[0], sleep=sleep)
    throttle(500)  # half a second's worth at once
    assert slept == [0.5]
    now[0] += 0.2
    throttle(100)  # 600 bytes in 0.7 s: within the rate
    assert slept == [0.5]
    now[0] += 5
    throttle(10)  # a new window after the idle spell
    throttle(1000)
    assert slept[-1] == pytest.approx(1.0)


def test_a_segment_not_yet_exported_is_not_rewritten(tmp_path, clock):
    log = compacted_log(tmp_path / "t-0", clock)
    write(log, [("a", "1"), ("a", "2"), ("a", "3"), ("a", "4")], per_segment=2)
    exported_up_to = 2  # the export hand-off's veto: segment 2 is not exported yet

    def exported(info):
        return info.next_offset <= exported_up_to

    cleaner = LogCleaner(lambda: [log], CleanerConfig(), clock, may_rewrite=exported)
    assert cleaner.clean_filthiest().end_offset == 2
    assert [o for o, _, _ in view(log)] == [1, 2, 3, 4]
    exported_up_to = 4
    assert cleaner.clean_filthiest().end_offset == 4
    assert [o for o, _, _ in view(log)] == [3, 4]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_a_batch_keeps_headers_and_producer_fields_when_rebuilt(tmp_path, clock, codec):
    log = compacted_log(tmp_path / "t-0", clock)
    headers = (("trace", b"1"),)
    log.append_as_leader(bytes(build_record_batch(
        [(b"a", b"1", START_MS, headers), (b"b", b"1", START_MS + 1, headers), (b"c", b"1", START_MS + 2, ())],
        codec=codec)))
    log.roll()
    log.append_as_leader(bytes(build_record_batch([(b"b", b"2", START_MS + 3, ())])))
    log.roll()
    log.append_as_leader(keyed(("end", "x")))
    log.high_watermark = log.log_end_offset
    clean(log, clock)
    records = all_records(log)
    assert [(r.offset, r.key, r.headers) for r in records] == [
        (0, b"a", headers), (2, b"c", ()), (3, b"b", ()), (4, b"end", ())]
    assert [r.timestamp for r in records[:2]] == [START_MS, START_MS + 2]
    stored = log.read(0, 1 << 20, max_offset=3).read_bytes()
    [batch] = iter_batches(stored)
    assert (batch.base_offset, batch.last_offset_delta, batch.record_count, batch.codec) == (0, 2, 2, codec)


def keyed_batch(producer_id: int, sequence: int, *pairs: tuple[str, str]) -> bytes:
    """An idempotent producer's batch of ``(key, value)`` records from ``sequence`` on."""
    return bytes(build_record_batch([(k.encode(), v.encode(), START_MS, ()) for k, v in pairs],
                                    producer_id=producer_id, producer_epoch=0, base_sequence=sequence))


def without_snapshots(log: Log, clock) -> Log:
    """``log`` opened after a crash that lost its producer snapshots: its producer state is
    rebuilt from the batches in the log (as a new replica builds it from what it fetches)."""
    for name in os.listdir(log.dir):
        if name.endswith(".snapshot"):
            os.remove(log.dir / name)
    return Log(log.dir, "t", 0, log.config, clock, needs_recovery=True)


def test_a_producers_last_batch_stays_as_an_empty_batch_when_its_records_go(tmp_path, clock):
    """Kafka 2.8's BatchRetention.RETAIN_EMPTY: the batch holding an active producer's last data
    offset is kept, emptied, so the producer's last sequence survives compaction."""
    log = compacted_log(tmp_path / "t-0", clock)
    log.append_as_leader(keyed_batch(1, 0, ("a", "1"), ("b", "1")))
    log.append_as_leader(keyed_batch(2, 0, ("c", "1")))
    log.roll()
    log.append_as_leader(keyed_batch(2, 1, ("a", "2"), ("b", "2")))
    log.append_as_leader(keyed_batch(3, 0, ("c", "2")))
    log.roll()
    log.append_as_leader(keyed(("end", "x")))
    log.high_watermark = log.log_end_offset
    clean(log, clock)
    assert view(log) == [(3, "a", "2"), (4, "b", "2"), (5, "c", "2"), (6, "end", "x")]
    stored = log.read(0, 1 << 20, max_offset=6).read_bytes()
    # Producer 1's batch, emptied; producer 2's first batch goes: its last batch is a later one.
    assert [(e.offset, e.size) for e in iter_entries(stored)][0] == (1, BATCH_OVERHEAD)
    assert [e.offset for e in iter_entries(stored)][1:3] == [4, 5]
    empty, *_ = iter_batches(stored, allow_empty=True)
    # As Kafka's DefaultRecordBatch.writeEmptyHeader writes it.
    assert (empty.base_offset, empty.last_offset_delta, empty.record_count, empty.producer_id,
            empty.producer_epoch, empty.base_sequence, empty.base_timestamp, empty.max_timestamp,
            empty.codec) == (0, 1, 0, 1, 0, 0, -1, START_MS, 0)

    # Rebuilt from the log alone, producer 1's state is what it was: a retry of its batch is a
    # duplicate, a gap is refused.
    log.close()
    rebuilt = without_snapshots(log, clock)
    assert rebuilt.producer_state.last_entry(1).last_seq == 1
    retried = rebuilt.append_as_leader(keyed_batch(1, 0, ("a", "1"), ("b", "1")))
    assert (retried.first_offset, rebuilt.log_end_offset) == (0, 7)
    with pytest.raises(RecordError) as refused:
        rebuilt.append_as_leader(keyed_batch(1, 3, ("d", "1")))
    assert refused.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    # Cleaned again, the empty batch stays while it is its producer's last, and goes after.
    def append_and_clean(*batches: bytes) -> list[int]:
        for batch in batches:
            rebuilt.append_as_leader(batch)
        rebuilt.roll()
        rebuilt.append_as_leader(keyed(("end", "y")))
        rebuilt.high_watermark = rebuilt.log_end_offset
        clean(rebuilt, clock)
        return [e.offset for e in iter_entries(rebuilt.read(0, 1 << 20).read_bytes())]

    assert append_and_clean()[0] == 1
    assert append_and_clean(keyed_batch(1, 2, ("d", "1")))[0] == 4
    assert view(rebuilt) == [(3, "a", "2"), (4, "b", "2"), (5, "c", "2"), (7, "end", "y"), (8, "d", "1"),
                             (9, "end", "y")]


def test_segments_of_two_formats_are_never_cleaned_into_one(tmp_path, clock):
    # A format change starts a segment so no read spans it (aiokafka 0.14 cannot parse an
    # answer mixing magic 1 and 2); the cleaner must not merge such neighbours again.
    directory = tmp_path / "t-0"
    old = compacted_log(directory, clock, message_format_version=OLD_FORMAT)
    old.append_as_leader(keyed(("a", "1"), ("b", "1")))
    old.close()
    log = compacted_log(directory, clock)
    log.append_as_leader(bytes(build_record_batch([(b"a", b"2", START_MS, ()), (b"c", b"2", START_MS, ())])))
    log.roll()
    log.append_as_leader(bytes(build_record_batch([(b"e", b"x", START_MS, ())])))
    log.high_watermark = log.log_end_offset
    closed, _ = log.cleaning_snapshot()
    assert [len(g) for g in group_segments(closed, 1 << 20, log.config.segment_index_bytes)] == [1, 1]
    clean(log, clock)
    assert [sorted({e.magic for e in iter_entries(s.log_path.read_bytes())}) for s in log.segments()] == [
        [1], [2], [2]]
    assert view(log) == [(1, "b", "1"), (2, "a", "2"), (3, "c", "2"), (4, "e", "x")]
    log.close()
