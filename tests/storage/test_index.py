"""The memory-mapped offset and time indexes on their own."""

import pytest

from minikafka.protocol.record_batch import build_record_batch
from minikafka.protocol.records import build_message_set
from minikafka.storage.index import CorruptIndex, OffsetIndex, TimeIndex


def test_offset_index_append_lookup_trim_reload(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 800)
    index.open_for_append()
    assert path.stat().st_size == 800  # preallocated
    assert index.lookup(150) == (100, 0)
    for i in range(1, 11):
        index.append(100 + 10 * i, 1000 * i)
    assert index.lookup(105) == (100, 0)
    assert index.lookup(110) == (110, 1000)
    assert index.lookup(119) == (110, 1000)
    assert index.lookup(10_000) == (200, 10_000)
    with pytest.raises(ValueError):
        index.append(200, 11_000)  # offsets must increase
    index.trim()
    assert path.stat().st_size == 80
    assert path.read_bytes()[:8] == (10).to_bytes(4, "big") + (1000).to_bytes(4, "big")
    index.close()
    again = OffsetIndex(path, 100, 800)
    assert again.entries == 10
    assert again.lookup(155) == (150, 5000)
    again.close()


def test_offset_index_full_and_truncate(tmp_path):
    index = OffsetIndex(tmp_path / "0.index", 0, 24)
    index.open_for_append()
    for i in range(1, 4):
        index.append(i, i * 10)
    assert index.is_full()
    index.truncate_to(2)
    assert index.entries == 1 and not index.is_full()
    index.append(5, 50)
    assert index.last_entry() == (5, 50)


def test_time_index_keeps_increasing_timestamps_and_a_spare_slot(tmp_path):
    index = TimeIndex(tmp_path / "0.timeindex", 1000, 36)  # 3 slots, 2 usable before a roll
    index.open_for_append()
    index.maybe_append(-1, 1000)  # no timestamp: never indexed
    index.maybe_append(500, 1001)
    index.maybe_append(500, 1002)  # not larger: skipped
    index.maybe_append(400, 1003)  # smaller: skipped
    index.maybe_append(700, 1004)
    assert index.entries == 2 and index.is_full()
    index.maybe_append(800, 1005)  # full for ordinary appends
    assert index.entries == 2
    index.maybe_append(900, 1006, skip_full_check=True)  # the roll's entry uses the spare slot
    assert index.last_entry() == (900, 1006)
    assert index.lookup(499) == (-1, 1000)
    assert index.lookup(500) == (500, 1001)
    assert index.lookup(899) == (700, 1004)
    index.truncate_to(1004)
    assert index.last_entry() == (500, 1001)
    index.close()


def test_sanity_checks(tmp_path):
    log = tmp_path / "0.log"
    # A message at offset 0 and a record batch of offsets 5-7 after it.
    message = build_message_set([(None, b"m", 1)], magic=1)
    log.write_bytes(message + build_record_batch([(None, b"b", 1, ())] * 3, base_offset=5))
    fd = open(log, "rb")
    index = OffsetIndex(tmp_path / "0.index", 0, 80)
    index.open_for_append()
    index.append(7, len(message))
    index.trim()
    OffsetIndex(tmp_path / "0.index", 0, 80).sanity_check(fd.fileno(), log.stat().st_size)
    (tmp_path / "0.index").write_bytes((5).to_bytes(4, "big") + len(message).to_bytes(4, "big"))
    with pytest.raises(CorruptIndex):  # points at a message with another offset
        OffsetIndex(tmp_path / "0.index", 0, 80).sanity_check(fd.fileno(), log.stat().st_size)
    (tmp_path / "0.index").write_bytes(bytes(16))
    with pytest.raises(CorruptIndex):
        OffsetIndex(tmp_path / "0.index", 0, 80).sanity_check(fd.fileno(), log.stat().st_size)
    (tmp_path / "0.index").write_bytes(bytes(7))
    with pytest.raises(CorruptIndex):
        OffsetIndex(tmp_path / "0.index", 0, 80).sanity_check(fd.fileno(), log.stat().st_size)
    fd.close()
    (tmp_path / "0.timeindex").write_bytes(bytes(24))
    with pytest.raises(CorruptIndex):
        TimeIndex(tmp_path / "0.timeindex", 0, 48).sanity_check()
    (tmp_path / "0.timeindex").write_bytes((5).to_bytes(8, "big") + (1).to_bytes(4, "big")
                                           + (3).to_bytes(8, "big") + (2).to_bytes(4, "big"))
    with pytest.raises(CorruptIndex):
        TimeIndex(tmp_path / "0.timeindex", 0, 48).sanity_check()
