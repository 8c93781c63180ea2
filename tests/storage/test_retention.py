"""Retention by message timestamps (never file times) and by bytes; delayed deletion."""

import os
import shutil
import time

from minikafka.protocol.records import iter_records
from minikafka.storage import EARLIEST_TIMESTAMP, FakeClock, Log, LogConfig, LogManager

from .conftest import MAGIC_1, START_MS, all_records, message_set, open_log

HOUR = 3600_000
DAY = 24 * HOUR


def _fill(log, segments: int, timestamps) -> None:
    """Append one message per timestamp, rolling after every ``per`` messages."""
    per = len(timestamps) // segments
    for i, ts in enumerate(timestamps):
        log.append_as_leader(message_set(1, ts))
        if (i + 1) % per == 0:
            log.roll()


def test_retention_by_time_uses_largest_timestamp(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=DAY)
    # Three closed segments whose newest messages are 3, 2 and 1 days old.
    for age_days in (3, 2, 1):
        log.append_as_leader(message_set(1, START_MS - (age_days + 1) * DAY))
        log.append_as_leader(message_set(1, START_MS - age_days * DAY))
        log.roll()
    log.append_as_leader(message_set(1, START_MS))
    assert log.delete_expired_segments() == 2
    assert log.log_start_offset == 4
    assert [r.offset for r in all_records(log)] == [4, 5, 6]
    clock.advance(1)  # now the 1-day-old segment is more than retention.ms old
    assert log.delete_expired_segments() == 1
    assert log.log_start_offset == 6


def test_a_segment_lives_while_any_message_in_it_is_young(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=DAY, segment_ms=100 * DAY)
    log.append_as_leader(message_set(1, START_MS - 10 * DAY))
    log.append_as_leader(message_set(1, START_MS - HOUR))  # a young message keeps the segment
    log.append_as_leader(message_set(1, START_MS - 10 * DAY))  # out-of-order old one after it
    log.roll()
    log.append_as_leader(message_set(1, START_MS))
    assert log.delete_expired_segments() == 0
    clock.advance(DAY - HOUR + 1)
    assert log.delete_expired_segments() == 1


def test_quiet_topic_rolls_and_expires(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=DAY)
    closed = []
    log.on_segment_closed = closed.append
    log.append_as_leader(message_set(3, START_MS))
    clock.advance(DAY)
    assert log.delete_expired_segments() == 0
    assert len(log.segments()) == 1
    clock.advance(1)
    assert log.delete_expired_segments() == 1  # rolled, then deleted
    assert [c.base_offset for c in closed] == [0]
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert log.read(3, 100).length == 0
    log.append_as_leader(message_set(1, clock.time_ms()))
    assert [r.offset for r in all_records(log)] == [3]


def test_export_hand_off_can_veto_a_quiet_segment_until_it_is_closed(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=DAY)
    exported = set()
    log.on_segment_closed = lambda info: exported.add(info.base_offset)
    log.append_as_leader(message_set(3, START_MS))
    clock.advance(DAY + 1)
    seen = []

    def may_delete(info):
        seen.append(info)
        return info.base_offset in exported

    # The pass rolls the expired active segment, so export is told it closed and lets it go.
    assert log.delete_expired_segments(may_delete) == 1
    assert all(info.closed for info in seen)


def test_may_delete_veto_stops_deletion_in_order(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=HOUR)
    _fill(log, 4, [START_MS - DAY] * 8)
    log.append_as_leader(message_set(1, START_MS))
    vetoed = log.segments()[1].base_offset
    assert log.delete_expired_segments(lambda info: info.base_offset != vetoed) == 1
    assert log.log_start_offset == vetoed
    assert log.delete_expired_segments(lambda info: True) == 3


def test_retention_by_bytes(tmp_path, clock):
    entry = len(message_set(1, START_MS))
    segment_size = 2 * entry
    total = 5 * segment_size + entry  # five closed segments of two messages, one in the active
    log = open_log(tmp_path / "t-0", clock, retention_ms=-1, retention_bytes=total - 2 * segment_size - 1, **MAGIC_1)
    _fill(log, 5, [START_MS] * 10)
    log.append_as_leader(message_set(1, START_MS))
    assert log.size_in_bytes == total
    # Deleting two segments leaves 1 byte too many, but a third would undershoot: stop at 2.
    assert log.delete_expired_segments() == 2
    assert log.log_start_offset == 4
    assert log.size_in_bytes == total - 2 * segment_size
    assert log.delete_expired_segments() == 0


def test_unlimited_retention_and_compact_policy_keep_everything(tmp_path, clock):
    for settings in ({"retention_ms": -1}, {"retention_ms": 1, "cleanup_policy": "compact"}):
        log = open_log(tmp_path / f"t-{len(settings)}", clock, **settings)
        _fill(log, 3, [START_MS - 100 * DAY] * 3)
        clock.advance(DAY)
        assert log.delete_expired_segments() == 0


def test_untimed_messages_roll_and_expire_by_their_append_time(tmp_path, clock):
    """Magic 0 messages carry no timestamp: they count at the broker's time of append
    (where Kafka would use the file's mtime), so they roll and expire all the same."""
    log = open_log(tmp_path / "t-0", clock, retention_ms=DAY, segment_ms=2 * HOUR)
    log.append_as_leader(message_set(2, -1, magic=0))
    clock.advance(2 * HOUR)
    log.append_as_leader(message_set(2, -1, magic=0))
    assert len(log.segments()) == 1  # exactly segment.ms after the first append: no roll yet
    clock.advance(1)
    log.append_as_leader(message_set(2, -1, magic=0))
    assert [(s.base_offset, s.max_timestamp) for s in log.segments()] == [
        (0, START_MS + 2 * HOUR), (4, START_MS + 2 * HOUR + 1)]
    clock.set(START_MS + 2 * HOUR + DAY)
    assert log.delete_expired_segments() == 0
    clock.advance(1)
    assert log.delete_expired_segments() == 1
    assert log.log_start_offset == 4
    clock.advance(1)  # the quiet active segment is past retention too: rolled and deleted
    assert log.delete_expired_segments() == 1
    assert (log.log_start_offset, log.log_end_offset) == (6, 6)
    # Reading by timestamp still answers from real timestamps only: there are none.
    log.append_as_leader(message_set(1, -1, magic=0))
    assert log.offset_for_timestamp(0) is None


def test_untimed_segment_reopened_rolls_no_earlier(tmp_path, clock):
    """The first message's append time is not on disk: a reopened segment measures
    segment.ms from its first time-index entry, which is no earlier (Kafka: from the load)."""
    log = open_log(tmp_path / "t-0", clock, segment_ms=HOUR)
    log.append_as_leader(message_set(1, -1, magic=0))
    clock.advance(HOUR // 2)
    log.append_as_leader(message_set(1, -1, magic=0))
    log.close()
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(segment_ms=HOUR), clock, recovery_point=2)
    clock.set(START_MS + HOUR + 1)  # segment.ms after the first append...
    log.append_as_leader(message_set(1, -1, magic=0))
    assert len(log.segments()) == 1  # ...but the reopened segment only knows the second's time
    clock.set(START_MS + HOUR // 2 + HOUR + 1)
    log.append_as_leader(message_set(1, -1, magic=0))
    assert [s.base_offset for s in log.segments()] == [0, 3]


def test_untimed_segments_after_restart_copy_and_crash(tmp_path, clock):
    """Their append times live in the time index: a clean restart and a copy with fresh file
    times keep them exactly; a crash, or a lost index, credits the time of the rebuild, so
    the data lives longer than retention.ms, never shorter."""
    config = LogConfig(retention_ms=DAY)
    manager = LogManager([tmp_path / "a"], config, clock)
    manager.startup()
    log = manager.create_topic("t", 1, {})[0]
    log.append_as_leader(message_set(2, -1, magic=0))
    clock.advance(HOUR)
    log.append_as_leader(message_set(2, -1, magic=0))
    log.roll()
    log.append_as_leader(message_set(1, -1, magic=0))
    layout = _segment_layout(log)
    assert layout == [(0, 4, START_MS + HOUR), (4, 5, START_MS + HOUR)]
    manager.shutdown()
    copy_dir = tmp_path / "b"
    copy_dir.mkdir()
    shutil.copytree(tmp_path / "a" / "t-0", copy_dir / "t-0")
    future = time.time() + 10 * 86400
    for path in (copy_dir / "t-0").iterdir():
        os.utime(path, (future, future))
    for log_dir in (tmp_path / "a", copy_dir):
        clock.set(START_MS + 10 * HOUR)
        restarted = LogManager([log_dir], config, clock)
        restarted.startup()
        assert _segment_layout(restarted.get_log("t", 0)) == layout
        clock.set(START_MS + HOUR + DAY)
        assert restarted.cleanup() == 0
        clock.advance(1)
        assert restarted.cleanup() == 2  # the closed segment, then the quiet active one
        restarted.shutdown()

    crashed_dir = tmp_path / "c"
    clock.set(START_MS)
    manager = LogManager([crashed_dir], config, clock)
    manager.startup()
    log = manager.create_topic("t", 1, {})[0]
    log.append_as_leader(message_set(2, -1, magic=0))
    log.roll()
    log.append_as_leader(message_set(2, -1, magic=0))
    manager.flush_due()
    manager.checkpoint()  # then the process dies
    (crashed_dir / "t-0" / "00000000000000000000.timeindex").unlink()
    clock.set(START_MS + 5 * HOUR)
    restarted = LogManager([crashed_dir], config, clock)
    restarted.startup()  # rebuilds the lost index and recovers the active segment
    assert _segment_layout(restarted.get_log("t", 0)) == [(0, 2, START_MS + 5 * HOUR), (2, 4, START_MS + 5 * HOUR)]
    clock.set(START_MS + DAY + 1)
    assert restarted.cleanup() == 0
    clock.set(START_MS + 5 * HOUR + DAY + 1)
    assert restarted.cleanup() == 2


def test_deleted_segments_are_renamed_then_removed_after_the_delay(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=HOUR, file_delete_delay_ms=60_000)
    log.append_as_leader(message_set(2, START_MS - DAY))
    log.roll()
    log.append_as_leader(message_set(1, START_MS))
    assert log.delete_expired_segments() == 1
    names = set(os.listdir(log.dir))
    assert {"00000000000000000000.log.deleted", "00000000000000000000.index.deleted",
            "00000000000000000000.timeindex.deleted"} <= names
    assert "00000000000000000000.log" not in names
    clock.advance(59_999)
    log.delete_expired_segments()
    assert "00000000000000000000.log.deleted" in os.listdir(log.dir)
    clock.advance(1)
    log.delete_expired_segments()
    assert not [n for n in os.listdir(log.dir) if n.endswith(".deleted")]


def test_read_racing_retention_still_completes(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=HOUR, file_delete_delay_ms=0)
    log.append_as_leader(message_set(5, START_MS - DAY, tag="old"))
    log.roll()
    log.append_as_leader(message_set(1, START_MS))
    in_flight = log.read(0, 1 << 20)  # a fetch has its slice, not yet sent
    assert log.delete_expired_segments() == 1  # renamed
    clock.advance(1)
    log.delete_expired_segments()  # and unlinked
    assert not list(log.dir.glob("00000000000000000000*"))
    # The slice still reads (pread and sendfile both use the descriptor it holds).
    assert [r.value[:4] for r in iter_records(in_flight.read_bytes())] == [b"old0", b"old1", b"old2", b"old3", b"old4"]
    out = tmp_path / "sent"
    with open(out, "wb") as sink:
        os.sendfile(sink.fileno(), in_flight.fileno(), in_flight.position, in_flight.length)
    assert out.read_bytes() == in_flight.read_bytes()


def _segment_layout(log):
    return [(s.base_offset, s.next_offset, s.max_timestamp) for s in log.segments()]


def test_retention_after_restart_and_after_copy_with_fresh_file_times(tmp_path, clock):
    """Seed 000/002's problem: file times are reset by restarts and replica moves; retention
    and the time index must not care."""
    config = LogConfig(retention_ms=2 * DAY)
    manager = LogManager([tmp_path / "a"], config, clock)
    manager.startup()
    log = manager.create_topic("t", 1, {})[0]
    for age in (3 * DAY, DAY, 12 * HOUR):
        log.append_as_leader(message_set(2, START_MS - age))
        log.roll()
    log.append_as_leader(message_set(1, START_MS))
    layout = _segment_layout(log)
    manager.shutdown()

    # Copy the partition elsewhere; the copies get fresh mtimes, as after a replica move.
    copy_dir = tmp_path / "b"
    copy_dir.mkdir()
    shutil.copytree(tmp_path / "a" / "t-0", copy_dir / "t-0")
    future = time.time() + 10 * 86400
    for path in (copy_dir / "t-0").iterdir():
        os.utime(path, (future, future))

    for log_dir in (tmp_path / "a", copy_dir):
        clock.set(START_MS)
        restarted = LogManager([log_dir], config, clock)
        restarted.startup()
        log = restarted.get_log("t", 0)
        assert _segment_layout(log) == layout
        assert restarted.cleanup() == 1  # the 3-day-old segment
        assert log.log_start_offset == 2
        clock.advance(DAY)
        assert restarted.cleanup() == 0  # the 1-day-old one is now exactly 2 days old: not yet
        clock.advance(1)
        assert restarted.cleanup() == 1  # ...and due one millisecond later
        assert log.log_start_offset == 4
        clock.advance(12 * HOUR)
        assert restarted.cleanup() == 1
        assert [r.offset for r in all_records(log)] == [6]
        restarted.shutdown()


def test_retention_by_bytes_after_restart_and_after_copy(tmp_path, clock):
    entry = len(message_set(1, START_MS))
    config = LogConfig(retention_ms=-1, retention_bytes=5 * entry, **MAGIC_1)
    manager = LogManager([tmp_path / "a"], config, clock)
    manager.startup()
    log = manager.create_topic("t", 1, {})[0]
    _fill(log, 5, [START_MS] * 10)
    log.append_as_leader(message_set(1, START_MS))
    manager.shutdown()
    copy_dir = tmp_path / "b"
    copy_dir.mkdir()
    shutil.copytree(tmp_path / "a" / "t-0", copy_dir / "t-0")  # no checkpoints: a full recovery
    for log_dir in (tmp_path / "a", copy_dir):
        restarted = LogManager([log_dir], config, clock)
        restarted.startup()
        assert restarted.cleanup() == 3  # 11 messages in 6 segments, at most 5 may stay
        log = restarted.get_log("t", 0)
        assert (log.log_start_offset, log.size_in_bytes) == (6, 5 * entry)
        assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (6, -1)
        assert restarted.cleanup() == 0
        restarted.shutdown()


def test_log_start_offset_is_checkpointed(tmp_path, clock):
    config = LogConfig(retention_ms=HOUR)
    manager = LogManager([tmp_path], config, clock)
    manager.startup()
    log = manager.create_topic("t", 1, {})[0]
    log.append_as_leader(message_set(2, START_MS - DAY))
    log.roll()
    log.append_as_leader(message_set(2, START_MS))
    assert manager.cleanup() == 1
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 2\n"
    # Even after an unclean stop the start offset survives.
    again = LogManager([tmp_path], config, FakeClock(START_MS))
    again.startup()
    assert again.get_log("t", 0).log_start_offset == 2


def test_old_create_time_backlog_rolls_and_expires_by_its_timestamps(tmp_path, clock):
    """A backlog replayed today with month-old CreateTime timestamps rolls by those
    timestamps and expires on the next pass, although every file was written just now."""
    log = open_log(tmp_path / "t-0", clock, segment_ms=DAY, retention_ms=7 * DAY)
    month_ago = START_MS - 30 * DAY
    for hour in range(0, 72, 6):  # three days of backlog, one message every 6 hours
        log.append_as_leader(message_set(1, month_ago + hour * HOUR))
    log.append_as_leader(message_set(1, START_MS))  # live traffic resumes
    assert [s.base_offset for s in log.segments()] == [0, 5, 10, 12]  # > 24h between first and new
    assert log.delete_expired_segments() == 3
    assert [r.offset for r in all_records(log)] == [12]


def test_delete_segments_below_ignores_retention_settings(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=-1, cleanup_policy="compact")
    for _ in range(3):
        log.append_as_leader(message_set(2, START_MS))
        log.roll()
    log.append_as_leader(message_set(1, START_MS))
    assert log.delete_segments_below(3) == 1  # [0, 2) ends below 3; [2, 4) does not
    assert log.log_start_offset == 2
    assert log.delete_segments_below(100) == 2  # never the active segment
    assert (log.log_start_offset, log.log_end_offset) == (6, 7)
