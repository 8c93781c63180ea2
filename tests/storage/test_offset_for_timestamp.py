"""KIP-33's guarantee, checked against a brute-force scan on random logs.

Magic 0 sets are mixed in: the time index counts them at their append time (for retention),
which must never make a lookup skip a message whose real timestamp matches. So are
LogAppendTime appends, stamped with the broker's (fake, unordered) clock: the log is reopened
with message.timestamp.type switched, as a broker restarted with another default would.
"""

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minikafka.protocol.records import Codec, build_message_set
from minikafka.storage import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, FakeClock, Log, LogConfig
from minikafka.storage.config import CREATE_TIME, LOG_APPEND_TIME

from .conftest import START_MS, all_records

appends = st.lists(
    st.tuples(
        st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=6),  # timestamps (often equal)
        st.sampled_from([Codec.NONE, Codec.GZIP, Codec.LZ4]),
        st.integers(0, 3).map(lambda n: n == 0),  # roll after this append (1 in 4)
        st.integers(0, 3).map(lambda n: n == 0),  # magic 0, no timestamps (1 in 4)
        st.integers(min_value=0, max_value=12),  # the broker's clock at the append
        st.integers(0, 2).map(lambda n: n == 0),  # under LogAppendTime (1 in 3)
    ),
    min_size=1,
    max_size=25,
)


def _brute_force(records, target):
    """The first message (in offset order) whose timestamp is >= target."""
    return next(((r.offset, r.timestamp) for r in records if r.timestamp >= target), None)


def _brute_force_max(records):
    """The first message (in offset order) with the largest timestamp; magic 0's have none."""
    timed = [r for r in records if r.timestamp >= 0]
    top = max((r.timestamp for r in timed), default=None)
    return next(((r.offset, r.timestamp) for r in timed if r.timestamp == top), None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(appends=appends, targets=st.lists(st.integers(min_value=-1, max_value=13), min_size=1, max_size=15),
       interval=st.sampled_from([0, 40, 4096]), restart=st.booleans())
def test_offset_for_timestamp_matches_brute_force(appends, targets, interval, restart):
    clock = FakeClock(START_MS)
    configs = {append_time: LogConfig(index_interval_bytes=interval, segment_ms=10**12, message_format_version="0.10.2",
                                      message_timestamp_type=LOG_APPEND_TIME if append_time else CREATE_TIME)
               for append_time in (False, True)}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        config = configs[False]
        log = Log(directory, "t", 0, config, clock)
        stamped = []  # each message's timestamp as the log should have kept it
        for timestamps, codec, roll, magic0, now, append_time in appends:
            if config is not configs[append_time]:
                log.close()
                config = configs[append_time]
                log = Log(directory, "t", 0, config, clock)
            clock.set(START_MS + now)
            log.append_as_leader(build_message_set(
                [(None, b"v", START_MS + ts) for ts in timestamps], codec=codec, magic=0 if magic0 else 1))
            if magic0:
                stamped += [-1] * len(timestamps)
            else:
                stamped += [START_MS + now if append_time else START_MS + ts for ts in timestamps]
            if roll:
                log.roll()
        if restart:  # answers come from the files, not from memory, after a rebuild too
            log.close()
            (directory / "00000000000000000000.timeindex").unlink()
            log = Log(directory, "t", 0, config, clock, recovery_point=log.log_end_offset)
        records = all_records(log)
        assert [r.timestamp for r in records] == stamped
        for target in targets:
            assert log.offset_for_timestamp(START_MS + target) == _brute_force(records, START_MS + target)
        assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (log.log_end_offset, -1)
        assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
        # KIP-734: neither an untimed magic 0 message's append time nor a batch's last offset
        # stands in for the record that carries the largest timestamp.
        assert log.offset_for_timestamp(MAX_TIMESTAMP) == _brute_force_max(records)
        log.close()


def test_offset_for_timestamp_after_retention_skips_deleted_segments(tmp_path):
    clock = FakeClock(START_MS)
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(retention_ms=1000), clock)
    log.append_as_leader(build_message_set([(None, b"a", START_MS - 5000)]))
    log.roll()
    log.append_as_leader(build_message_set([(None, b"b", START_MS)]))
    assert log.delete_expired_segments() == 1
    assert log.offset_for_timestamp(0) == (1, START_MS)
    assert log.offset_for_timestamp(START_MS + 1) is None
