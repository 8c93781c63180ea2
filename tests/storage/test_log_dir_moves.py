"""Moving a replica between log dirs (LogManager.start_move / copy_to_future / finish_move)
on real files: what the moved log holds, and what a start makes of a move a crash cut short
at each of its steps (no clean shutdown: the objects are dropped as a kill -9 leaves them)."""

from __future__ import annotations

import os

from minikafka.protocol.records import build_message_set, iter_records
from minikafka.storage import FakeClock, LogConfig, LogManager
from minikafka.storage.cleaner import CleanerConfig, LogCleaner
from minikafka.storage.names import delete_dir_name

from .conftest import START_MS, all_records, message_set


def _manager(dirs):
    manager = LogManager(dirs, LogConfig(segment_bytes=4096), FakeClock(START_MS))
    manager.startup()
    return manager


def _filled(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = _manager(dirs)
    (log,) = manager.create_topic("m", 1, {})
    for i in range(40):
        log.append_as_leader(message_set(5, START_MS + i, tag=f"{i}-"), leader_epoch=i // 10)
    log.high_watermark = log.log_end_offset
    log.increment_log_start_offset(7)
    home = log.dir.parent
    (other,) = set(dirs) - {home}
    return dirs, manager, log, home, other


def _summary(log):
    return ([(r.offset, r.value) for r in all_records(log)], log.log_start_offset, log.log_end_offset,
            log.leader_epoch_cache.entries)


def test_a_moved_log_holds_the_same_records_offsets_and_epochs(tmp_path):
    dirs, manager, log, home, other = _filled(tmp_path)
    before = _summary(log)
    assert manager.start_move("m", 0, other)
    assert manager.copy_to_future("m", 0, 3000) > 0
    log.append_as_leader(message_set(3, START_MS, tag="late-"), leader_epoch=4)  # while it moves
    while manager.copy_to_future("m", 0, 3000):
        pass
    manager.finish_move("m", 0)
    assert manager.get_log("m", 0) is log and log.dir == other / "m-0"
    assert not (home / "m-0").exists() and manager.futures() == []
    after = _summary(log)
    assert after[0][:len(before[0])] == before[0] and after[1] == 7 and after[2] == before[2] + 3
    assert after[3] == before[3] + [(4, before[2])]
    log.append_as_leader(message_set(1, START_MS), leader_epoch=4)
    manager.shutdown()
    again = _manager(dirs)
    assert again.get_log("m", 0).dir == other / "m-0"
    assert _summary(again.get_log("m", 0))[1:3] == (7, after[2] + 1)


def test_a_start_resumes_a_move_cut_short_while_copying(tmp_path):
    dirs, manager, log, home, other = _filled(tmp_path)
    before = _summary(log)
    manager.start_move("m", 0, other)
    manager.copy_to_future("m", 0, 3000)
    manager.checkpoint()
    # A kill -9 here: nothing closed.
    again = _manager(dirs)
    current = again.get_log("m", 0)
    assert current.dir == home / "m-0" and [f.dir.parent for f in again.futures()] == [other]
    assert _summary(current) == before
    while again.copy_to_future("m", 0, 3000):
        pass
    again.finish_move("m", 0)
    assert _summary(current) == before and current.dir == other / "m-0"


def test_a_start_takes_the_complete_copy_when_the_replica_was_already_buried(tmp_path):
    dirs, manager, log, home, other = _filled(tmp_path)
    before = _summary(log)
    manager.start_move("m", 0, other)
    while manager.copy_to_future("m", 0, 3000):
        pass
    (future,) = manager.futures()
    future.flush()
    manager.checkpoint()
    # finish_move's first rename, then a kill -9 before its second.
    os.rename(home / "m-0", home / delete_dir_name("m", 0, "0" * 32))
    again = _manager(dirs)
    moved = again.get_log("m", 0)
    assert moved.dir == other / "m-0" and again.futures() == []
    assert _summary(moved)[:3] == before[:3]
    assert sorted(p.name for d in dirs for p in d.iterdir() if p.name.startswith("m-")) == ["m-0"]


def test_moving_back_to_the_current_dir_cancels_the_move(tmp_path):
    dirs, manager, log, home, other = _filled(tmp_path)
    manager.start_move("m", 0, other)
    manager.copy_to_future("m", 0, 3000)
    assert manager.start_move("m", 0, home)
    assert manager.futures() == [] and log.future is None
    assert [p.name for p in other.iterdir() if p.name.startswith("m-")] == []


def test_a_truncation_of_the_replica_is_passed_on_to_its_future(tmp_path):
    """A follower's replica truncated (a new leader's history) while it moves: the future
    drops what it copied above the truncation and copies the new records."""
    dirs, manager, log, home, other = _filled(tmp_path)
    manager.start_move("m", 0, other)
    while manager.copy_to_future("m", 0, 3000):
        pass
    log.truncate_to(150)
    log.append_as_follower(build_message_set([(None, b"new-%d" % i, START_MS) for i in range(4)], base_offset=150))
    assert log.future.log_end_offset == 150
    while manager.copy_to_future("m", 0, 3000):
        pass
    expected = _summary(log)
    manager.finish_move("m", 0)
    assert _summary(log) == expected and [r.value[:4] for r in all_records(log)][-4:] == [b"new-"] * 4


def test_configs_altered_during_a_move_are_those_of_the_moved_replica(tmp_path):
    dirs, manager, log, home, other = _filled(tmp_path)
    manager.start_move("m", 0, other)
    manager.copy_to_future("m", 0, 3000)
    manager.set_topic_overrides("m", {"retention.ms": "1234"})
    while manager.copy_to_future("m", 0, 3000):
        pass
    manager.finish_move("m", 0)
    manager.shutdown()
    again = _manager(dirs)
    assert again.topic_overrides("m") == {"retention.ms": "1234"}
    assert again.get_log("m", 0).config.retention_ms == 1234


def test_a_move_cut_short_before_its_future_had_its_configs_keeps_them(tmp_path):
    dirs, manager, log, home, other = _filled(tmp_path)
    manager.set_topic_overrides("m", {"retention.ms": "4321"})
    manager.start_move("m", 0, other)
    (future,) = manager.futures()
    (future.dir / "topic-config.properties").unlink()  # the crash came right after the mkdir
    again = _manager(dirs)
    while again.copy_to_future("m", 0, 3000):
        pass
    again.finish_move("m", 0)
    again.shutdown()
    assert _manager(dirs).get_log("m", 0).config.retention_ms == 4321


def kept(log) -> list[tuple[int, bytes | None]]:
    """(offset, key) of every record, read from the log start on as a consumer reads, until
    a read finds none (the conftest's all_records expects records up to the log end)."""
    found, offset = [], log.log_start_offset
    while records := [r for r in iter_records(log.read(offset, 1 << 20).read_bytes()) if r.offset >= offset]:
        found += [(r.offset, r.key) for r in records]
        offset = records[-1].offset + 1
    return found


def test_a_compacted_log_whose_cleaned_tail_is_empty_moves_with_its_end(tmp_path):
    """The cleaner removed the last records of the closed segments (here an old record
    without a key) and the active segment is empty: nothing is left to copy below the log
    end, and the future ends where the log does (advance_end_to), so the next append after
    the move takes the next offset, not one the log had already given out."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = _manager(dirs)
    (log,) = manager.create_topic("c", 1, {"message.format.version": "0.10.2"})
    # Magic 1 (a 0.10.2 format): a cleaned v2 batch keeps its last offset, however few
    # records it keeps, so it never leaves such a tail.
    log.append_as_leader(build_message_set([(b"k", b"v", START_MS), (None, b"no key", START_MS)], magic=1))
    log.roll()
    log.high_watermark = log.log_end_offset
    manager.set_topic_overrides("c", {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"})
    LogCleaner(lambda: [log], CleanerConfig(), FakeClock(START_MS)).clean_filthiest()
    assert kept(log) == [(0, b"k")] and log.log_end_offset == 2
    (other,) = set(dirs) - {log.dir.parent}
    assert manager.start_move("c", 0, other)
    while manager.copy_to_future("c", 0, 3000):
        pass
    manager.finish_move("c", 0)
    assert log.dir == other / "c-0" and log.log_end_offset == 2
    assert kept(log) == [(0, b"k")]
    log.append_as_leader(build_message_set([(b"k2", b"v", START_MS)]))
    assert [o for o, _ in kept(log)] == [0, 2]
    manager.shutdown()
    again = _manager(dirs).get_log("c", 0)
    assert again.dir == other / "c-0" and again.log_end_offset == 3
    assert [o for o, _ in kept(again)] == [0, 2]
