"""Exact truncation over random histories (issue 23): produces, partial follower fetches,
elections (clean or not), new epochs of the same leader, LeaderAndIsr requests that reach a
follower late or never, crashes that lose an unflushed tail, restarts. Three replicas on real logs
(``test_truncation.Replica``); what a follower does on each LeaderAndIsr is decided by
``truncates_on_leader_and_isr`` and done with the functions the fetcher calls, in its order.

Whenever a follower truncates, its point must be exactly where its log and its leader's part:
below it drops messages both hold (acknowledged ones, if it is elected next), above it keeps
a divergent one. That rests on every epoch cache describing its log after every step
(``History.faithful``): the leader answers a follower's Fetch and OffsetForLeaderEpoch only in
the follower's own epoch (KIP-320's fencing, ``leader_epoch_error``). A follower that keeps its log for a new epoch of the same leader must hold a
prefix of the leader's log. At the end every replica converges on the leader's log and
leader-epoch-checkpoint.

Every history is played on magic 1 logs, whose followers learn epochs only from the leader's
OffsetForLeaderEpoch answers, and on record batch logs, whose followers also read them off the
batches they append.

MINIKAFKA_HYPOTHESIS_EXAMPLES raises the example count (default CI-sized), e.g.
``MINIKAFKA_HYPOTHESIS_EXAMPLES=5000 pytest tests/replication/test_truncation_histories.py --hypothesis-seed=1``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minikafka.broker.partitions import leader_epoch_error
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.truncation import (
    epochs_to_query,
    epochs_to_query_below,
    epochs_to_record,
    leader_epochs_from_answers,
    truncates_on_leader_and_isr,
    truncation_offset_from_answers,
)
from minikafka.storage import FakeClock, LogConfig

from .test_truncation import T0, Replica, common_prefix

EXAMPLES = int(os.environ.get("MINIKAFKA_HYPOTHESIS_EXAMPLES", "300"))
N = 3
NO_LEADER = -1

ops = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.integers(1, 3)),
        # Follower ops name one of the brokers other than the current leader.
        st.tuples(st.just("fetch"), st.integers(0, N - 2), st.integers(1, 4)),
        st.tuples(st.just("deliver"), st.integers(0, N - 2)),
        st.tuples(st.just("lose"), st.integers(0, N - 2)),
        st.tuples(st.just("sync"), st.integers(0, N - 2)),
        st.tuples(st.just("elect"), st.integers(0, N - 1)),
        st.tuples(st.just("bump")),
        st.tuples(st.just("crash"), st.integers(0, N - 1), st.integers(0, 3)),
        st.tuples(st.just("restart"), st.integers(0, N - 1)),
    ),
    min_size=5,
    max_size=40,
)


@dataclass
class Broker:
    """What the replica manager keeps of the partition on one broker."""

    alive: bool = True
    leading: bool = False
    following: int | None = None
    epoch: int = 0
    needs_truncation: bool = False
    needs_epochs: bool = False
    fenced: bool = False  # the leader moved past its epoch: no fetching until its LeaderAndIsr
    inbox: list[tuple[int, int]] = field(default_factory=list)  # LeaderAndIsr (leader, epoch) not yet handled
    lost_after: int | None = None  # set by a crash: the last offset that survives it


class History:
    def __init__(self, root: Path, message_format_version: str) -> None:
        clock = FakeClock(T0)
        config = LogConfig(message_format_version=message_format_version)
        self.logs = [Replica(root, f"r{i}", clock, config) for i in range(N)]
        self.brokers = [Broker() for _ in range(N)]
        self.leader, self.epoch = 0, 0
        self.brokers[0].leading = True
        for i in range(1, N):  # the topic's first state: empty logs, nothing to truncate
            self.brokers[i].following = 0

    def close(self) -> None:
        for replica in self.logs:
            replica.log.close()

    # -- the controller --------------------------------------------------------------------

    def new_epoch(self, leader: int) -> None:
        """LeaderAndIsr of a new epoch: the leader takes it at once (the others may take it late)."""
        self.leader, self.epoch = leader, self.epoch + 1
        for i, broker in enumerate(self.brokers):
            if i == leader:
                broker.leading, broker.following, broker.epoch = True, None, self.epoch
                broker.needs_truncation = broker.needs_epochs = False
                broker.inbox.clear()
                self.logs[i].become_leader(self.epoch)
            elif broker.alive:
                broker.inbox.append((leader, self.epoch))

    def quiet(self) -> bool:
        """The controller may write a new epoch: it waits for every live broker to answer its
        LeaderAndIsr before it handles the next event, so a broker has at most one unhandled."""
        return not any(b.alive and b.inbox for b in self.brokers)

    def faithful(self) -> bool:
        """Every live replica's epoch cache describes its log: the epoch covering each offset
        is the one its message was written in (the value says which).

        A follower that fetched messages of a new epoch before it learnt where that epoch
        starts would break it (magic 0/1 sets carry no epoch; Kafka since 0.11 reads it off
        each batch): if the leader changed or the follower restarted before it learnt,
        nobody could tell it any more, and it would truncate below where the logs part
        (simulator seed 13)."""
        for i, broker in enumerate(self.brokers):
            if not broker.alive:
                continue
            entries = self.logs[i].log.leader_epoch_cache.entries
            for offset, value in self.logs[i].values():
                covering = [e for e, start in entries if start <= offset]
                if not covering or covering[-1] != int(value.split("@")[0]):
                    return False
        return True

    # -- a follower --------------------------------------------------------------------------

    def deliver(self, i: int) -> None:
        broker = self.brokers[i]
        leader, epoch = broker.inbox.pop(0)
        following = None if broker.leading else broker.following
        following_epoch = broker.epoch
        broker.leading, broker.epoch, broker.fenced = False, epoch, False
        if truncates_on_leader_and_isr(following, following_epoch, leader, epoch):
            broker.following, broker.needs_truncation, broker.needs_epochs = leader, True, False
            self.logs[i].pending = []
        else:
            broker.needs_epochs = True

    def leader_of(self, i: int) -> Replica | None:
        """The broker ``i`` follows, if it answers as a leader."""
        followed = self.brokers[i].following
        if followed is None or followed == NO_LEADER or not self.brokers[followed].alive or not self.brokers[followed].leading:
            return None
        return self.logs[followed]

    def fencing(self, i: int) -> ErrorCode:
        """What the leader broker ``i`` follows answers a request naming ``i``'s epoch."""
        return leader_epoch_error(self.brokers[self.brokers[i].following].epoch, self.brokers[i].epoch)

    def sync(self, i: int) -> None:
        """The fetcher's step before fetching: truncate, or learn the epochs (ReplicaFetcher._truncate_one)."""
        broker, follower, leader = self.brokers[i], self.logs[i], self.leader_of(i)
        cache, end = follower.log.leader_epoch_cache, follower.log.log_end_offset
        if self.fencing(i):
            return  # the leader is in another epoch: asked again once LeaderAndIsr has settled it
        answers = {e: leader.log.leader_epoch_cache.end_offset_for(e)[1] for e in epochs_to_query(cache.entries, broker.epoch)}
        before, theirs = follower.values(), leader.values()
        if not broker.needs_truncation:
            assert before == theirs[:len(before)], "kept a log that is not a prefix of the same leader's"
            entries = cache.entries
            follower.pending = epochs_to_record(leader_epochs_from_answers(answers, broker.epoch),
                                                entries[-1][1] if entries else 0)
            follower.record_reached_epochs()
            broker.needs_epochs = False
            return
        point = truncation_offset_from_answers(cache.entries, end, answers, broker.epoch, follower.log.high_watermark)
        below = epochs_to_query_below(answers, point)
        if below:
            answers = {**{e: leader.log.leader_epoch_cache.end_offset_for(e)[1] for e in below}, **answers}
        assert point == common_prefix(before, theirs), (point, before, theirs)
        follower.log.truncate_to(point)
        cache.truncate_from_end(point)
        follower.pending = epochs_to_record(leader_epochs_from_answers(answers, broker.epoch), point)
        follower.record_reached_epochs()
        broker.needs_truncation = broker.needs_epochs = False

    def fetch(self, i: int, count: int) -> None:
        """One fetch, answered only if the leader is in the follower's epoch (Fetch v9+)."""
        broker, follower, leader = self.brokers[i], self.logs[i], self.leader_of(i)
        fencing = self.fencing(i)
        if fencing == ErrorCode.FENCED_LEADER_EPOCH:
            broker.fenced = True
            return
        if fencing:
            return  # UNKNOWN_LEADER_EPOCH: asked again
        if follower.log.log_end_offset > leader.log.log_end_offset:
            broker.needs_truncation = True  # OFFSET_OUT_OF_RANGE: truncate again
            return
        follower.fetch_from(leader, up_to=follower.log.log_end_offset + count)

    # -- faults ------------------------------------------------------------------------------

    def crash(self, i: int, lost: int) -> None:
        end = self.logs[i].log.log_end_offset
        self.brokers[i] = Broker(alive=False, lost_after=max(end - 1 - lost, 0) if lost and end else None)
        if i == self.leader:
            # Nobody is elected here (an election is an op of its own): the controller writes
            # "no leader" in a new epoch and tells the others, so that the crashed leader,
            # back with a shorter log, is a new leader to them.
            self.epoch += 1
            for broker in self.brokers:
                if broker.alive:
                    broker.inbox.append((NO_LEADER, self.epoch))

    def restart(self, i: int) -> None:
        lost_after = self.brokers[i].lost_after
        self.logs[i].restart(high_watermark=0, lost_after=lost_after)
        self.logs[i].pending = []
        self.brokers[i] = Broker()
        if i == self.leader:  # it was the last leader and nobody took over: it leads again
            self.new_epoch(i)
        elif self.brokers[self.leader].alive:
            self.brokers[i].inbox.append((self.leader, self.epoch))

    def play(self, op) -> None:
        kind, *args = op
        if kind in ("fetch", "deliver", "sync"):
            args[0] = [b for b in range(N) if b != self.leader][args[0]]
        leader = self.brokers[self.leader]
        if kind == "produce" and leader.alive:
            log = self.logs[self.leader]
            for _ in range(args[0]):
                log.produce(f"{self.epoch}@{log.log.log_end_offset}", self.epoch)
        elif kind == "fetch" and self.ready(args[0]):
            self.fetch(*args)
        elif kind == "deliver" and self.brokers[args[0]].alive and self.brokers[args[0]].inbox:
            self.deliver(args[0])
        elif kind == "lose" and self.brokers[args[0]].alive and self.brokers[args[0]].inbox:
            # A LeaderAndIsr that never reaches the broker (lost, or sent as it shut down):
            # the next one it gets may skip an epoch.
            self.brokers[args[0]].inbox.pop(0)
        elif kind == "sync" and self.brokers[args[0]].alive and self.leader_of(args[0]) is not None and (
                self.brokers[args[0]].needs_truncation or self.brokers[args[0]].needs_epochs):
            self.sync(args[0])
        elif kind == "elect" and args[0] != self.leader and self.brokers[args[0]].alive and self.quiet():
            self.new_epoch(args[0])
        elif kind == "bump" and leader.alive and self.quiet():
            self.new_epoch(self.leader)
        elif (kind == "crash" and self.brokers[args[0]].alive and sum(b.alive for b in self.brokers) > 1
              and (args[0] != self.leader or self.quiet())):
            self.crash(*args)
        elif kind == "restart" and not self.brokers[args[0]].alive and (args[0] != self.leader or self.quiet()):
            self.restart(args[0])

    def ready(self, i: int) -> bool:
        broker = self.brokers[i]
        return (broker.alive and not broker.leading and not broker.needs_truncation and not broker.needs_epochs
                and not broker.fenced and self.leader_of(i) is not None)

    def settle(self) -> None:
        """Heal: every broker up, a leader, every LeaderAndIsr handled, every follower caught up."""
        for i in range(N):
            if not self.brokers[i].alive:
                self.restart(i)
        if not self.brokers[self.leader].leading:
            self.new_epoch(self.leader)
        for i in range(N):
            while self.brokers[i].inbox:
                self.deliver(i)
            broker = self.brokers[i]
            if i != self.leader and (broker.following, broker.epoch) != (self.leader, self.epoch):
                # it lost the latest: sent again
                broker.inbox.append((self.leader, self.epoch))
                self.deliver(i)
        for i in range(N):
            if i != self.leader:
                while self.brokers[i].needs_truncation or self.brokers[i].needs_epochs:
                    self.sync(i)
                self.fetch(i, 1 << 20)
                if self.brokers[i].needs_truncation:
                    self.sync(i)
                    self.fetch(i, 1 << 20)


# Simulator seed 13: a follower fetches messages its leader wrote in a new epoch of its own
# before the follower learns that epoch (its LeaderAndIsr is late; in controlled shutdown it
# never comes), then restarts: its cache ends that epoch's messages as the old epoch's.
SEED_13 = [("produce", 2), ("fetch", 0, 2), ("bump",), ("produce", 2), ("fetch", 0, 2),
           ("crash", 1, 0), ("restart", 1), ("deliver", 0), ("sync", 0)]
# Broker 1 never gets the epoch that made broker 2 leader, whose log lacks what broker 1
# fetched; broker 0, back as leader in the epoch after, truncated its own to match broker 2's.
MISSED_EPOCH = [("produce", 2), ("fetch", 0, 2), ("elect", 2), ("lose", 1), ("deliver", 0), ("sync", 0),
                ("elect", 0), ("deliver", 0), ("sync", 0)]


@pytest.mark.parametrize("message_format_version", ["0.10.2", "2.8"])
@settings(max_examples=EXAMPLES, deadline=None)
@given(ops)
@example(SEED_13)
@example(MISSED_EPOCH)
def test_any_history_truncates_exactly_and_converges(message_format_version, history):
    with tempfile.TemporaryDirectory() as root:
        model = History(Path(root), message_format_version)
        try:
            for op in history:
                model.play(op)
                assert model.faithful(), op
            model.settle()
            leader = model.logs[model.leader]
            for i in set(range(N)) - {model.leader}:
                assert model.logs[i].values() == leader.values()
                assert model.logs[i].log.leader_epoch_cache.entries == leader.log.leader_epoch_cache.entries
        finally:
            model.close()
