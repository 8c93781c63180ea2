"""SnapshotStore: atomic, checksummed snapshots; the newest valid one wins."""

import os

from minikafka.storage import SnapshotStore


def test_write_and_latest(tmp_path):
    store = SnapshotStore(tmp_path / "snaps")
    assert store.latest() is None
    store.write(10, b"state at 10")
    store.write(250, b"state at 250")
    store.write(99, b"")
    assert store.latest() == (250, b"state at 250")
    assert store.offsets() == [10, 99, 250]
    assert sorted(os.listdir(tmp_path / "snaps")) == [
        "00000000000000000010.snapshot", "00000000000000000099.snapshot", "00000000000000000250.snapshot"]
    store.write(250, b"rewritten")
    assert SnapshotStore(tmp_path / "snaps").latest() == (250, b"rewritten")


def test_truncated_or_corrupt_snapshots_are_skipped(tmp_path):
    store = SnapshotStore(tmp_path)
    store.write(1, b"one")
    store.write(2, b"two" * 100)
    store.write(3, b"three" * 100)
    newest = tmp_path / "00000000000000000003.snapshot"
    newest.write_bytes(newest.read_bytes()[:-7])  # torn
    assert store.latest() == (2, b"two" * 100)
    middle = tmp_path / "00000000000000000002.snapshot"
    data = bytearray(middle.read_bytes())
    data[40] ^= 1  # a flipped bit
    middle.write_bytes(bytes(data))
    assert store.latest() == (1, b"one")
    (tmp_path / "00000000000000000001.snapshot").write_bytes(b"")
    assert store.latest() is None


def test_snapshot_renamed_to_another_offset_is_rejected(tmp_path):
    store = SnapshotStore(tmp_path)
    store.write(5, b"five")
    os.rename(tmp_path / "00000000000000000005.snapshot", tmp_path / "00000000000000000009.snapshot")
    assert store.latest() is None


def test_remove_older_than_and_leftover_temp_files(tmp_path):
    store = SnapshotStore(tmp_path)
    for offset in (1, 5, 9):
        store.write(offset, b"x")
    assert store.remove_older_than(5) == 1
    assert store.offsets() == [5, 9]
    (tmp_path / "00000000000000000012.snapshot.tmp").write_bytes(b"half")
    reopened = SnapshotStore(tmp_path)
    assert not list(tmp_path.glob("*.tmp"))
    assert reopened.latest() == (9, b"x")


def test_newest_first_lists_every_verified_snapshot_and_skips_damaged_ones(tmp_path):
    store = SnapshotStore(tmp_path)
    for offset in (4, 8, 12):
        store.write(offset, b"state at %d" % offset)
    middle = tmp_path / "00000000000000000008.snapshot"
    middle.write_bytes(middle.read_bytes()[:-1])  # torn
    assert list(store.newest_first()) == [(12, b"state at 12"), (4, b"state at 4")]


def test_a_set_aside_snapshot_leaves_every_listing_but_stays_on_disk(tmp_path):
    store = SnapshotStore(tmp_path)
    store.write(3, b"old")
    store.write(7, b"a format this version cannot decode")
    aside = store.set_aside(7)
    assert aside == tmp_path / "00000000000000000007.snapshot.unreadable"
    assert store.offsets() == [3] and store.latest() == (3, b"old")
    assert store.remove_older_than(100) == 1 and store.offsets() == []
    assert SnapshotStore(tmp_path).offsets() == []           # not a leftover to clean up either
    assert aside.exists()
    # Put back by hand, it verifies again.
    os.rename(aside, tmp_path / "00000000000000000007.snapshot")
    assert store.latest() == (7, b"a format this version cannot decode")


def test_remove_newer_than(tmp_path):
    store = SnapshotStore(tmp_path)
    for offset in (1, 5, 9):
        store.write(offset, b"x")
    assert store.remove_newer_than(5) == 1
    assert store.offsets() == [1, 5]
    assert store.remove_newer_than(5) == 0
