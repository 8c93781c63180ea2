"""Start-up after clean and unclean stops: recovery, index rebuilds, the clean marker."""

import os
import random
import shutil

import pytest

from minikafka.protocol.records import Codec, iter_entries, iter_records
from minikafka.storage import FakeClock, Log, LogConfig, LogManager
from minikafka.storage.log_manager import CLEAN_SHUTDOWN_FILE

from .conftest import START_MS, all_records, message_set, open_log

SMALL_INDEX = dict(segment_index_bytes=4096, index_interval_bytes=64)


def _reopen(directory, clock, recovery_point=0, **settings):
    """Open a log as after an unclean stop: everything from ``recovery_point`` is scanned."""
    config = LogConfig(**{**SMALL_INDEX, **settings})
    return Log(directory, "t", 0, config, clock, recovery_point=recovery_point, needs_recovery=True)


def _build(directory, clock, last_codec=Codec.NONE):
    """Eleven appends, the last one possibly compressed; left open, as at a crash."""
    log = open_log(directory, clock, **SMALL_INDEX)
    for i in range(10):
        log.append_as_leader(message_set(2, START_MS + i, tag=f"m{i}-"))
    log.append_as_leader(message_set(3, START_MS + 10, codec=last_codec, tag="last-"))
    return log


def _check_consistent(log, expected_records):
    assert [(r.offset, r.value) for r in all_records(log)] == expected_records
    for offset in range(log.log_start_offset, log.log_end_offset):
        assert any(r.offset == offset for r in iter_records(log.read(offset, 1).read_bytes()))
    # The log takes appends right where it ends.
    end = log.log_end_offset
    assert log.append_as_leader(message_set(1, START_MS + 99)).first_offset == end


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_cut_at_every_byte_inside_the_last_message(tmp_path, clock, codec):
    source = tmp_path / "source" / "t-0"
    log = _build(source, clock, codec)
    everything = [(r.offset, r.value) for r in all_records(log)]
    data = (source / "00000000000000000000.log").read_bytes()
    last = list(iter_entries(data))[-1]
    whole_before_last = [(r.offset, r.value) for r in iter_records(data[:last.position])]
    end_before_last = whole_before_last[-1][0] + 1
    for cut in range(last.position, last.position + last.size):
        target = tmp_path / f"cut{cut}" / "t-0"
        shutil.copytree(source, target)
        os.truncate(target / "00000000000000000000.log", cut)
        recovered = _reopen(target, clock)
        assert recovered.log_end_offset == end_before_last, cut
        assert os.path.getsize(target / "00000000000000000000.log") == last.position
        _check_consistent(recovered, whole_before_last)
        recovered.close()
        shutil.rmtree(target.parent)
    # Cutting exactly at the end loses nothing.
    intact = _reopen(source, clock)
    assert [(r.offset, r.value) for r in all_records(intact)] == everything


def test_garbage_tail_is_truncated(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = _build(directory, clock)
    expected = [(r.offset, r.value) for r in all_records(log)]
    size = os.path.getsize(directory / "00000000000000000000.log")
    rng = random.Random(7)
    with open(directory / "00000000000000000000.log", "ab") as f:
        f.write(bytes(rng.randrange(256) for _ in range(3000)))
    recovered = _reopen(directory, clock)
    assert os.path.getsize(directory / "00000000000000000000.log") == size
    _check_consistent(recovered, expected)


def test_plausible_tail_with_bad_crc_is_truncated(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = _build(directory, clock)
    expected = [(r.offset, r.value) for r in all_records(log)]
    forged = bytearray(message_set(1, START_MS))
    forged[0:8] = (23).to_bytes(8, "big")  # the right next offset, a well-formed size...
    forged[-1] ^= 1  # ...and a payload that does not match its CRC
    with open(directory / "00000000000000000000.log", "ab") as f:
        f.write(forged)
    _check_consistent(_reopen(directory, clock), expected)


def test_zeroed_tail_is_truncated(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = _build(directory, clock)
    expected = [(r.offset, r.value) for r in all_records(log)]
    size = os.path.getsize(directory / "00000000000000000000.log")
    os.truncate(directory / "00000000000000000000.log", size + 8192)  # filesystem zero-fill
    recovered = _reopen(directory, clock)
    assert os.path.getsize(directory / "00000000000000000000.log") == size
    _check_consistent(recovered, expected)


def test_corruption_in_the_middle_cuts_everything_after_it(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, segment_bytes=300, **SMALL_INDEX)
    for i in range(30):
        log.append_as_leader(message_set(1, START_MS + i, tag=f"{i}-"))
    segments = log.segments()
    assert len(segments) >= 4
    victim = segments[1]
    data = bytearray(victim.log_path.read_bytes())
    third = list(iter_entries(bytes(data)))[2]
    data[third.position + third.size - 1] ^= 0xFF
    victim.log_path.write_bytes(bytes(data))
    recovered = _reopen(directory, clock, recovery_point=victim.base_offset)
    assert recovered.log_end_offset == victim.base_offset + 2
    assert [s.base_offset for s in recovered.segments()] == [segments[0].base_offset, victim.base_offset]
    assert not (directory / f"{segments[2].base_offset:020d}.log").exists()
    _check_consistent(recovered, [(r.offset, r.value) for r in all_records(recovered)])


def test_segments_below_the_recovery_point_are_not_scanned(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, segment_bytes=600, **SMALL_INDEX)
    for i in range(30):
        log.append_as_leader(message_set(1, START_MS + i))
    recovery_point = log.segments()[-1].base_offset
    log.flush_rolled_segments()  # the broker's flush duty, after the rolls
    assert log.recovery_point == recovery_point
    first = log.segments()[0].log_path
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF  # damage a byte that only a CRC scan would notice
    first.write_bytes(bytes(data))
    fast = _reopen(directory, clock, recovery_point=recovery_point)
    assert fast.log_end_offset == 30
    assert os.path.getsize(first) == len(data)  # not scanned, not truncated
    fast.close()
    slow = _reopen(directory, clock, recovery_point=0)
    assert os.path.getsize(first) < len(data)
    assert slow.log_end_offset < 30


def test_recovered_segments_await_the_flush_before_the_recovery_point_passes_them(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, segment_bytes=300, **SMALL_INDEX)
    for i in range(30):
        log.append_as_leader(message_set(1, START_MS + i, tag=f"{i}-"))
    bases = [s.base_offset for s in log.segments()]
    assert len(bases) >= 5
    # The crash came before the flush duty ran: the recovery point is in the second segment.
    recovered = _reopen(directory, clock, recovery_point=bases[1] + 1, segment_bytes=300)
    assert recovered.recovery_point == bases[1] + 1
    # A roll after start-up, then the flush duty: the recovery point may only pass the
    # segments recovery scanned (all closed ones from the second on) once they were fsynced
    # with the new one, not just because the newly rolled segment was.
    recovered.append_as_leader(message_set(1, START_MS + 50))
    recovered.roll()
    assert recovered.recovery_point == bases[1] + 1
    closed_from_second = [s for s in recovered.closed_segments() if s.base_offset >= bases[1]]
    assert len(closed_from_second) >= len(bases)  # the scanned ones and at least the new roll
    assert recovered.flush_rolled_segments() == len(closed_from_second)
    assert recovered.recovery_point == recovered.log_end_offset
    assert recovered.flush_rolled_segments() == 0


def test_recovery_that_truncated_closed_segments_leaves_them_to_the_flush(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, segment_bytes=300, **SMALL_INDEX)
    for i in range(30):
        log.append_as_leader(message_set(1, START_MS + i, tag=f"{i}-"))
    victim = log.segments()[2]
    with open(victim.log_path, "r+b") as f:
        f.truncate(victim.size - 5)  # a torn write inside a segment that had rolled
    recovered = _reopen(directory, clock, recovery_point=0, segment_bytes=300)
    assert recovered.segments()[-1].base_offset == victim.base_offset  # later ones cut away
    assert recovered.recovery_point == 0
    # The two segments before it were scanned, not fsynced: the flush duty does that, and
    # only then does the recovery point move up to the active segment.
    assert recovered.flush_rolled_segments() == 2
    assert recovered.recovery_point == victim.base_offset


def _index_files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in (".index", ".timeindex")}


def _brute_force_offset_for_timestamp(log, target):
    return next(((r.offset, r.timestamp) for r in all_records(log) if r.timestamp >= target), None)


@pytest.mark.parametrize("damage", ["delete", "garbage", "zeros", "odd-length", "empty"])
def test_deleted_or_corrupt_indexes_are_rebuilt(tmp_path, clock, damage):
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, segment_bytes=1200, **SMALL_INDEX)
    rng = random.Random(3)
    for i in range(60):
        codec = Codec.GZIP if i % 3 == 0 else Codec.NONE
        log.append_as_leader(message_set(rng.randrange(1, 4), START_MS + rng.randrange(-500, 500), codec=codec))
    log.close()
    originals = _index_files(directory)
    assert sum(1 for content in originals.values() if content) >= 6
    for name in originals:
        path = directory / name
        if damage == "delete":
            path.unlink()
        elif damage == "garbage":
            path.write_bytes(bytes(rng.randrange(256) for _ in range(len(originals[name]))))
        elif damage == "zeros":
            path.write_bytes(bytes(len(originals[name])))
        elif damage == "odd-length":
            path.write_bytes(originals[name][:-3])
        else:
            path.write_bytes(b"")
    # A clean start (no recovery) still notices and rebuilds every damaged index.
    reopened = Log(directory, "t", 0, LogConfig(segment_bytes=1200, **SMALL_INDEX), clock,
                   recovery_point=10**9)
    reopened.close()
    assert _index_files(directory) == originals
    reopened = Log(directory, "t", 0, LogConfig(segment_bytes=1200, **SMALL_INDEX), clock)
    _check_consistent(reopened, [(r.offset, r.value) for r in all_records(reopened)])
    for target in range(START_MS - 600, START_MS + 600, 37):
        assert reopened.offset_for_timestamp(target) == _brute_force_offset_for_timestamp(reopened, target)


def test_damage_below_the_recovery_point_is_cut_and_the_gap_named(tmp_path, clock, caplog):
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, segment_bytes=600, **SMALL_INDEX)
    for i in range(30):
        log.append_as_leader(message_set(1, START_MS + i, tag=f"m{i}-"))
    log.close()
    first, second = sorted(directory.glob("*.log"))[:2]
    entries = list(iter_entries(first.read_bytes()))
    assert len(entries) > 2
    damaged = entries[2]
    with open(first, "r+b") as f:  # flip a payload byte of the third message: its CRC fails
        f.seek(damaged.position + damaged.size - 1)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    first.with_suffix(".index").unlink()  # what makes a clean start look at the segment at all
    next_base = int(second.stem)
    original_size = os.path.getsize(first)

    reopened = Log(directory, "t", 0, LogConfig(segment_bytes=600, **SMALL_INDEX), clock, recovery_point=10**9)
    # The damaged message and the rest of its segment are gone, the later segments stay.
    offsets = [r.offset for r in all_records(reopened)]
    assert offsets == [0, 1] + list(range(next_base, 30))
    [warning] = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert warning == (f"t-0: segment 0 is damaged: {original_size - damaged.position} bytes from offset 2 on "
                       f"truncated, the next segment starts at {next_base}")
    assert os.path.getsize(first) == damaged.position
    reopened.close()


def test_active_index_preallocated_at_crash_is_rebuilt(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, **SMALL_INDEX)
    for i in range(40):
        log.append_as_leader(message_set(1, START_MS + i))
    assert os.path.getsize(directory / "00000000000000000000.index") == 4096  # preallocated
    expected = [(r.offset, r.value) for r in all_records(log)]
    # Crash: no close. A start that believes it was clean still rejects the stale index.
    reopened = Log(directory, "t", 0, LogConfig(**SMALL_INDEX), clock, recovery_point=40)
    _check_consistent(reopened, expected + [])
    reopened.close()
    assert os.path.getsize(directory / "00000000000000000000.index") % 8 == 0
    assert os.path.getsize(directory / "00000000000000000000.index") < 4096


def test_manager_clean_and_unclean_restarts(tmp_path, clock):
    config = LogConfig(segment_bytes=1000, **SMALL_INDEX)
    manager = LogManager([tmp_path], config, clock)
    manager.startup()
    log = manager.create_topic("t", 1, {})[0]
    for i in range(30):
        log.append_as_leader(message_set(1, START_MS + i))
    manager.checkpoint()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == f"0\n1\nt 0 {log.recovery_point}\n"
    expected = [(r.offset, r.value) for r in all_records(log)]
    with open(log.segments()[-1].log_path, "ab") as f:  # a torn write at the crash
        f.write(message_set(1, START_MS)[:20])

    # Unclean: no marker, recovery from the checkpointed recovery point.
    crashed = LogManager([tmp_path], config, FakeClock(START_MS))
    crashed.startup()
    recovered = crashed.get_log("t", 0)
    assert [(r.offset, r.value) for r in all_records(recovered)] == expected
    recovered.append_as_leader(message_set(1, START_MS))
    crashed.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()

    clean = LogManager([tmp_path], config, FakeClock(START_MS))
    clean.startup()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # consumed: a crash now is unclean
    reloaded = clean.get_log("t", 0)
    assert reloaded.log_end_offset == 31
    assert reloaded.recovery_point == 31
    assert reloaded.segments()[-1].max_timestamp == START_MS + 29
    clean.shutdown()


@pytest.mark.parametrize("torn_timestamp", [START_MS - 1000, START_MS + 1000])
def test_a_torn_last_message_is_cut_on_a_start_that_believes_it_was_clean(tmp_path, clock, torn_timestamp):
    # The last time-index entry still names a whole message, so the indexes look sane
    # whatever the torn message's timestamp; what shows the tear is that the last whole
    # entry does not end at the file size.
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, **SMALL_INDEX)
    for i in range(10):
        log.append_as_leader(message_set(2, START_MS + i, tag=f"m{i}-"))
    expected = [(r.offset, r.value) for r in all_records(log)]
    log.close()
    with open(directory / "00000000000000000000.log", "ab") as f:
        f.write(message_set(1, torn_timestamp, tag="torn")[:-5])

    reopened = Log(directory, "t", 0, LogConfig(**SMALL_INDEX), clock, recovery_point=20)
    assert reopened.log_end_offset == 20
    reopened.append_as_leader(message_set(1, START_MS + 20, tag="after"))
    expected.append((20, b"after0" + b"." * 4))
    assert [(r.offset, r.value) for r in all_records(reopened)] == expected
    again = _reopen(directory, clock)  # the acknowledged message survives the next recovery
    assert [(r.offset, r.value) for r in all_records(again)] == expected
