"""The replication throttle's pure parts (KIP-73): the windowed rate of Kafka's
ReplicationQuotaManager, which replicas a topic's throttled-replica list names, and the lists
a topic config accepts. The throttle applied by real brokers is test_replication_throttle.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.replication.quota import SAMPLES, UNLIMITED, WINDOW_S, ReplicationQuota, is_throttled
from minikafka.storage import LogConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0


def quota(bound):
    clock = Clock()
    return ReplicationQuota(lambda: bound, lambda: clock.now), clock


def test_no_bound_is_never_exceeded():
    for bound in (None, UNLIMITED):
        q, _ = quota(bound)
        q.record(10**15)
        assert not q.limited() and not q.exceeded()


def test_a_steady_stream_under_the_bound_is_never_held():
    q, clock = quota(1000)
    for _ in range(60):
        assert not q.exceeded()
        q.record(500)
        clock.now += 1


def test_a_burst_over_the_minimum_window_is_held_until_it_ages_out():
    q, clock = quota(1000)
    # The rate divides by at least (SAMPLES - 1) windows: 10 s of the bound pass at once.
    q.record(1000 * (SAMPLES - 1))
    assert not q.exceeded()
    q.record(1)
    assert q.exceeded()
    clock.now += SAMPLES * WINDOW_S  # the burst's window is dropped
    assert q.rate() == 0 and not q.exceeded()


def test_the_bound_is_read_at_each_check():
    bound = [100]
    clock = Clock()
    q = ReplicationQuota(lambda: bound[0], lambda: clock.now)
    q.record(5000)
    assert q.exceeded()
    bound[0] = UNLIMITED  # the dynamic config deleted
    assert not q.exceeded()


@settings(max_examples=300, deadline=None)
@given(bound=st.integers(1, 10_000),
       steps=st.lists(st.tuples(st.floats(0, 3, allow_nan=False), st.integers(1, 5_000)), min_size=1, max_size=200))
def test_what_passes_the_throttle_never_exceeds_the_bound_over_any_span(bound, steps):
    """A fetcher that takes a record only while the quota is not exceeded: over any span of
    (SAMPLES - 1) windows ending at a record taken, what it took is at most SAMPLES windows of
    the bound, plus that one record (checked before, recorded after)."""
    q, clock = quota(bound)
    taken = []
    for wait, size in steps:
        clock.now += wait
        if not q.exceeded():
            q.record(size)
            taken.append((clock.now, size))
    largest = max(size for _, size in steps)
    for end, _ in taken:
        span = sum(size for at, size in taken if end - (SAMPLES - 1) * WINDOW_S <= at <= end)
        assert span <= bound * SAMPLES * WINDOW_S + largest


@pytest.mark.parametrize("listed, partition, broker, expected", [
    ("", 0, 1, False), (None, 0, 1, False), ("*", 7, 3, True), (" * ", 7, 3, True),
    ("0:1,1:2", 0, 1, True), ("0:1,1:2", 1, 2, True), ("0:1,1:2", 0, 2, False), ("0:1, 1:2", 1, 2, True),
    ("10:1", 1, 10, False),
])
def test_which_replicas_a_list_names(listed, partition, broker, expected):
    assert is_throttled(listed, partition, broker) is expected


@pytest.mark.parametrize("value", ["*", "", "0:1", "0:1,1:2", "0:1,,1:2", " 0:1 , 1:2 "])
def test_a_topic_accepts_the_lists_kafka_accepts(value):
    for name in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
        LogConfig.from_topic_configs(LogConfig(), {name: value})


@pytest.mark.parametrize("value", ["0", "a:1", "0:1:2", "*,0:1", "0-1"])
def test_a_topic_refuses_other_lists_in_kafkas_words(value):
    with pytest.raises(ValueError, match=r"must be the literal '\*' or a list of replicas in the following format"):
        LogConfig.from_topic_configs(LogConfig(), {"leader.replication.throttled.replicas": value})
