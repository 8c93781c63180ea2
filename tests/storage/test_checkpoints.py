"""Kafka's checkpoint text formats and the leader epoch cache."""

import pytest

from minikafka.storage.checkpoint import CorruptCheckpoint, OffsetCheckpointFile
from minikafka.storage.leader_epoch import LeaderEpochCache, LeaderEpochCheckpointFile


def test_offset_checkpoint_format_and_round_trip(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    assert checkpoint.read() == {}
    checkpoint.write({("orders", 1): 977, ("orders", 0): 1200, ("my-topic.x", 3): 0})
    assert path.read_text() == "0\n3\nmy-topic.x 3 0\norders 0 1200\norders 1 977\n"
    assert checkpoint.read() == {("orders", 1): 977, ("orders", 0): 1200, ("my-topic.x", 3): 0}
    assert not list(tmp_path.glob("*.tmp"))
    checkpoint.write({})
    assert path.read_text() == "0\n0\n"


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\nt 0 1\n", "0\nx\n", "0\n1\nt zero 1\n", "0\n1\nt 0\n"])
def test_corrupt_offset_checkpoints_are_reported(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpoint):
        OffsetCheckpointFile(path).read()


def _cache(tmp_path, end=100):
    state = {"end": end}
    cache = LeaderEpochCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"), lambda: state["end"])
    return cache, state


def test_epoch_cache_assign_and_persist(tmp_path):
    cache, _ = _cache(tmp_path)
    assert cache.latest_epoch == -1
    cache.assign(0, 0)
    cache.assign(0, 50)  # same epoch again: no change
    cache.assign(2, 40)
    cache.assign(1, 60)  # stale epoch: ignored
    assert cache.entries == [(0, 0), (2, 40)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n2 40\n"
    reloaded, _ = _cache(tmp_path)
    assert reloaded.entries == [(0, 0), (2, 40)]
    # A new epoch starting below later entries replaces that history.
    cache.assign(5, 20)
    assert cache.entries == [(0, 0), (5, 20)]


def test_epoch_end_offsets(tmp_path):
    cache, state = _cache(tmp_path, end=100)
    assert cache.end_offset_for(0) == (-1, -1)  # empty cache
    cache.assign(1, 0)
    cache.assign(3, 40)
    cache.assign(6, 70)
    assert cache.end_offset_for(6) == (6, 100)  # latest epoch: log end offset
    state["end"] = 120
    assert cache.end_offset_for(6) == (6, 120)
    assert cache.end_offset_for(3) == (3, 70)
    assert cache.end_offset_for(4) == (3, 70)  # unknown epoch in between: the one below it
    assert cache.end_offset_for(1) == (1, 40)
    assert cache.end_offset_for(0) == (0, 0)  # below every epoch
    assert cache.end_offset_for(9) == (-1, -1)  # above every epoch
    assert cache.end_offset_for(-1) == (-1, -1)


def test_epoch_truncation(tmp_path):
    cache, _ = _cache(tmp_path)
    for epoch, offset in [(0, 0), (1, 10), (2, 20), (3, 30)]:
        cache.assign(epoch, offset)
    cache.truncate_from_end(20)
    assert cache.entries == [(0, 0), (1, 10)]
    cache.truncate_from_start(15)
    assert cache.entries == [(1, 15)]
    cache.truncate_from_start(5)  # before everything: nothing to do
    assert cache.entries == [(1, 15)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n1\n1 15\n"


def test_corrupt_epoch_checkpoint_starts_empty(tmp_path):
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n3 10\n1 20\n")  # epochs out of order
    cache, _ = _cache(tmp_path)
    assert cache.entries == []


@pytest.mark.parametrize("entries, start, end, fitted", [
    ([(0, 0)], 0, 0, [(0, 0)]),  # created, never written
    ([(0, 0), (2, 10)], 0, 12, [(0, 0), (2, 10)]),  # nothing lost: nothing written
    ([(0, 0), (2, 10), (4, 20)], 0, 15, [(0, 0), (2, 10), (4, 15)]),  # tail lost: epoch 4 from the end
    ([(0, 0), (2, 10)], 10, 10, [(2, 10)]),  # retention emptied it at an epoch boundary
    ([], 0, 5, []),  # no epochs known (unreadable checkpoint): none invented
])
def test_epoch_cache_fit_to_loaded_log(tmp_path, entries, start, end, fitted):
    cache, _ = _cache(tmp_path)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    cache.fit_to_loaded_log(start, end)
    assert cache.entries == fitted
    assert _cache(tmp_path)[0].entries == fitted
