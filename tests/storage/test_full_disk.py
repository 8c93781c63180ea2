"""A full disk is an OSError that leaves the log as it was, never SIGBUS.

Index files are sparse and memory-mapped: writing an entry into a page the filesystem cannot
back raises SIGBUS, which kills the process. These tests run the log in a child process on a
real, full tmpfs (``small_filesystem``), so a signal shows as the child's exit status.
"""

from __future__ import annotations

import errno
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent('''
    import errno, sys
    from pathlib import Path
    from minikafka.protocol.records import build_message_set, iter_records
    from minikafka.storage import Log, LogConfig, SystemClock

    disk = Path(sys.argv[1])
    config = LogConfig(index_interval_bytes=1)  # index every set after the first

    def values(log):
        return [r.value for r in iter_records(log.read(0, 1 << 20).read_bytes())]

    def fill():  # every page of the disk taken
        with open(disk / "filler", "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC

    log = Log(disk / "t-0", "t", 0, config, SystemClock())
    log.append_as_leader(build_message_set([(None, b"kept", 1_700_000_000_000)]))
    fill()
    # The set fits in the .log file's first page, already allocated; its index entries
    # need pages of the sparse index files.
    refused = build_message_set([(None, b"refused-%d" % i, 1_700_000_000_001) for i in range(3)])
    try:
        log.append_as_leader(refused)
    except OSError as exc:
        print("refused:", errno.errorcode[exc.errno], exc.filename is not None)
    else:
        print("appended")
    print("end offset", log.log_end_offset, values(log))
    (disk / "filler").unlink()  # space again: the log goes on from where it was
    log.append_as_leader(build_message_set([(None, b"later", 1_700_000_000_002)]))
    print("then", values(log))
    fill()
    # An unclean stop (no close) and a start with recovery, on the full disk again.
    again = Log(disk / "t-0", "t", 0, config, SystemClock(), needs_recovery=True)
    print("after restart", again.log_end_offset, values(again))
''')


def run_child(disk) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(disk)], capture_output=True, text=True, timeout=60)


def test_an_append_on_a_full_disk_is_refused_and_leaves_nothing(small_filesystem):
    disk = small_filesystem("2m")
    result = run_child(disk.path)
    assert result.returncode != -signal.SIGBUS, "killed by SIGBUS writing a memory-mapped index"
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "refused: ENOSPC True",
        "end offset 1 [b'kept']",
        "then [b'kept', b'later']",
        "after restart 2 [b'kept', b'later']",
    ]


PARTIAL = textwrap.dedent('''
    import errno, os, sys
    from pathlib import Path
    from minikafka.protocol.records import build_message_set, iter_records
    from minikafka.storage import Log, LogConfig, SystemClock

    disk = Path(sys.argv[1])
    log = Log(disk / "t-0", "t", 0, LogConfig(), SystemClock())
    log.append_as_leader(build_message_set([(None, b"kept", 1_700_000_000_000)]))
    with open(disk / "filler", "wb", buffering=0) as filler:  # fill the disk, then free one page
        try:
            while True:
                filler.write(b"\\\\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    os.truncate(disk / "filler", os.path.getsize(disk / "filler") - 4096)
    # 100 messages of about 100 bytes: the write stops short after the free page, with
    # dozens of whole messages of the set in the file.
    refused = build_message_set([(None, b"refused-%d" % i + b"." * 80, 1_700_000_000_001) for i in range(100)])
    try:
        log.append_as_leader(refused)
    except OSError as exc:
        print("refused:", errno.errorcode[exc.errno])
    print("file holds", os.path.getsize(disk / "t-0" / "00000000000000000000.log"), "bytes")
    (disk / "filler").unlink()
    # A crash now (no close) and a start with recovery, with space again.
    again = Log(disk / "t-0", "t", 0, LogConfig(), SystemClock(), needs_recovery=True)
    print("after restart", again.log_end_offset,
          [r.value for r in iter_records(again.read(0, 1 << 20).read_bytes())])
''')


def test_a_write_cut_short_by_a_full_disk_leaves_no_message_of_the_set(small_filesystem):
    disk = small_filesystem("2m")
    result = subprocess.run([sys.executable, "-c", PARTIAL, str(disk.path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "refused: ENOSPC"
    assert lines[-1] == "after restart 1 [b'kept']"


def _use_every_inode(placeholders: Path) -> Path:
    """``placeholders``, a new directory of empty files made until the filesystem has no
    inode left (a tmpfs of 512): unlink some to free as many."""
    placeholders.mkdir()
    try:
        for i in range(512):
            (placeholders / str(i)).touch()
    except OSError as exc:
        assert exc.errno == 28
    return placeholders


def test_a_topic_the_full_disk_refuses_midway_is_rolled_back(small_filesystem, tmp_path):
    from minikafka.storage import LogConfig, LogManager, SystemClock

    # Out of inodes is ENOSPC as a full disk is, and what a topic's creation runs out of
    # midway: only the first partition of a log dir takes a page (the files all partitions
    # start with are links to that one's, and tmpfs counts each link as an inode).
    disk = small_filesystem("2m", inodes=512)
    manager = LogManager([disk.path / "logs"], LogConfig(), SystemClock())
    manager.startup()
    placeholders = _use_every_inode(disk.path / "placeholders")
    for i in range(40):  # room for the inodes of a few partitions, not of 50
        (placeholders / str(i)).unlink()
    try:
        manager.create_topic("wide", 50, {})
    except OSError as exc:
        assert exc.errno == 28  # ENOSPC
    else:
        raise AssertionError("50 partitions fitted on a full disk")
    assert manager.topics() == {}
    assert [p.name for p in (disk.path / "logs").iterdir() if p.is_dir()] == []
    shutil.rmtree(placeholders)
    assert len(manager.create_topic("wide", 50, {})) == 50
    assert manager.topics() == {"wide": 50}
    manager.shutdown()


def test_a_roll_refused_for_want_of_an_inode_keeps_the_active_segment_working(small_filesystem):
    from minikafka.protocol.records import build_message_set, iter_records
    from minikafka.storage import Log, LogConfig, SystemClock

    def values(log):
        return [r.value for r in iter_records(log.read(0, 1 << 20).read_bytes())]

    def one(value, size=0):
        return build_message_set([(None, value.ljust(size, b"."), 1_700_000_000_000)])

    disk = small_filesystem("2m", inodes=64)
    config = LogConfig(segment_bytes=1000, index_interval_bytes=1)  # every set after the first is indexed
    log = Log(disk.path / "t-0", "t", 0, config, SystemClock())
    log.append_as_leader(one(b"kept", 700))
    placeholders = disk.path / "placeholders"
    placeholders.mkdir()
    with pytest.raises(OSError) as full:
        for i in range(64):
            (placeholders / str(i)).touch()
    assert full.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as refused:  # does not fit: the roll needs a new file
        log.append_as_leader(one(b"refused", 400))
    assert refused.value.errno == errno.ENOSPC
    log.append_as_leader(one(b"small"))  # still fits the segment that could not roll
    assert [v.rstrip(b".") for v in values(log)] == [b"kept", b"small"]

    again = Log(disk.path / "t-0", "t", 0, config, SystemClock(), needs_recovery=True)  # a crash
    assert [v.rstrip(b".") for v in values(again)] == [b"kept", b"small"]
    shutil.rmtree(placeholders)  # inodes again: the roll goes through
    again.append_as_leader(one(b"later", 400))
    assert [s.base_offset for s in again.segments()] == [0, 2]
    assert [v.rstrip(b".") for v in values(again)] + [
        r.value.rstrip(b".") for r in iter_records(again.read(2, 1 << 20).read_bytes())] == [b"kept", b"small", b"later"]


RECOVER = textwrap.dedent('''
    import os, sys
    from pathlib import Path
    from minikafka.protocol.records import build_message_set
    from minikafka.storage import Log, LogConfig, SystemClock

    directory, step = Path(sys.argv[1]), sys.argv[2]
    config = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=256)
    if step == "write":  # 16 segments, then a crash
        log = Log(directory, "t", 0, config, SystemClock())
        while len(log.segments()) < 16:
            log.append_as_leader(build_message_set([(None, b"v" * 200, 1_700_000_000_000)]))
        print(log.log_end_offset)
        os._exit(0)
    log = Log(directory, "t", 0, config, SystemClock(), needs_recovery=True)
    print(log.log_end_offset)
''')


def test_recovery_after_a_crash_needs_no_index_space_for_every_segment_at_once(small_filesystem):
    # Recovery rebuilds each segment's indexes, reserving 64 KiB of each as it writes;
    # 1 MiB free cannot hold that for 16 segments at once, and need not: a segment's indexes
    # are cut to their entries as soon as it is recovered.
    disk = small_filesystem("4m")
    directory = disk.path / "t-0"

    def run(step):
        return subprocess.run([sys.executable, "-c", RECOVER, str(directory), step], capture_output=True,
                              text=True, timeout=60)

    written = run("write")
    assert written.returncode == 0, written.stderr
    disk.fill(leave=1024 * 1024)
    recovered = run("recover")
    assert recovered.returncode == 0, recovered.stderr
    assert recovered.stdout == written.stdout


EMFILE_CHILD = textwrap.dedent('''
    import errno, os, resource, sys
    from pathlib import Path
    from minikafka.protocol.records import build_message_set, iter_records
    from minikafka.storage import Log, LogConfig, SystemClock

    directory, headroom = Path(sys.argv[1]), int(sys.argv[2])

    def one(value, size=0):
        return build_message_set([(None, value.ljust(size, b"."), 1_700_000_000_000)])

    log = Log(directory, "t", 0, LogConfig(segment_bytes=1000, index_interval_bytes=1), SystemClock())
    log.append_as_leader(one(b"kept", 700))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + headroom, hard))
    try:
        log.append_as_leader(one(b"refused", 400))
    except OSError as exc:
        print("refused:", errno.errorcode[exc.errno])
    log.append_as_leader(one(b"small"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    print("files", sorted(name for name in os.listdir(directory) if name.startswith("0")))
    log.append_as_leader(one(b"later", 400))
    print("segments", [s.base_offset for s in log.segments()])
    again = Log(directory, "t", 0, LogConfig(segment_bytes=1000), SystemClock(), needs_recovery=True)
    print("after restart", [r.value.rstrip(b".") for s in again.segments()
                            for r in iter_records(again.read(s.base_offset, 1 << 20).read_bytes())])
''')


def test_a_one_partition_topic_the_full_disk_refuses_leaves_no_staged_directory(small_filesystem):
    from minikafka.storage import LogConfig, LogManager, SystemClock

    # A one-partition topic is staged straight in the log dir, not in a workshop: one free
    # inode is its directory, and its first file finds none.
    disk = small_filesystem("2m", inodes=512)
    manager = LogManager([disk.path / "logs"], LogConfig(), SystemClock())
    manager.startup()
    placeholders = _use_every_inode(disk.path / "placeholders")
    (placeholders / "0").unlink()
    try:
        manager.create_topic("one", 1, {})
    except OSError as exc:
        assert exc.errno == 28  # ENOSPC
    else:
        raise AssertionError("a partition fitted in one inode")
    assert manager.topics() == {}
    assert list((disk.path / "logs").iterdir()) == []
    shutil.rmtree(placeholders)
    assert len(manager.create_topic("one", 1, {})) == 1
    manager.shutdown()


# headroom -2: the new segment's .log file cannot be opened (nor anything else: the limit is
# below what is open, even once the old segment's index maps are let go); 1: it can, and
# its first index cannot.
@pytest.mark.parametrize("headroom", [-2, 1])
def test_a_roll_refused_by_the_open_file_limit_leaves_no_half_made_segment(tmp_path, headroom):
    result = subprocess.run([sys.executable, "-c", EMFILE_CHILD, str(tmp_path / "t-0"), str(headroom)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "refused: EMFILE",
        "files ['00000000000000000000.index', '00000000000000000000.log', '00000000000000000000.timeindex']",
        "segments [0, 2]",
        "after restart [b'kept', b'small', b'later']",
    ]
