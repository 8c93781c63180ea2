"""CreateTopics and DeleteTopics are all or nothing across a crash.

A child process creates or deletes a topic of four partitions over two log dirs and dies
(os._exit, nothing cleaned up) right after its k-th rename, for every k the operation makes;
the next start must find the topic wholly there or wholly gone, and able to be created or
deleted again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from minikafka.storage import FakeClock, LogConfig, LogManager, TopicAlreadyExists

from .conftest import START_MS, all_records, message_set

CRASHED = 17
CHILD = textwrap.dedent('''
    import os, sys
    from pathlib import Path
    from minikafka.protocol.records import build_message_set
    from minikafka.storage import LogConfig, LogManager, SystemClock

    action, partitions, crash_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dirs = [Path(d) for d in sys.argv[4:]]
    manager = LogManager(dirs, LogConfig(), SystemClock())
    manager.startup()
    renames = 0

    def crashing(rename):
        def wrapper(*args, **kwargs):
            global renames
            if renames == crash_after:
                os._exit(17)
            renames += 1
            return rename(*args, **kwargs)
        return wrapper

    os.rename, os.replace = crashing(os.rename), crashing(os.replace)
    if action == "create":
        manager.create_topic("t", partitions, {"retention.ms": "1000000"})
    else:
        manager.delete_topic("t")
    print(renames)
''')


def _manager(dirs):
    manager = LogManager(dirs, LogConfig(), FakeClock(START_MS))
    manager.startup()
    return manager


def _run(action, crash_after, dirs, partitions=4):
    result = subprocess.run([sys.executable, "-c", CHILD, action, str(partitions), str(crash_after), *map(str, dirs)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode in (0, CRASHED), result.stderr
    return result.returncode == CRASHED


def _leftovers(dirs):
    return sorted(p.name for d in dirs for p in d.iterdir() if p.name != "t" and not p.name.startswith("t-"))


@pytest.mark.parametrize("partitions", [4, 1])
def test_a_create_cut_short_after_any_rename_is_rolled_back_whole(tmp_path, partitions):
    # One partition is published by one rename and needs no intent file: the topic is there
    # whole or not at all whatever the crash.
    k = 0
    while True:
        dirs = [tmp_path / str(k) / "a", tmp_path / str(k) / "b"]
        crashed = _run("create", k, dirs, partitions)
        manager = _manager(dirs)
        assert manager.topics() in ({}, {"t": partitions}), f"after rename {k}"
        if not crashed:
            assert manager.topics() == {"t": partitions}
        if manager.topics():
            with pytest.raises(TopicAlreadyExists):
                manager.create_topic("t", partitions, {})
        else:
            manager.create_topic("t", partitions, {})
        assert manager.topic_overrides("t") == {"retention.ms": "1000000"} or manager.topics() == {"t": partitions}
        for partition in range(partitions):
            log = manager.get_log("t", partition)
            log.append_as_leader(message_set(2, START_MS))
            assert [r.offset for r in all_records(log)] == [0, 1]
        manager.shutdown()
        assert not [name for name in _leftovers(dirs) if "intent" in name or name.endswith("-delete")]
        if not crashed:
            break
        k += 1
    assert k >= partitions  # a rename per partition at least


def test_a_delete_cut_short_after_any_rename_is_finished(tmp_path):
    k = 0
    while True:
        dirs = [tmp_path / str(k) / "a", tmp_path / str(k) / "b"]
        manager = _manager(dirs)
        for log in manager.create_topic("t", 4, {}):
            for _ in range(3):
                log.append_as_leader(message_set(10, START_MS))
            log.roll()
            log.append_as_leader(message_set(10, START_MS))
            log.high_watermark = log.log_end_offset
            assert log.delete_segments_below(30) == 1
        manager.shutdown()

        crashed = _run("delete", k, dirs)
        manager = _manager(dirs)
        assert manager.topics() in ({}, {"t": 4}), f"after rename {k}"
        if not crashed:
            assert manager.topics() == {}
        if manager.topics():  # not begun: the old topic whole, then deleted again
            assert [manager.get_log("t", p).log_start_offset for p in range(4)] == [30] * 4
            manager.delete_topic("t")
        # Created again, written to and crashed before any checkpoint: the new partitions
        # start at 0, not at the deleted ones' log start.
        for log in manager.create_topic("t", 4, {}):
            log.append_as_leader(message_set(5, START_MS))
        again = _manager(dirs)
        for partition in range(4):
            log = again.get_log("t", partition)
            assert (log.log_start_offset, log.log_end_offset) == (0, 5), f"after rename {k}"
        again.shutdown()
        if not crashed:
            break
        k += 1
    assert k > 4
