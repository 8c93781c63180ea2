"""Follower truncation by leader epoch (KIP-101, KIP-279): the pure functions, then the
scenarios of KIP-101, seed 000 and KIP-279 played on real logs in tmp_path, each also
played the old way to show that the old way loses or diverges."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.protocol.records import build_message_set, iter_records
from minikafka.replication.election import offline_leader
from minikafka.replication.partition_state import LeaderState, acks_all_satisfied
from minikafka.replication.truncation import (
    epochs_reached,
    epochs_to_query,
    epochs_to_query_below,
    epochs_to_record,
    leader_epochs_from_answers,
    truncates_on_leader_and_isr,
    truncation_offset,
    truncation_offset_from_answers,
)
from minikafka.storage import FakeClock, Log, LogConfig
from minikafka.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache, LeaderEpochCheckpointFile

T0 = 1_700_000_000_000


# -- the functions, on epoch maps ------------------------------------------------------------

def leader_cache(tmp_path: Path, entries, log_end: int) -> LeaderEpochCache:
    checkpoint = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT)
    checkpoint.write(list(entries))
    return LeaderEpochCache(checkpoint, lambda: log_end)


def ask(cache: LeaderEpochCache, epochs) -> dict[int, int]:
    return {e: cache.end_offset_for(e)[1] for e in epochs}


def test_epochs_to_query_spans_from_below_the_first_local_epoch_to_the_leader_epoch():
    assert epochs_to_query([(3, 10), (5, 20)], 7) == [2, 3, 4, 5, 6, 7]
    assert epochs_to_query([(0, 0), (1, 5)], 1) == [0, 1]
    assert epochs_to_query([], 2) == [0, 1, 2]
    assert epochs_to_query([(9, 4)], 3) == [3]  # a stale leader epoch: still one request
    with pytest.raises(ValueError):
        epochs_to_query([], -1)


@pytest.mark.parametrize("entries, log_end, leader_epoch, lowest", [
    ([(0, 0), (2, 5), (3, 9), (6, 20)], 31, 6, 0),
    ([(0, 0), (2, 5), (3, 9), (6, 20)], 31, 6, 2),
    ([(0, 0), (2, 5), (3, 9), (6, 20)], 20, 6, 1),     # latest epoch still empty
    ([(0, 0), (1, 0), (4, 7)], 7, 4, 0),               # epoch 1 replaced epoch 0 before any write
    ([(0, 0)], 0, 0, 0),
])
def test_leader_map_is_rebuilt_from_v0_answers(tmp_path, entries, log_end, leader_epoch, lowest):
    checkpoint = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT)
    cache = LeaderEpochCache(checkpoint, lambda: log_end)
    for epoch, start in entries:
        cache.assign(epoch, start)
    answers = ask(cache, range(lowest, leader_epoch + 1))
    expected = [(e, s) for e, s in cache.entries if e > lowest or e == lowest == 0]
    # Epoch 0 cannot be asked about from below: taken as held from 0 unless empty there.
    assert leader_epochs_from_answers(answers, leader_epoch) == expected


def test_leader_that_has_not_taken_the_epoch_yet_shows_its_latest(tmp_path):
    cache = leader_cache(tmp_path, [(0, 0), (2, 5)], 8)
    answers = ask(cache, range(0, 4))
    assert answers == {0: 5, 1: 5, 2: 8, 3: -1}
    assert leader_epochs_from_answers(answers, 3) == [(0, 0), (2, 5)]


def test_leader_without_epochs_gives_an_empty_map(tmp_path):
    cache = leader_cache(tmp_path, [], 8)
    assert leader_epochs_from_answers(ask(cache, [0, 1]), 1) == []


def test_pre_kip_279_minus_one_below_the_first_epoch_hides_that_epoch():
    # Kafka 0.11 answered -1 for epochs below its first; epoch 3's start is then unknown.
    assert leader_epochs_from_answers({2: -1, 3: 10, 4: 15}, 4) == [(4, 10)]


@pytest.mark.parametrize("answers, leader_epoch", [
    ({0: 1, 2: 3}, 2),      # a gap
    ({0: 5, 1: 3}, 1),      # going backwards
    ({1: 4}, 2),            # not up to the leader epoch
    ({}, 0),
    ({0: -7, 1: 2}, 1),
])
def test_answers_that_no_leader_gives_are_refused(answers, leader_epoch):
    with pytest.raises(ValueError):
        leader_epochs_from_answers(answers, leader_epoch)


def test_truncates_to_the_end_of_the_latest_shared_epoch():
    local = [(0, 0), (1, 10), (3, 20)]
    leader = [(0, 0), (1, 10), (2, 15), (4, 30)]
    # Shared: 0 and 1. Epoch 1 ends at 20 locally (epoch 3 starts) and at 15 on the leader.
    assert truncation_offset(local, 25, leader, 5, leader_end_offset=40) == 15


def test_never_above_the_local_log_end():
    assert truncation_offset([(0, 0)], 7, [(0, 0)], 3, leader_end_offset=12) == 7
    assert truncation_offset([(0, 0)], 7, [(0, 0)], 3) == 7  # leader's last epoch left open


def test_latest_epoch_shared_is_cut_at_the_leader_end():
    assert truncation_offset([(0, 0), (2, 5)], 12, [(0, 0), (2, 5)], 3, leader_end_offset=9) == 9


def test_falls_back_to_the_high_watermark_only_without_epochs():
    assert truncation_offset([], 12, [(0, 0)], 4) == 4
    assert truncation_offset([(0, 0)], 12, [], 4) == 4
    assert truncation_offset([], 3, [], 4) == 3
    assert truncation_offset_from_answers([(0, 0)], 12, {0: -1, 1: -1}, 1, 4) == 4


def test_without_a_shared_epoch_both_unknown_histories_go():
    assert truncation_offset([(5, 40), (6, 50)], 60, [(7, 45)], 10, leader_end_offset=70) == 40
    assert truncation_offset([(5, 40), (6, 50)], 60, [(7, 35)], 10, leader_end_offset=70) == 35


def test_without_a_shared_epoch_the_leaders_whole_map_gives_the_same_point():
    # Leader epochs below the follower's first (0, 2) hold what came before it on both sides.
    assert truncation_offset([(5, 40), (6, 50)], 60, [(0, 0), (2, 20), (7, 45)], 10, leader_end_offset=70) == 40
    assert truncation_offset([(5, 40)], 60, [(0, 0), (2, 20)], 10, leader_end_offset=30) == 30


def test_second_request_only_when_leader_history_below_the_range_will_be_fetched():
    # Range 4..7 starts (epoch 5) at 45 on the leader; the follower truncated to 40 fetches
    # 40..45 from epochs below 4.
    answers = {4: 45, 5: 60, 6: 60, 7: 70}
    assert epochs_to_query_below(answers, 40) == [0, 1, 2, 3]
    assert epochs_to_query_below(answers, 45) == []
    assert epochs_to_query_below({0: 5, 1: 9}, 2) == []  # the range already starts at 0
    assert epochs_to_query_below({3: -1, 4: -1}, 7) == [0, 1, 2]  # leader's epochs all below


def test_leader_behind_the_followers_epochs_keeps_only_what_came_before_them():
    # The leader's latest epoch (3) is the lowest one asked for: it never had epochs 4, 5.
    answers = {3: 30, 4: -1, 5: -1}
    assert truncation_offset_from_answers([(4, 25), (5, 40)], 50, answers, 5, 10) == 25
    assert truncation_offset_from_answers([(4, 35), (5, 40)], 50, answers, 5, 10) == 30


def test_epochs_to_record_start_with_the_one_covering_the_truncation_point():
    leader = [(0, 0), (2, 5), (3, 9), (6, 20)]
    assert epochs_to_record(leader, 9) == [(3, 9), (6, 20)]
    assert epochs_to_record(leader, 7) == [(2, 5), (3, 9), (6, 20)]
    assert epochs_to_record(leader, 25) == [(6, 20)]
    assert epochs_to_record([], 3) == []


def test_epochs_are_recorded_once_the_log_end_reaches_them():
    assert epochs_reached([(2, 5), (3, 9), (6, 20)], 9) == ([(2, 5), (3, 9)], [(6, 20)])


def test_truncates_again_for_a_new_leader_or_a_skipped_epoch_not_the_next_epoch_of_the_same_leader():
    assert not truncates_on_leader_and_isr(2, 5, 2, 6)  # an ISR change
    assert truncates_on_leader_and_isr(2, 5, 3, 6)
    assert truncates_on_leader_and_isr(2, 5, 2, 7)  # epoch 6 never came: broker 3 may have led
    assert truncates_on_leader_and_isr(None, 5, 2, 6)  # it led, or had no replica


# -- replicas on real logs -------------------------------------------------------------------

class Replica:
    """One broker's copy of the partition: a real Log in its own directory."""

    def __init__(self, root: Path, name: str, clock: FakeClock, config: LogConfig = LogConfig()) -> None:
        self.name = name
        self.dir = root / name / "t-0"
        self.dir.parent.mkdir(parents=True)
        self.clock = clock
        self.config = config
        self.log = Log.create(self.dir, "t", 0, config, clock)
        self.pending: list[tuple[int, int]] = []

    def produce(self, value: str, epoch: int) -> int:
        return self.log.append_as_leader(build_message_set([(None, value.encode(), T0)]), leader_epoch=epoch).last_offset

    def become_leader(self, epoch: int) -> None:
        # As the new leader does before it takes a write (DESIGN, Partition.makeLeader).
        self.log.leader_epoch_cache.assign(epoch, self.log.log_end_offset)

    def fetch_from(self, leader: "Replica", up_to: int | None = None) -> None:
        """One fetch: the leader's sets from our log end (up to ``up_to``), appended as they are."""
        data = leader.log.read(self.log.log_end_offset, 1 << 20, max_offset=up_to).read_bytes()
        if data:
            self.log.append_as_follower(data)
        self.record_reached_epochs()

    def follow(self, leader: "Replica", leader_epoch: int, how: str = "epochs") -> int:
        """Start following ``leader``: truncate ``how`` (epochs, or the old ways), return the point."""
        local = self.log.leader_epoch_cache.entries
        end = self.log.log_end_offset
        if how == "hw":  # before KIP-101
            point = min(self.log.high_watermark, end)
        elif how == "single_epoch":  # KIP-101 as first shipped: one question, own latest epoch
            answer = leader.log.leader_epoch_cache.end_offset_for(local[-1][0])[1]
            point = min(answer, end) if answer >= 0 else min(self.log.high_watermark, end)
        else:
            query = epochs_to_query(local, leader_epoch)
            answers = {e: leader.log.leader_epoch_cache.end_offset_for(e)[1] for e in query}
            leader_entries = leader_epochs_from_answers(answers, leader_epoch)
            point = truncation_offset_from_answers(local, end, answers, leader_epoch, self.log.high_watermark)
            if leader_entries:
                assert point == truncation_offset(local, end, leader_entries, self.log.high_watermark,
                                                  leader_end_offset=answers[leader_epoch])
            below = epochs_to_query_below(answers, point)
            if below:
                answers.update({e: leader.log.leader_epoch_cache.end_offset_for(e)[1] for e in below})
                leader_entries = leader_epochs_from_answers(answers, leader_epoch)
            self.pending = epochs_to_record(leader_entries, point)
        self.log.truncate_to(point)
        self.record_reached_epochs()
        return point

    def rejoin(self, leader: "Replica", leader_epoch: int, how: str, *, high_watermark: int) -> None:
        """Restart, follow ``leader`` (truncating ``how``) and catch up with one fetch."""
        self.restart(high_watermark=high_watermark)
        self.follow(leader, leader_epoch, how)
        self.fetch_from(leader)

    def record_reached_epochs(self) -> None:
        due, self.pending = epochs_reached(self.pending, self.log.log_end_offset)
        for epoch, start in due:
            self.log.leader_epoch_cache.assign(epoch, start)

    def restart(self, *, high_watermark: int, lost_after: int | None = None) -> None:
        """Stop and start again with ``high_watermark`` as checkpointed. ``lost_after``: a power
        failure took every byte of the segment after offset ``lost_after``'s message."""
        keep = None
        if lost_after is not None:
            keep = len(self.log.read(0, 1 << 30, max_offset=lost_after + 1).read_bytes())
        self.log.close()
        if keep is not None:
            segment = self.dir / f"{0:020d}.log"
            with open(segment, "r+b") as f:
                f.truncate(keep)
        self.log = Log(self.dir, "t", 0, self.config, self.clock, high_watermark=high_watermark,
                       needs_recovery=lost_after is not None)

    def values(self) -> list[tuple[int, str]]:
        data = self.log.read(self.log.log_start_offset, 1 << 30).read_bytes()
        return [(r.offset, r.value.decode()) for r in iter_records(data)]

    def segment_bytes(self) -> bytes:
        return (self.dir / f"{0:020d}.log").read_bytes()

    def checkpoint(self) -> str:
        return (self.dir / LEADER_EPOCH_CHECKPOINT).read_text()


@pytest.fixture
def cluster(tmp_path):
    clock = FakeClock(T0)
    made = []

    def make(*names):
        replicas = [Replica(tmp_path, n, clock) for n in names]
        made.extend(replicas)
        return replicas

    yield make
    for replica in made:
        replica.log.close()


def assert_identical_up_to(high_watermark: int, *replicas: Replica) -> None:
    prefix = [len(r.log.read(0, 1 << 30, max_offset=high_watermark).read_bytes()) for r in replicas]
    assert len(set(prefix)) == 1
    assert len({r.segment_bytes()[:prefix[0]] for r in replicas}) == 1


def assert_converged(*replicas: Replica) -> None:
    """Same log, byte for byte, and the same leader-epoch-checkpoint file."""
    assert len({r.log.log_end_offset for r in replicas}) == 1
    assert len({r.segment_bytes() for r in replicas}) == 1
    assert len({r.checkpoint() for r in replicas}) == 1


def play_kip101_scenario_1(cluster, how):
    """KIP-101 scenario 1: the follower restarts before it learns the HW moved, then the
    leader dies. A = broker 1 leads epoch 0, B = broker 2 follows."""
    a, b = cluster("a", "b")
    state = LeaderState(leader_id=1, assigned=[1, 2], isr=[1, 2], leader_epoch=0, zk_version=0,
                        leader_end_offset=0, high_watermark=0, now_ms=T0)
    state.follower_fetched(2, 0, 0, T0)
    for i, value in enumerate(["m0", "m1"]):
        offset = a.produce(value, epoch=0)
        state.leader_appended(offset + 1)
        b.fetch_from(a)
        outcome = state.follower_fetched(2, b.log.log_end_offset - 1, a.log.log_end_offset, T0 + i)
        b.log.high_watermark = outcome.high_watermark  # the HW in that fetch's response
    # B's next fetch tells A that B has m1: the HW moves to 2 and m1's acks=-1 produce completes.
    final = state.follower_fetched(2, b.log.log_end_offset, a.log.log_end_offset, T0 + 5)
    assert acks_all_satisfied(final.high_watermark, 2)
    a.log.high_watermark = final.high_watermark
    # B restarts before that fetch's response (carrying HW 2) arrives: its checkpoint says 1.
    b.restart(high_watermark=1)
    b.follow(a, 0, how)  # and A dies before B's next fetch
    fail_over_and_back(a, b, how)
    return a, b


def fail_over_and_back(a: Replica, b: Replica, how: str) -> None:
    """A (broker 1) is down; B (broker 2), in the ISR, is elected cleanly, starts epoch 1 and
    takes m2; A comes back with HW 2 checkpointed and follows B."""
    assert offline_leader([1, 2], [1, 2], {2}, unclean=False) == (2, [2])
    b.become_leader(1)
    b.produce("m2", epoch=1)
    a.rejoin(b, 1, how, high_watermark=2)


def test_kip101_scenario_1_keeps_the_acknowledged_message(cluster):
    a, b = play_kip101_scenario_1(cluster, "epochs")
    assert b.values() == [(0, "m0"), (1, "m1"), (2, "m2")]
    assert_converged(a, b)
    assert_identical_up_to(2, a, b)
    assert b.log.leader_epoch_cache.entries == [(0, 0), (1, 2)]


def test_kip101_scenario_1_the_old_way_loses_it(cluster):
    a, b = play_kip101_scenario_1(cluster, "hw")
    assert (1, "m1") not in b.values()  # acknowledged to the producer, gone from the new leader
    assert a.values()[1] != b.values()[1]  # and A, which kept it, now disagrees with B


def play_kip101_scenario_2(cluster, how):
    """KIP-101 scenario 2: a power failure hits both; the follower lost its unflushed copy of
    m1, comes back first and leads; then the old leader returns as follower."""
    a, b = cluster("a", "b")
    a.produce("m0", epoch=0)
    a.produce("m1", epoch=0)
    b.fetch_from(a)
    a.log.high_watermark = b.log.high_watermark = 2
    a.log.flush()
    b.restart(high_watermark=2, lost_after=0)
    assert b.values() == [(0, "m0")]
    fail_over_and_back(a, b, how)
    return a, b


def test_kip101_scenario_2_replicas_converge(cluster):
    a, b = play_kip101_scenario_2(cluster, "epochs")
    # m1 survived only on A, which was down when B took over: KIP-101 accepts that loss when
    # every replica fails at once. A now holds exactly what the new leader holds.
    assert a.values() == b.values() == [(0, "m0"), (1, "m2")]
    assert_converged(a, b)


def test_kip101_scenario_2_the_old_way_diverges(cluster):
    a, b = play_kip101_scenario_2(cluster, "hw")
    assert a.log.log_end_offset == b.log.log_end_offset == 2
    assert a.values() == [(0, "m0"), (1, "m1")]
    assert b.values() == [(0, "m0"), (1, "m2")]
    assert a.segment_bytes() != b.segment_bytes()


def play_unclean_election(cluster, how):
    """Seed 000 (KAFKA-977/1211): the follower falls out of the ISR, the leader dies, the
    follower is elected uncleanly and writes; the old leader returns as follower."""
    b, a = cluster("b", "a")  # B = broker 1 leads epoch 0, A = broker 2 follows
    state = LeaderState(leader_id=1, assigned=[1, 2], isr=[1, 2], leader_epoch=0, zk_version=0,
                        leader_end_offset=0, high_watermark=0, now_ms=T0)
    b.produce("m0", epoch=0)
    state.leader_appended(1)
    a.fetch_from(b)
    state.follower_fetched(2, 1, 1, T0 + 1)
    a.log.high_watermark = 1
    # A stops fetching; after replica.lag.time.max.ms it leaves the ISR.
    shrunk = state.shrink_isr(T0 + 20_000, 10_000)
    assert shrunk == [1]
    state.isr_written(shrunk, 1)
    b.produce("m1", epoch=0)
    b.produce("m2", epoch=0)
    b.log.high_watermark = state.leader_appended(3)
    assert b.log.high_watermark == 3
    # B dies; only A is alive and it is not in the ISR.
    assert offline_leader([1, 2], [1], {2}, unclean=False) is None
    assert offline_leader([1, 2], [1], {2}, unclean=True) == (2, [2])
    a.become_leader(1)
    a.produce("x1", epoch=1)
    a.produce("x2", epoch=1)
    a.log.high_watermark = 3
    b.rejoin(a, 1, how, high_watermark=3)
    return a, b


def test_unclean_election_replicas_converge_on_the_new_leaders_log(cluster):
    a, b = play_unclean_election(cluster, "epochs")
    # m1 and m2 are lost: that is what unclean.leader.election.enable allows. But both
    # replicas now hold the same log, and what the new leader acknowledged is intact.
    assert a.values() == b.values() == [(0, "m0"), (1, "x1"), (2, "x2")]
    assert_converged(a, b)
    assert_identical_up_to(a.log.high_watermark, a, b)


def test_unclean_election_the_old_way_diverges_silently(cluster):
    a, b = play_unclean_election(cluster, "hw")
    # Same offsets, different messages: consumers of the two replicas see different data.
    assert a.log.log_end_offset == b.log.log_end_offset == 3
    assert b.values() == [(0, "m0"), (1, "m1"), (2, "m2")]
    assert a.values() == [(0, "m0"), (1, "x1"), (2, "x2")]
    with pytest.raises(AssertionError):
        assert_identical_up_to(3, a, b)


def play_kip279(cluster, how):
    """KIP-279: A leads epoch 0; C has A's m1, m2, B does not. A dies, B leads epoch 1 and
    writes y1; C never hears of epoch 1, B dies, and C leads epoch 2 (cleanly: it is in the
    ISR). B returns as C's follower holding epoch 1, which C never had."""
    a, b, c = cluster("a", "b", "c")  # brokers 1, 2, 3
    a.produce("m0", epoch=0)
    b.fetch_from(a)
    c.fetch_from(a)
    a.produce("m1", epoch=0)
    a.produce("m2", epoch=0)
    c.fetch_from(a)
    for r in (a, b, c):
        r.log.high_watermark = 1  # B holds only m0: nothing later is acknowledged
    leader, isr = offline_leader([1, 2, 3], [1, 2, 3], {2, 3}, unclean=False)
    assert (leader, isr) == (2, [2, 3])
    b.become_leader(1)
    b.produce("y1", epoch=1)
    leader, isr = offline_leader([1, 2, 3], isr, {3}, unclean=False)
    assert (leader, isr) == (3, [3])
    c.become_leader(2)
    c.produce("z3", epoch=2)
    c.log.high_watermark = c.log.log_end_offset
    b.rejoin(c, 2, how, high_watermark=1)
    return b, c


def test_kip279_follower_with_an_epoch_the_leader_lacks_converges(cluster):
    b, c = play_kip279(cluster, "epochs")
    assert b.values() == c.values() == [(0, "m0"), (1, "m1"), (2, "m2"), (3, "z3")]
    assert_converged(b, c)
    assert c.log.leader_epoch_cache.entries == [(0, 0), (2, 3)]


def test_kip279_one_question_per_epoch_keeps_the_divergent_message(cluster):
    # Asked for the end of epoch 1 only, C answers where its epoch 2 starts (3), and B keeps y1.
    b, c = play_kip279(cluster, "single_epoch")
    assert b.values()[1] == (1, "y1")
    assert c.values()[1] == (1, "m1")
    assert b.log.log_end_offset == c.log.log_end_offset == 4
    assert b.segment_bytes() != c.segment_bytes()


# -- any history ---------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.integers(1, 3)),
        st.tuples(st.just("fetch"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("elect"), st.integers(0, 2)),
        st.tuples(st.just("follow"), st.integers(0, 2)),
    ),
    max_size=25,
)


def common_prefix(x: list, y: list) -> int:
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


@settings(max_examples=100, deadline=None)
@given(ops)
def test_any_history_truncates_exactly_to_where_the_logs_part(history):
    """Random leader changes (clean or not), produces, partial fetches, and followers that miss
    leader changes (they follow late, as in KIP-279). Each message's value is the epoch and
    offset it was written at, which no other message shares (one leader per epoch). Whenever a
    follower starts following, its truncation point must be exactly where its log and the
    leader's part: any higher keeps a divergent message, any lower drops one both hold."""
    with tempfile.TemporaryDirectory() as root:
        clock = FakeClock(T0)
        replicas = [Replica(Path(root), f"r{i}", clock) for i in range(3)]
        leader, epoch = 0, 0
        following = {1, 2}  # replicas truncated against the current leader, free to fetch
        try:
            for op in history:
                if op[0] == "produce":
                    for _ in range(op[1]):
                        replicas[leader].produce(f"{epoch}@{replicas[leader].log.log_end_offset}", epoch)
                elif op[0] == "fetch" and op[1] in following:
                    follower = replicas[op[1]]
                    follower.fetch_from(replicas[leader], up_to=follower.log.log_end_offset + op[2])
                elif op[0] == "elect" and op[1] != leader:
                    leader, epoch = op[1], epoch + 1
                    replicas[leader].become_leader(epoch)
                    following = set()
                elif op[0] == "follow" and op[1] != leader and op[1] not in following:
                    follower, current = replicas[op[1]], replicas[leader]
                    before, theirs = follower.values(), current.values()
                    point = follower.follow(current, epoch)
                    assert point == common_prefix(before, theirs), (before, theirs)
                    following.add(op[1])
            for i in set(range(3)) - {leader} - following:
                replicas[i].follow(replicas[leader], epoch)
            for i in set(range(3)) - {leader}:
                replicas[i].fetch_from(replicas[leader])
                assert replicas[i].values() == replicas[leader].values()
                assert replicas[i].segment_bytes() == replicas[leader].segment_bytes()
                assert replicas[i].log.leader_epoch_cache.entries == replicas[leader].log.leader_epoch_cache.entries
        finally:
            for replica in replicas:
                replica.log.close()
