"""LogManager: topics from directories, persisted overrides, deletion, foreign dirs."""

import errno
import mmap
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minikafka.storage import log_manager as log_manager_module
from minikafka.storage import FakeClock, LogConfig, LogManager, TopicAlreadyExists, UnknownTopic
from minikafka.storage.log import Log
from minikafka.storage.types import TooManyPartitions

from .conftest import START_MS, all_records, message_set


def _manager(dirs, clock=None, **kwargs):
    manager = LogManager(dirs, LogConfig(), clock or FakeClock(START_MS), **kwargs)
    manager.startup()
    return manager


def test_create_topics_and_reload_them(tmp_path):
    manager = _manager([tmp_path])
    logs = manager.create_topic("orders", 3, {"retention.ms": "1000", "segment.bytes": "2048"})
    assert [(log.topic, log.partition) for log in logs] == [("orders", 0), ("orders", 1), ("orders", 2)]
    assert logs[0].config.retention_ms == 1000 and logs[0].config.segment_bytes == 2048
    manager.create_topic("plain", 1, {})
    logs[2].append_as_leader(message_set(4, START_MS))
    assert manager.topics() == {"orders": 3, "plain": 1}
    assert sorted(os.listdir(tmp_path / "orders-1")) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
        "leader-epoch-checkpoint", "partition.metadata", "topic-config.properties"]
    assert (tmp_path / "orders-0" / "topic-config.properties").read_text() == "retention.ms=1000\nsegment.bytes=2048\n"
    assert (tmp_path / "orders-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    manager.shutdown()

    again = _manager([tmp_path])
    assert again.topics() == {"orders": 3, "plain": 1}
    assert again.topic_overrides("orders") == {"retention.ms": "1000", "segment.bytes": "2048"}
    assert again.topic_overrides("plain") == {}
    assert again.get_log("orders", 1).config.segment_bytes == 2048
    assert again.get_log("orders", 2).log_end_offset == 4
    assert again.get_log("orders", 3) is None
    with pytest.raises(UnknownTopic):
        again.topic_overrides("nope")


def test_create_refuses_bad_requests_without_side_effects(tmp_path):
    manager = _manager([tmp_path])
    manager.create_topic("t", 1, {})
    with pytest.raises(TopicAlreadyExists):
        manager.create_topic("t", 2, {})
    with pytest.raises(ValueError):
        manager.create_topic("u", 0, {})
    with pytest.raises(ValueError):
        manager.create_topic("u", 1, {"no.such.config": "1"})
    with pytest.raises(ValueError):
        manager.create_topic("u", 1, {"retention.ms": "soon"})
    assert manager.topics() == {"t": 1}
    assert not (tmp_path / "u-0").exists()


def test_delete_topic_removes_data(tmp_path):
    manager = _manager([tmp_path])
    log = manager.create_topic("gone", 2, {})[0]
    log.append_as_leader(message_set(3, START_MS))
    in_flight = log.read(0, 1000)
    manager.delete_topic("gone")
    assert manager.topics() == {}
    assert not [name for name in os.listdir(tmp_path) if name.startswith("gone")]
    assert len(in_flight.read_bytes()) == in_flight.length  # a fetch in flight still completes
    with pytest.raises(UnknownTopic):
        manager.delete_topic("gone")
    recreated = manager.create_topic("gone", 1, {})[0]
    assert recreated.log_end_offset == 0


def test_a_topic_with_the_longest_name_is_deleted(tmp_path):
    # "<topic>-<p>.<id>-delete" is longer than a file name may be behind a 249-character topic.
    topic = "t" * 249
    manager = _manager([tmp_path])
    manager.create_topic(topic, 11, {})[10].append_as_leader(message_set(2, START_MS))
    manager.delete_topic(topic)
    assert manager.topics() == {}
    assert not [name for name in os.listdir(tmp_path) if name.startswith("t")]
    assert manager.create_topic(topic, 1, {})[0].log_end_offset == 0


def test_foreign_and_half_deleted_directories_are_skipped(tmp_path):
    manager = _manager([tmp_path])
    manager.create_topic("t", 1, {})
    manager.shutdown()
    (tmp_path / "t-1.5f1b-delete").mkdir()  # a deletion cut short by a crash
    (tmp_path / "t-1.5f1b-delete" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "lost+found").mkdir()
    (tmp_path / "not-a-partition-x").mkdir()
    (tmp_path / "t-2.deleted").mkdir()
    (tmp_path / "stray-file").write_text("hello")
    again = _manager([tmp_path])
    assert again.topics() == {"t": 1}
    assert not (tmp_path / "t-1.5f1b-delete").exists()
    assert (tmp_path / "lost+found").exists()


def test_several_log_dirs_balance_and_checkpoint_separately(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = _manager(dirs)
    logs = manager.create_topic("t", 4, {})
    assert sorted(log.dir.parent.name for log in logs) == ["a", "a", "b", "b"]
    for log in logs:
        log.append_as_leader(message_set(log.partition + 1, START_MS))
    manager.shutdown()
    for d in dirs:
        assert (d / ".kafka_cleanshutdown").exists()
        lines = (d / "recovery-point-offset-checkpoint").read_text().splitlines()
        assert lines[:2] == ["0", "2"]
        for line in lines[2:]:
            topic, partition, offset = line.split()
            assert (d / f"{topic}-{partition}").is_dir() and int(offset) == int(partition) + 1
    again = _manager(dirs)
    assert again.topics() == {"t": 4}
    assert [again.get_log("t", p).log_end_offset for p in range(4)] == [1, 2, 3, 4]


def test_new_partitions_go_to_the_log_dir_with_fewest_counting_loaded_and_deleted_ones(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = _manager(dirs)
    manager.create_topic("three", 3, {})  # a: 0 and 2, b: 1
    manager.shutdown()
    manager = _manager(dirs)
    assert manager.create_log("one", 0, {}).dir.parent.name == "b"
    manager.delete_topic("three")  # a: none, b: one-0
    assert [log.dir.parent.name for log in manager.create_topic("two", 2, {})] == ["a", "a"]
    assert manager.create_log("one", 1, {}).dir.parent.name == "b"
    manager.delete_log("two", 0)
    assert manager.create_log("one", 2, {}).dir.parent.name == "a"


def test_cleanup_callbacks_and_flush_due(tmp_path):
    clock = FakeClock(START_MS)
    closed, asked = [], []
    manager = _manager([tmp_path], clock, on_segment_closed=closed.append,
                       may_delete_segment=lambda info: asked.append(info) or True)
    log = manager.create_topic("t", 1, {"retention.ms": "1000", "flush.ms": "500"})[0]
    log.append_as_leader(message_set(2, START_MS))
    clock.advance(500)
    manager.flush_due()
    assert log.recovery_point == 2
    clock.advance(1000)
    assert manager.cleanup() == 1
    assert [c.base_offset for c in closed] == [0]
    assert [a.base_offset for a in asked] == [0]
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 2\n"


def test_high_watermark_is_checkpointed_and_clamped(tmp_path):
    manager = _manager([tmp_path])
    log = manager.create_topic("t", 1, {})[0]
    log.append_as_leader(message_set(5, START_MS))
    log.high_watermark = 4
    manager.checkpoint()
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 4\n"
    manager.shutdown()
    assert _manager([tmp_path]).get_log("t", 0).high_watermark == 4
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\nt 0 99\n")
    assert _manager([tmp_path]).get_log("t", 0).high_watermark == 5


def test_unreadable_checkpoints_fall_back_to_safe_values(tmp_path):
    manager = _manager([tmp_path])
    log = manager.create_topic("t", 1, {})[0]
    log.append_as_leader(message_set(3, START_MS))
    manager.checkpoint()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("garbage")
    again = _manager([tmp_path])  # unclean + unreadable: recover everything
    assert [r.offset for r in all_records(again.get_log("t", 0))] == [0, 1, 2]


def test_flush_due_fsyncs_rolled_segments_off_the_append_path(tmp_path):
    manager = _manager([tmp_path])
    log = manager.create_topic("t", 1, {"segment.bytes": "200"})[0]
    for _ in range(6):
        log.append_as_leader(message_set(1, START_MS, value_size=100))
    assert len(log.segments()) > 2
    assert log.recovery_point == 0  # the rolls did not fsync inline
    manager.flush_due()
    assert log.recovery_point == log.segments()[-1].base_offset
    manager.checkpoint()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == f"0\n1\nt 0 {log.recovery_point}\n"


def test_a_failing_flush_spares_the_other_logs(tmp_path, caplog):
    manager = _manager([tmp_path])
    broken, healthy = manager.create_topic("t", 2, {"segment.bytes": "200"})
    for log in (broken, healthy):
        for _ in range(3):
            log.append_as_leader(message_set(1, START_MS, value_size=100))
    shutil.rmtree(broken.dir)  # the disk under one partition is gone
    manager.flush_due()
    assert broken.recovery_point == 0
    assert healthy.recovery_point == healthy.segments()[-1].base_offset > 0
    assert "t-0: flush failed" in caplog.text


CHECKPOINTS = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint")


def test_startup_writes_checkpoints_only_after_a_recovery(tmp_path):
    """A new log dir starts with none (missing reads as empty), a clean restart keeps what
    the shutdown wrote and only removes the marker, an unclean one recovers and checkpoints."""
    manager = _manager([tmp_path])
    assert not any((tmp_path / name).exists() for name in CHECKPOINTS)
    log = manager.create_topic("t", 1, {})[0]
    log.append_as_leader(message_set(3, START_MS))
    manager.shutdown()
    written = {name: os.stat(tmp_path / name).st_mtime_ns for name in CHECKPOINTS}
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 3\n"

    clean = _manager([tmp_path])
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    assert {name: os.stat(tmp_path / name).st_mtime_ns for name in CHECKPOINTS} == written
    clean.get_log("t", 0).append_as_leader(message_set(2, START_MS))
    for log in clean._logs.values():  # a crash: flushed data, no shutdown checkpoint
        log.flush()

    (tmp_path / "recovery-point-offset-checkpoint").unlink()
    recovered = _manager([tmp_path])
    log = recovered.get_log("t", 0)
    assert log.log_end_offset == 5
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == f"0\n1\nt 0 {log.recovery_point}\n"


SHARED_AT_CREATION = ("partition.metadata", "leader-epoch-checkpoint", "topic-config.properties")


def test_a_new_topics_partitions_share_their_first_files_until_one_is_rewritten(tmp_path):
    # The files every partition of a new topic starts with are hard links to one inode per
    # log dir (a link allocates no inode); rewriting one partition's file unshares only it.
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = _manager(dirs)
    logs = manager.create_topic("wide", 6, {"retention.ms": "1000"})
    big = manager.create_topic("big", 100, {})  # made in several directories, each renamed away
    assert [log.partition for log in big] == list(range(100))
    assert sorted(p.name for d in dirs for p in d.iterdir() if p.is_dir()) == sorted(
        [f"wide-{p}" for p in range(6)] + [f"big-{p}" for p in range(100)])
    for log_dir in dirs:
        partitions = sorted(p for p in log_dir.iterdir() if p.name.startswith("wide-"))
        assert len(partitions) == 3
        for name in SHARED_AT_CREATION:
            inodes = {os.stat(p / name).st_ino for p in partitions}
            assert len(inodes) == 1 and os.stat(partitions[0] / name).st_nlink == 3
    assert os.stat(dirs[0] / "wide-0" / "partition.metadata").st_ino != os.stat(
        dirs[1] / "wide-1" / "partition.metadata").st_ino

    logs[0].append_as_leader(message_set(2, START_MS))
    logs[0].leader_epoch_cache.assign(1, 2)
    assert (logs[0].dir / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n1 2\n"
    sibling = next(log for log in logs[1:] if log.dir.parent == logs[0].dir.parent)
    assert (sibling.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    assert os.stat(sibling.dir / "leader-epoch-checkpoint").st_nlink == 2
    manager.shutdown()

    again = _manager(dirs)
    assert again.topics() == {"wide": 6, "big": 100}
    assert again.get_log("wide", 0).leader_epoch_cache.latest_epoch == 1
    assert {again.get_log("wide", p).leader_epoch_cache.latest_epoch for p in range(1, 6)} == {0}
    assert len({again.get_log("wide", p).topic_id for p in range(6)}) == 1
    assert again.topic_overrides("wide") == {"retention.ms": "1000"}


def test_a_filesystem_refusing_more_links_gets_copies(tmp_path, monkeypatch):
    # ext4 allows 65,000 links to a file (EMLINK beyond); there creation starts a new original.
    real_link, calls = os.link, []

    def link(source, target):
        calls.append(target)
        if len(calls) == 5:  # partition 2's second file: its first link is undone
            raise OSError(errno.EMLINK, os.strerror(errno.EMLINK), str(source))
        real_link(source, target)

    monkeypatch.setattr(os, "link", link)
    manager = _manager([tmp_path])
    manager.create_topic("many", 5, {"segment.bytes": "2048"})
    monkeypatch.undo()
    for p in range(5):
        assert sorted(n for n in os.listdir(tmp_path / f"many-{p}") if not n.startswith("0000")) == sorted(
            SHARED_AT_CREATION)
        assert (tmp_path / f"many-{p}" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
        assert (tmp_path / f"many-{p}" / "topic-config.properties").read_text() == "segment.bytes=2048\n"
    nlinks = [os.stat(tmp_path / f"many-{p}" / "partition.metadata").st_nlink for p in range(5)]
    assert nlinks == [2, 2, 3, 3, 3]  # partitions 0-1 share, the refused link made 2 the new original
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [f"many-{p}" for p in range(5)]
    manager.shutdown()
    assert _manager([tmp_path]).topics() == {"many": 5}


def test_log_dirs_are_marked_as_tops_of_hierarchies_where_the_filesystem_can(tmp_path):
    # ext4 then spreads partition directories over block groups with free inodes instead of
    # packing them next to the log dir (chattr +T; see _mark_top_of_hierarchies).
    fcntl = pytest.importorskip("fcntl")
    from minikafka.storage.log_manager import FS_IOC_GETFLAGS, FS_TOPDIR_FL

    def flags(path):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return int.from_bytes(fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8))[:4], sys.byteorder)
        finally:
            os.close(fd)

    try:
        before = flags(tmp_path)
    except OSError:
        pytest.skip("this filesystem keeps no inode flags")
    logs = tmp_path / "logs"
    _manager([logs]).shutdown()
    assert flags(logs) & FS_TOPDIR_FL
    if shutil.which("lsattr"):  # e2fsprogs names it 'T'
        attributes = subprocess.run(["lsattr", "-d", str(logs)], capture_output=True, text=True, check=True).stdout
        assert "T" in attributes.split()[0]
    assert flags(tmp_path) == before  # only the log dir itself
    _manager([logs]).shutdown()  # and again, already marked
    assert flags(logs) & FS_TOPDIR_FL


def test_a_recreated_topic_does_not_inherit_the_deleted_ones_checkpointed_offsets(tmp_path):
    # Retention moves the old topic's log start to 160 and the checkpoints say so; the new
    # topic of the same name then has offsets 0-9 acknowledged when the process dies (no
    # shutdown, no periodic checkpoint since). Its log must still start at 0.
    manager = _manager([tmp_path])
    log = manager.create_topic("t", 1, {"segment.bytes": "2048", "retention.bytes": "2048"})[0]
    for _ in range(16):
        log.append_as_leader(message_set(10, START_MS, value_size=100))
    log.high_watermark = log.log_end_offset
    assert manager.cleanup() > 0
    manager.checkpoint()
    assert manager.get_log("t", 0).log_start_offset > 100
    manager.delete_topic("t")
    log = manager.create_topic("t", 1, {})[0]
    log.append_as_leader(message_set(10, START_MS, tag="new"))

    again = _manager([tmp_path])  # a crash: no shutdown, no clean-shutdown marker
    log = again.get_log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 10)
    assert [r.value[:4] for r in all_records(log)] == [b"new%d" % i for i in range(10)]


def test_a_checkpoint_rewrite_the_disk_refuses_at_deletion_is_made_before_the_name_is_used_again(tmp_path):
    # A directory where the checkpoint's temporary file goes makes every rewrite of it fail,
    # as a full disk would. The deletion itself goes through (it frees the space); a new
    # topic of the same name must wait until the old entries are gone from the checkpoints.
    manager = _manager([tmp_path])
    log = manager.create_topic("t", 1, {"segment.bytes": "2048", "retention.bytes": "2048"})[0]
    for _ in range(16):
        log.append_as_leader(message_set(10, START_MS, value_size=100))
    log.high_watermark = log.log_end_offset
    assert manager.cleanup() > 0
    assert manager.get_log("t", 0).log_start_offset > 100
    obstacle = tmp_path / "log-start-offset-checkpoint.tmp"
    obstacle.mkdir()
    manager.delete_topic("t")
    assert manager.topics() == {}
    with pytest.raises(OSError):
        manager.create_topic("t", 1, {})
    assert manager.topics() == {}
    obstacle.rmdir()
    log = manager.create_topic("t", 1, {})[0]
    log.append_as_leader(message_set(10, START_MS, tag="new"))

    again = _manager([tmp_path])  # a crash
    log = again.get_log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 10)


def test_altered_overrides_apply_to_the_running_logs_and_persist(tmp_path):
    manager = _manager([tmp_path])
    logs = manager.create_topic("orders", 2, {"retention.ms": "1000"})
    logs[0].append_as_leader(message_set(2, START_MS))
    manager.set_topic_overrides("orders", {"segment.bytes": "2048", "message.timestamp.type": "LogAppendTime"})
    for log in logs:
        assert (log.config.segment_bytes, log.config.retention_ms) == (2048, LogConfig().retention_ms)
        assert log.config.message_timestamp_type == "LogAppendTime"
    result = logs[0].append_as_leader(message_set(1, START_MS - 5000))
    assert result.log_append_time == START_MS  # stamped by the new timestamp type at once
    with pytest.raises(ValueError):
        manager.set_topic_overrides("orders", {"segment.bytes": "1", "retention.ms": "5"})
    with pytest.raises(UnknownTopic):
        manager.set_topic_overrides("nope", {})
    assert logs[1].config.segment_bytes == 2048
    manager.shutdown()

    again = _manager([tmp_path])
    assert again.topic_overrides("orders") == {"segment.bytes": "2048", "message.timestamp.type": "LogAppendTime"}
    assert again.get_log("orders", 1).config.segment_bytes == 2048


def test_added_partitions_share_the_topics_id_and_overrides(tmp_path):
    manager = _manager([tmp_path])
    (first,) = manager.create_topic("orders", 1, {"retention.ms": "1000"})
    added = manager.add_partitions("orders", 3)
    assert [log.partition for log in added] == [1, 2]
    assert {log.topic_id for log in added} == {first.topic_id}
    assert all(log.config.retention_ms == 1000 for log in added)
    assert manager.topics() == {"orders": 3}
    with pytest.raises(UnknownTopic):
        manager.add_partitions("nope", 2)


def _fsyncs_meeting(monkeypatch, together: int, after: int = 0):
    """os.fsync made to hold its calls after the first ``after`` until ``together`` of them are
    under way: fsyncs issued one after the other never meet, and the first one fails (after
    10 s)."""
    import threading

    meeting = threading.Barrier(together, timeout=10)
    calls: list[int] = []
    fsync = os.fsync

    def held(fd):
        calls.append(fd)
        if after < len(calls) <= after + together:
            meeting.wait()
        fsync(fd)

    monkeypatch.setattr(os, "fsync", held)
    return calls


def test_a_new_topics_files_and_directory_are_fsynced_together_before_its_rename(tmp_path, monkeypatch):
    manager = _manager([tmp_path / "a"])
    calls = _fsyncs_meeting(monkeypatch, 3)  # partition.metadata, leader-epoch-checkpoint, the directory
    manager.create_topic("t", 1, {})
    assert len(calls) == 4  # then the log dir, after the rename
    assert _manager([tmp_path / "a"]).topics() == {"t": 1}


def test_an_auto_created_topic_is_fsynced_after_its_creation_returns(tmp_path, monkeypatch):
    """Metadata's auto-creation answers before the fsyncs (Kafka 3.x syncs a new partition's
    directory and partition.metadata in the background too); the broker's next durability
    pass, or its shutdown, makes the topic durable."""
    manager = _manager([tmp_path / "a"])
    # Both topics' files and partition directories together, then the log dir.
    calls = _fsyncs_meeting(monkeypatch, 6)
    manager.create_topic("t", 1, {}, fsync_now=False)
    manager.create_topic("u", 1, {}, fsync_now=False)
    assert calls == []
    assert manager.topics() == {"t": 1, "u": 1}
    manager.flush_due()  # the broker's flush pass
    assert len(calls) == 6 + 1
    manager.sync_created_partitions()
    assert len(calls) == 6 + 1  # nothing left to sync
    assert _manager([tmp_path / "a"]).topics() == {"t": 1, "u": 1}


def test_a_shutdown_fsyncs_the_auto_created_topics_not_yet_synced(tmp_path, monkeypatch):
    manager = _manager([tmp_path / "a"])
    manager.create_topic("t", 1, {}, fsync_now=False)
    synced: list[Path] = []
    fsync_all = log_manager_module.fsync_all

    def recorded(files=(), directories=()):
        synced.extend([*files, *directories])
        fsync_all(files=files, directories=directories)

    monkeypatch.setattr(log_manager_module, "fsync_all", recorded)
    manager.shutdown()
    assert tmp_path / "a" / "t-0" in synced
    assert tmp_path / "a" / "t-0" / "partition.metadata" in synced


def test_fsync_all_raises_the_first_error_once_every_fsync_has_ended(tmp_path, monkeypatch):
    from minikafka.storage.checkpoint import fsync_all

    files = [tmp_path / "a", tmp_path / "b"]
    for path in files:
        path.write_bytes(b"x")
    calls = _fsyncs_meeting(monkeypatch, 3)
    with pytest.raises(FileNotFoundError):
        fsync_all(files=[files[0], tmp_path / "missing", files[1]], directories=[tmp_path])
    assert len(calls) == 3


def test_a_shutdown_fsyncs_its_checkpoints_and_producer_snapshots_together(tmp_path, monkeypatch):
    manager = _manager([tmp_path / "a"])
    manager.create_topic("t", 1, {})[0].append_as_leader(message_set(3, START_MS))
    # After the segment's own fsync (its flush, which the recovery point checkpoint records).
    _fsyncs_meeting(monkeypatch, 2, after=1)
    manager.shutdown()
    monkeypatch.undo()
    assert (tmp_path / "a" / ".kafka_cleanshutdown").exists()
    reloaded = _manager([tmp_path / "a"])
    log = reloaded.get_log("t", 0)
    assert log.recovery_point == log.log_end_offset == 3
    assert len(all_records(log)) == 3


def _maps_in_use() -> int:
    with open("/proc/self/maps", "rb") as maps:
        return sum(1 for _ in maps)


@pytest.fixture
def map_table_filled():
    """``fill(partitions)``: this process's memory maps made up with real anonymous maps of
    its own until only ``partitions`` more partitions' maps fit (the reserve left free)."""
    made: list[mmap.mmap] = []

    def fill(partitions: int) -> None:
        limit = log_manager_module._limit_for_maps()
        if limit is None:
            pytest.skip("no /proc/sys/vm/max_map_count")
        want = limit - log_manager_module.RESERVED_MAPS - partitions * log_manager_module.MAPS_PER_PARTITION
        while (missing := want - _maps_in_use()) > 0:
            # Neighbours that differ in protection are never merged into one map by the kernel.
            made.extend(mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | (mmap.PROT_WRITE * (i % 2)))
                        for i in range(missing))

    yield fill
    for m in made:
        m.close()


def test_partitions_are_refused_when_the_map_table_is_nearly_full(tmp_path, map_table_filled):
    """The room vm.max_map_count leaves is estimated from a count of the process's maps plus
    the partitions opened since; near the limit it is judged on the maps present, those made
    by others than the manager's partitions (here, the test's and the interpreter's) included."""
    manager = _manager([tmp_path / "d"])
    map_table_filled(40)
    manager.create_topic("first", 1, {})
    map_table_filled(20)  # the estimate from the count "first" had made still says ~39 fit
    with pytest.raises(TooManyPartitions, match=r"Number of partitions 30 is more than this broker can open: "
                                                r"\d+ more partitions fit, as each maps 2 index files"):
        manager.create_topic("wide", 30, {})
    manager.create_topic("narrow", 4, {})  # room for it still, even with the interpreter's maps since
    with pytest.raises(TooManyPartitions, match="vm.max_map_count"):
        manager.create_topic("more", 20, {})
    assert set(manager.topics()) == {"first", "narrow"}
    manager.shutdown()



def _log_state(log):
    return (log.topic_id, log.leader_epoch_cache.entries, log.log_start_offset, log.log_end_offset,
            log.recovery_point, log.high_watermark, log.producer_state.map_end_offset,
            log.producer_state.latest_snapshot_offset, sorted(os.listdir(log.dir)))


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_new_partitions_log_is_the_one_its_files_load_as(tmp_path, partitions):
    """A creation opens the logs of the directories it has just made without reading them
    back: each is what a start would load from a copy of its directory, and takes appends alike."""
    manager = _manager([tmp_path / "d"])
    created = manager.create_topic("fresh", partitions, {"segment.bytes": "2048"}, fsync_now=False)
    loaded = []
    for log in created:
        copy = shutil.copytree(log.dir, tmp_path / "copies" / log.dir.name)
        loaded.append(Log(copy, "fresh", log.partition, log.config, FakeClock(START_MS)))
    assert [_log_state(log) for log in created] == [_log_state(log) for log in loaded]
    assert created[0].leader_epoch_cache.entries == [(0, 0)]
    for log in created + loaded:
        log.append_as_leader(message_set(3, START_MS))
    assert [(_log_state(log), all_records(log)) for log in created] == [
        (_log_state(log), all_records(log)) for log in loaded]
    for log in loaded:
        log.close()
    manager.shutdown()
