"""Appends, reads, rolls and truncation of one Log on real files."""

import os
import struct
import zlib

import pytest

from minikafka.protocol.compression import compress
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import build_record_batch
from minikafka.protocol.records import Codec, build_message_set, iter_entries, iter_records
from minikafka.storage import Log, LogConfig, OffsetOutOfRange, UnknownTopic

from .conftest import MAGIC_1, START_MS, all_records, message_set, open_log

HOUR = 3600_000
DAY = 24 * HOUR


def test_append_assigns_offsets_and_reads_back(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    first = log.append_as_leader(message_set(3, START_MS, tag="a"))
    second = log.append_as_leader(message_set(2, START_MS, tag="b"))
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert first.log_append_time == -1
    assert log.log_end_offset == 5
    assert [r.offset for r in all_records(log)] == [0, 1, 2, 3, 4]
    assert all_records(log)[3].value.startswith(b"b0")


def test_segment_files_use_kafka_names_and_layout(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300, index_interval_bytes=0, **MAGIC_1)
    for _ in range(10):
        log.append_as_leader(message_set(2, START_MS))
    names = sorted(os.listdir(log.dir))
    assert "00000000000000000000.log" in names
    assert "00000000000000000000.index" in names
    assert "00000000000000000000.timeindex" in names
    second = log.segments()[1].base_offset
    assert f"{second:020d}.log" in names
    # A closed segment's index is trimmed to whole 8-byte entries pointing at real messages.
    index = (log.dir / "00000000000000000000.index").read_bytes()
    data = (log.dir / "00000000000000000000.log").read_bytes()
    assert index and len(index) % 8 == 0
    for i in range(0, len(index), 8):
        relative, position = int.from_bytes(index[i:i + 4], "big"), int.from_bytes(index[i + 4:i + 8], "big")
        assert int.from_bytes(data[position:position + 8], "big") == relative
    timeindex = (log.dir / "00000000000000000000.timeindex").read_bytes()
    assert len(timeindex) % 12 == 0
    assert int.from_bytes(timeindex[-12:-4], "big") == START_MS


def test_log_append_time_is_stamped(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, message_timestamp_type="LogAppendTime")
    clock.advance(5000)
    result = log.append_as_leader(message_set(2, START_MS))
    assert result.log_append_time == START_MS + 5000
    assert [r.timestamp for r in all_records(log)] == [START_MS + 5000] * 2


def test_bad_set_writes_nothing(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    good = bytearray(message_set(2, START_MS))
    good[-1] ^= 0xFF  # breaks the CRC of the last message
    with pytest.raises(RecordError) as info:
        log.append_as_leader(bytes(good))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0
    assert os.path.getsize(log.dir / "00000000000000000000.log") == 0


def test_set_larger_than_a_segment_is_refused(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=200)
    with pytest.raises(RecordError) as info:
        log.append_as_leader(message_set(10, START_MS))
    assert info.value.code == ErrorCode.RECORD_LIST_TOO_LARGE


def test_read_bounds(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(message_set(5, START_MS))
    empty = log.read(5, 1000)
    assert empty.length == 0
    with pytest.raises(OffsetOutOfRange):
        log.read(6, 1000)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1000)


def test_read_max_bytes_and_min_one_message(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, **MAGIC_1)
    log.append_as_leader(message_set(4, START_MS, value_size=100))
    entry_size = next(iter_entries(log.read(0, 10_000).read_bytes())).size
    whole = log.read(0, 10_000)
    assert whole.length == 4 * entry_size
    # Whole entries only where one fits (Kafka's fetch ends inside one: bytes its consumer drops)
    assert log.read(0, 3 * entry_size - 1).length == 2 * entry_size
    assert log.read(0, entry_size + 10, min_one_message=False).length == entry_size
    at_least_one = log.read(1, 5)
    assert at_least_one.length == entry_size
    assert [r.offset for r in iter_records(at_least_one.read_bytes())] == [1]
    # where none fits, the cut is kept: a consumer before KIP-74 learns from it that the
    # message is larger than its fetch size
    assert log.read(1, 5, min_one_message=False).length == 5
    # ...and without cut_first_entry (a v3+ fetch's later partitions) nothing is returned
    assert log.read(1, 5, min_one_message=False, cut_first_entry=False).length == 0
    assert log.read(1, entry_size + 10, min_one_message=False, cut_first_entry=False).length == entry_size


def batch_set(count: int) -> bytes:
    return bytes(build_record_batch([(None, b"value %d" % i, START_MS, ()) for i in range(count)]))


def test_read_ends_at_a_whole_batch(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, index_interval_bytes=100)
    sizes = []
    for count in (30, 5, 30, 2):
        log.append_as_leader(batch_set(count))
        sizes.append(log.segments()[-1].size - sum(sizes))
    ends = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    for limit in range(sizes[0], ends[-1] + 1, 7):
        read = log.read(0, limit)
        assert read.length == max(end for end in ends if end <= limit), limit
    assert log.read(3, sizes[0] - 1).length == sizes[0]  # the first batch whole, as KIP-74 asks


def test_read_stops_at_max_offset(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, **MAGIC_1)
    log.append_as_leader(message_set(3, START_MS))
    log.append_as_leader(message_set(3, START_MS, codec=Codec.GZIP))  # offsets 3..5 in one wrapper
    log.append_as_leader(message_set(3, START_MS))
    assert [r.offset for r in iter_records(log.read(0, 10_000, max_offset=2).read_bytes())] == [0, 1]
    # A wrapper straddling the high watermark is not returned at all.
    assert [r.offset for r in iter_records(log.read(0, 10_000, max_offset=4).read_bytes())] == [0, 1, 2]
    assert [r.offset for r in iter_records(log.read(0, 10_000, max_offset=6).read_bytes())] == list(range(6))
    assert log.read(2, 10_000, max_offset=2).length == 0
    assert log.read(4, 10_000, max_offset=1).length == 0


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_read_inside_compressed_wrapper_returns_the_wrapper(tmp_path, clock, codec):
    log = open_log(tmp_path / "t-0", clock, index_interval_bytes=0)
    for _ in range(20):
        log.append_as_leader(message_set(5, START_MS, codec=codec))
    for offset in (0, 2, 4, 5, 7, 52, 99):
        chunk = log.read(offset, 1)  # min_one_message: exactly the wrapper holding it
        entries = list(iter_entries(chunk.read_bytes()))
        assert len(entries) == 1
        assert entries[0].offset == offset - offset % 5 + 4
        offsets = [r.offset for r in iter_records(chunk.read_bytes())]
        assert offset in offsets and offsets[0] == offset - offset % 5


def test_reads_cross_segment_boundaries(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=500, index_interval_bytes=50)
    for i in range(40):
        log.append_as_leader(message_set(3, START_MS + i, codec=Codec.GZIP if i % 2 else Codec.NONE, tag=f"{i}-"))
    assert len(log.segments()) > 5
    records = all_records(log)
    assert [r.offset for r in records] == list(range(120))
    # Every single offset, read on its own, comes back with that offset first.
    for offset in range(120):
        got = [r.offset for r in iter_records(log.read(offset, 1).read_bytes()) if r.offset >= offset]
        assert got[0] == offset
    # A read at a segment's base returns from that segment, never a partial earlier one.
    for info in log.segments()[1:]:
        chunk = log.read(info.base_offset, 1 << 20)
        assert chunk.file.name == info.log_path


def test_roll_by_size_and_segment_closed_callback(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=1000, **MAGIC_1)
    closed = []
    log.on_segment_closed = closed.append
    entry = len(message_set(1, START_MS))
    per_segment = 1000 // entry
    for _ in range(per_segment * 3 + 1):
        log.append_as_leader(message_set(1, START_MS))
    infos = log.segments()
    assert [i.closed for i in infos] == [True, True, True, False]
    assert all(i.size <= 1000 for i in infos)
    assert [c.base_offset for c in closed] == [i.base_offset for i in infos[:3]]
    assert [c.next_offset for c in closed] == [i.base_offset for i in infos[1:]]
    assert all(c.closed and c.max_timestamp == START_MS for c in closed)
    assert closed[0].log_path == log.dir / "00000000000000000000.log"
    assert log.closed_segments() == infos[:3]
    # The rolled segments are fsynced off the append path; only then does the recovery
    # point move past them (an unclean start until then scans them).
    assert log.recovery_point == 0
    assert log.flush_rolled_segments() == 3
    assert log.recovery_point == infos[-1].base_offset
    assert log.flush_rolled_segments() == 0


def test_roll_flush_outlives_retention_and_truncation(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=HOUR, file_delete_delay_ms=0, **MAGIC_1)
    log.append_as_leader(message_set(2, START_MS - DAY))
    log.roll()
    log.append_as_leader(message_set(2, START_MS))
    log.roll()
    assert log.delete_expired_segments() == 1  # the first rolled segment, before its fsync
    clock.advance(1)
    log.delete_expired_segments()  # ...and its files are gone
    assert log.flush_rolled_segments() == 2
    assert log.recovery_point == 4
    log.append_as_leader(message_set(2, START_MS))
    log.roll()
    log.truncate_to(3)  # back into a segment rolled and flushed earlier: it is active again
    assert log.flush_rolled_segments() == 0
    assert log.recovery_point == 3
    log.append_as_leader(message_set(2, START_MS))
    log.flush()  # an explicit flush covers everything, rolled segments included
    assert log.recovery_point == log.log_end_offset == 5


def test_roll_by_time_uses_message_timestamps(tmp_path, clock):
    """KIP-33: segment.ms is measured from the first message's timestamp to the incoming
    set's largest, not from file or wall-clock creation time."""
    hour = 3600_000
    log = open_log(tmp_path / "t-0", clock, segment_ms=hour)
    old = START_MS - 30 * 24 * hour  # a month-old CreateTime backlog
    for i in range(5):
        log.append_as_leader(message_set(1, old + i * 600_000))  # within an hour of the first
    assert len(log.segments()) == 1
    clock.advance(10 * 24 * hour)  # wall-clock time alone never rolls
    log.append_as_leader(message_set(1, old + 3000_000))
    assert len(log.segments()) == 1
    log.append_as_leader(message_set(1, old + hour + 1))  # more than segment.ms after the first
    assert len(log.segments()) == 2
    assert log.segments()[1].base_offset == 6
    log.append_as_leader(message_set(1, START_MS))  # today, > segment.ms past this segment's first
    assert [s.base_offset for s in log.segments()] == [0, 6, 7]


def test_old_timestamps_arriving_late_do_not_roll_every_append(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_ms=1000)
    for i in range(50):
        log.append_as_leader(message_set(1, START_MS - 10**9 + i))
    assert len(log.segments()) == 1


@pytest.mark.parametrize("full", ["offset index", "time index"])
def test_roll_on_a_full_index(tmp_path, clock, full):
    # 48 bytes: 6 offset-index entries; 4 time-index slots, one kept for the roll's entry.
    log = open_log(tmp_path / "t-0", clock, segment_index_bytes=48, index_interval_bytes=0)
    # Equal timestamps add one time-index entry only, so the offset index fills first;
    # rising ones fill the time index first.
    for i in range(30):
        log.append_as_leader(message_set(1, START_MS if full == "offset index" else START_MS + i))
    assert [r.offset for r in all_records(log)] == list(range(30))
    closed = log.segments()[:-1]
    assert len(closed) >= 3
    # Entry 0 sits at position 0 and is never indexed: 6 (or 3) more entries fill an index.
    per_segment = 7 if full == "offset index" else 4
    assert [s.next_offset - s.base_offset for s in closed] == [per_segment] * len(closed)
    for info in closed:
        index = info.log_path.with_suffix(".index").stat().st_size // 8
        time_index = info.log_path.with_suffix(".timeindex").stat().st_size // 12
        assert (index, time_index) == ((6, 1) if full == "offset index" else (3, 3))


def test_indexes_are_sparse_every_index_interval_bytes(tmp_path, clock):
    interval = 4096
    log = open_log(tmp_path / "t-0", clock, index_interval_bytes=interval, **MAGIC_1)
    for i in range(400):  # about 150 bytes per message, growing timestamps every tenth
        log.append_as_leader(message_set(1, START_MS + i // 10, value_size=100))
    log.close()
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    positions = {entry.offset: entry.position for entry in iter_entries(data)}
    index = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    entries = [(int.from_bytes(index[i:i + 4], "big"), int.from_bytes(index[i + 4:i + 8], "big"))
               for i in range(0, len(index), 8)]
    # Kafka's rule: an entry once more than index.interval.bytes were written since the last.
    expected, anchor = [], 0
    for offset, position in sorted(positions.items()):
        if position - anchor > interval:
            expected.append((offset, position))
            anchor = position
    assert len(entries) == 12 and entries == expected
    timeindex = (tmp_path / "t-0" / "00000000000000000000.timeindex").read_bytes()
    times = [(int.from_bytes(timeindex[i:i + 8], "big"), int.from_bytes(timeindex[i + 8:i + 12], "big"))
             for i in range(0, len(timeindex), 12)]
    # One time entry per offset entry (the largest timestamp so far, at the offset where it
    # first appeared), and the final one written at close.
    assert times[:-1] == [(START_MS + offset // 10, offset // 10 * 10) for offset, _ in entries]
    assert times[-1] == (START_MS + 39, 390)


def test_roll_when_offsets_would_overflow_relative_offsets(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_follower(build_message_set([(None, b"a", START_MS)], base_offset=0))
    log.append_as_follower(build_message_set([(None, b"b", START_MS)], base_offset=2**31 - 1))
    assert len(log.segments()) == 1
    log.append_as_follower(build_message_set([(None, b"c", START_MS)], base_offset=2**31))
    assert [s.base_offset for s in log.segments()] == [0, 2**31]
    assert [r.offset for r in iter_records(log.read(2**31, 1000).read_bytes())] == [2**31]
    assert [r.value for r in iter_records(log.read(1, 1000).read_bytes())] == [b"b"]


def test_follower_append_is_shallow_like_kafkas(tmp_path, clock):
    """A follower appends the leader's sets as they are, checking only shallow entries: a
    damaged inner message under an intact wrapper CRC is stored (the leader vouched for it);
    a damaged wrapper CRC, or offsets going back, write nothing."""
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_follower(build_message_set([(None, b"x", START_MS)] * 2, base_offset=0))
    inner = bytearray(build_message_set([(None, b"inner %d" % i, START_MS) for i in range(3)]))
    inner[-1] ^= 1  # the last inner message's CRC no longer matches
    wrapper = bytearray(build_message_set([(None, compress(Codec.GZIP, bytes(inner), magic=1), START_MS)],
                                          base_offset=4))
    wrapper[17] = Codec.GZIP
    struct.pack_into(">I", wrapper, 12, zlib.crc32(wrapper[16:]))
    damaged = bytearray(wrapper)
    damaged[-1] ^= 1
    with pytest.raises(RecordError) as refused:
        log.append_as_follower(bytes(damaged))
    assert refused.value.code == ErrorCode.CORRUPT_MESSAGE and "CRC" in str(refused.value)
    assert (log.log_end_offset, log.segments()[-1].size) == (2, 2 * len(build_message_set([(None, b"x", START_MS)])))
    result = log.append_as_follower(bytes(wrapper))
    assert (result.last_offset, log.log_end_offset) == (4, 5)
    assert log.read(2, 10_000).read_bytes() == bytes(wrapper)
    with pytest.raises(RecordError):
        list(iter_records(log.read(2, 10_000).read_bytes()))  # readers still check inner CRCs
    with pytest.raises(RecordError) as refused:
        log.append_as_follower(build_message_set([(None, b"y", START_MS)], base_offset=4))
    assert "does not follow" in str(refused.value)
    assert log.log_end_offset == 5


def test_explicit_roll_of_empty_segment_is_a_no_op(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.roll()
    assert len(log.segments()) == 1
    log.append_as_leader(message_set(1, START_MS))
    log.roll()
    log.roll()
    assert [s.base_offset for s in log.segments()] == [0, 1]


def test_follower_append_keeps_offsets_and_refuses_going_back(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    result = log.append_as_follower(build_message_set([(None, b"x", START_MS)] * 3, base_offset=0))
    assert (result.first_offset, result.last_offset) == (0, 2)
    with pytest.raises(RecordError):
        log.append_as_follower(build_message_set([(None, b"y", START_MS)], base_offset=1))
    with pytest.raises(RecordError):
        log.append_as_follower(build_message_set([(None, b"y", START_MS)] * 2, base_offset=3)[:0] +
                               build_message_set([(None, b"y", START_MS)], base_offset=4) +
                               build_message_set([(None, b"y", START_MS)], base_offset=4))
    assert log.log_end_offset == 3
    log.append_as_follower(build_message_set([(None, b"z", START_MS)], base_offset=3, codec=Codec.GZIP))
    assert log.log_end_offset == 4


def test_truncate_to(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=400, index_interval_bytes=0, **MAGIC_1)
    for i in range(30):
        log.append_as_leader(message_set(1, START_MS + i))
    log.leader_epoch_cache.assign(1, 10)
    log.leader_epoch_cache.assign(2, 20)
    assert len(log.segments()) > 3
    log.truncate_to(15)
    assert log.log_end_offset == 15
    assert [r.offset for r in all_records(log)] == list(range(15))
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 10)]
    assert log.segments()[-1].max_timestamp == START_MS + 14
    # The truncated log takes appends again, including at the old offsets.
    log.append_as_leader(message_set(2, START_MS + 100), leader_epoch=3)
    assert [r.offset for r in all_records(log)] == list(range(17))
    assert log.offset_for_timestamp(START_MS + 50) == (15, START_MS + 100)
    log.truncate_to(100)  # beyond the end: nothing happens
    assert log.log_end_offset == 17


def test_truncate_to_the_end_still_drops_an_epoch_starting_there(tmp_path, clock):
    # A follower that led epoch 1 without writing in it: the new leader never had epoch 1.
    log = open_log(tmp_path / "t-0", clock, **MAGIC_1)
    log.leader_epoch_cache.assign(0, 0)
    log.append_as_leader(message_set(2, START_MS))
    log.leader_epoch_cache.assign(1, 2)
    log.truncate_to(2)
    assert log.log_end_offset == 2
    assert log.leader_epoch_cache.entries == [(0, 0)]
    log.truncate_to(5)
    assert log.leader_epoch_cache.entries == [(0, 0)]


def test_truncate_inside_a_wrapper_removes_the_wrapper(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(message_set(2, START_MS))
    log.append_as_leader(message_set(3, START_MS, codec=Codec.GZIP))
    log.truncate_to(3)
    assert log.log_end_offset == 2


def test_truncate_fully_and_start_at(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(message_set(5, START_MS))
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    log.append_as_follower(build_message_set([(None, b"x", START_MS)], base_offset=100))
    assert [r.offset for r in all_records(log)] == [100]
    with pytest.raises(OffsetOutOfRange):
        log.read(50, 100)


def test_flush_interval_messages_moves_recovery_point(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, flush_interval_messages=3)
    log.append_as_leader(message_set(2, START_MS))
    assert log.recovery_point == 0
    log.append_as_leader(message_set(1, START_MS))
    assert log.recovery_point == 3


def test_flush_interval_ms(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, flush_interval_ms=1000)
    log.append_as_leader(message_set(2, START_MS))
    assert not log.flush_if_due()
    clock.advance(1000)
    assert log.flush_if_due()
    assert log.recovery_point == 2
    clock.advance(5000)
    assert not log.flush_if_due()  # nothing new to flush


def test_default_is_page_cache_only(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(message_set(2, START_MS))
    clock.advance(10**9)
    assert not log.flush_if_due()
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 2


def test_leader_epoch_recorded_on_append(tmp_path, clock):
    log = Log.create(tmp_path / "t-0", "t", 0, LogConfig(), clock)
    assert log.leader_epoch_cache.entries == [(0, 0)]
    log.append_as_leader(message_set(3, START_MS), leader_epoch=0)
    log.append_as_leader(message_set(2, START_MS), leader_epoch=4)
    log.append_as_leader(message_set(1, START_MS), leader_epoch=2)  # stale epoch: not recorded
    assert log.leader_epoch_cache.entries == [(0, 0), (4, 3)]
    assert log.leader_epoch_cache.end_offset_for(0) == (0, 3)
    assert log.leader_epoch_cache.end_offset_for(4) == (4, 6)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n4 3\n"


@pytest.mark.parametrize("clean", [True, False])
def test_epoch_0_outlives_restarts_of_an_empty_partition(tmp_path, clock, clean):
    directory = tmp_path / "t-0"
    Log.create(directory, "t", 0, LogConfig(), clock).close()
    for _ in range(2):
        log = Log(directory, "t", 0, LogConfig(), clock, needs_recovery=not clean)
        assert log.leader_epoch_cache.entries == [(0, 0)]
        assert log.leader_epoch_cache.end_offset_for(0) == (0, 0)
        assert (directory / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
        log.close()
    log = Log(directory, "t", 0, LogConfig(), clock)
    log.append_as_leader(message_set(2, START_MS))
    assert log.leader_epoch_cache.end_offset_for(0) == (0, 2)


@pytest.mark.parametrize("clean", [True, False])
def test_epoch_outlives_restart_of_a_partition_retention_emptied(tmp_path, clock, clean):
    directory = tmp_path / "t-0"
    config = LogConfig(retention_ms=HOUR, segment_bytes=200)
    log = Log.create(directory, "t", 0, config, clock)
    for _ in range(4):
        log.append_as_leader(message_set(2, START_MS), leader_epoch=3)
    assert len(log.segments()) > 1
    clock.advance(2 * HOUR)
    log.delete_expired_segments()  # the active segment too: it is rolled, then deleted
    assert len(log.segments()) == 1
    assert log.log_start_offset == log.log_end_offset == 8
    assert log.leader_epoch_cache.entries == [(3, 8)]
    log.close()
    reopened = Log(directory, "t", 0, config, clock, log_start_offset=8, recovery_point=8,
                   needs_recovery=not clean)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (8, 8)
    assert reopened.leader_epoch_cache.entries == [(3, 8)]
    assert reopened.leader_epoch_cache.end_offset_for(3) == (3, 8)
    assert reopened.leader_epoch_cache.end_offset_for(0) == (0, 8)
    assert (directory / "leader-epoch-checkpoint").read_text() == "0\n1\n3 8\n"


def test_epochs_after_a_lost_tail_keep_the_current_epoch_at_the_log_end(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = Log.create(directory, "t", 0, LogConfig(**MAGIC_1), clock)
    log.append_as_leader(message_set(3, START_MS), leader_epoch=0)
    log.append_as_leader(message_set(2, START_MS), leader_epoch=2)
    log.append_as_leader(message_set(2, START_MS), leader_epoch=5)
    assert log.leader_epoch_cache.entries == [(0, 0), (2, 3), (5, 5)]
    segment = log.segments()[-1].log_path
    log.close()
    # A crash lost the last two sets (epochs 2 and 5): the log ends at 3.
    entries = list(iter_entries(segment.read_bytes()))
    with open(segment, "r+b") as f:
        f.truncate(entries[3].position)
    reopened = Log(directory, "t", 0, LogConfig(**MAGIC_1), clock, needs_recovery=True)
    assert reopened.log_end_offset == 3
    # Epoch 2 started at an offset that is gone; this broker, still leader in epoch 5,
    # holds it from the log end (Kafka's leader records its epoch at its log end).
    assert reopened.leader_epoch_cache.entries == [(0, 0), (5, 3)]
    assert reopened.leader_epoch_cache.end_offset_for(0) == (0, 3)
    assert reopened.leader_epoch_cache.end_offset_for(2) == (0, 3)
    assert reopened.leader_epoch_cache.end_offset_for(5) == (5, 3)


def test_closed_or_deleted_log_refuses_work_and_background_jobs_skip_it(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(message_set(1, START_MS))
    log.delete()
    assert not (tmp_path / "t-0").exists()
    with pytest.raises(UnknownTopic):
        log.append_as_leader(message_set(1, START_MS))
    with pytest.raises(UnknownTopic):
        log.read(0, 100)
    assert log.delete_expired_segments() == 0
    assert not log.flush_if_due()
    log.close()  # idempotent
    assert not (tmp_path / "t-0").exists()


def test_topic_limits_reach_validation(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, message_timestamp_difference_max_ms=1000, max_message_bytes=200)
    with pytest.raises(RecordError) as info:
        log.append_as_leader(message_set(1, START_MS - 5000))
    assert info.value.code == ErrorCode.INVALID_TIMESTAMP
    with pytest.raises(RecordError) as info:
        log.append_as_leader(message_set(1, START_MS, value_size=500))
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0
    assert log.append_as_leader(message_set(1, START_MS - 999)).first_offset == 0
