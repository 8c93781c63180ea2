"""A broker object with real storage and a fake clock, for driving the coordinator directly."""

from __future__ import annotations

import pytest
import trio

from minikafka.broker.groups.store import LocalWriter
from minikafka.protocol.errors import ErrorCode
from minikafka.broker.config import BrokerConfig
from minikafka.broker.server import Broker
from minikafka.storage.clock import FakeClock

START_MS = 1_700_000_000_000
PROTOCOLS = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]


class HeldWriter(LocalWriter):
    """A partition's writer whose appends go to the real log but count as committed only
    when the test moves the high watermark (``release``) or fails them (``fail``): the
    window a cluster's coordinator has between an append and its replication."""

    commits_on_append = False

    def __init__(self, log) -> None:
        super().__init__(log)
        self.high_watermark = log.log_end_offset
        self.error = ErrorCode.NONE
        self._moved = trio.Event()

    async def committed(self, last_offset: int) -> ErrorCode:
        while self.high_watermark <= last_offset and not self.error:
            await self._moved.wait()
        return self.error

    def release(self) -> None:
        self.high_watermark = self.log.log_end_offset
        self._moved.set()
        self._moved = trio.Event()

    def fail(self, error: ErrorCode) -> None:
        self.error = error
        self._moved.set()
        self._moved = trio.Event()


class CoordinatorHarness:
    """``Broker`` built but not serving: its log manager and group coordinator started on
    ``log_dir`` with a ``FakeClock``. ``restart(clean=...)`` rebuilds both on the same data,
    with a clean shutdown (final snapshot) or as after a crash (nothing written at exit)."""

    def __init__(self, log_dir, overrides: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.overrides = overrides
        self.clock = FakeClock(START_MS)
        self.closed = False
        self._start()

    def _start(self) -> None:
        config = BrokerConfig({"log.dirs": str(self.log_dir), **self.overrides})
        self.broker = Broker(config, clock=self.clock)
        self.broker.log_manager.startup()
        self.coordinator = self.broker.group_coordinator
        self.coordinator.startup()

    def join(self, group, member_id="", protocols=PROTOCOLS, client_id="client",
             session=10000, rebalance=30000, protocol_type="consumer"):
        """Send a JoinGroup; returns a list that receives the answer (now or later)."""
        answers = []
        self.coordinator.handle_join_group(group, member_id, client_id, "/127.0.0.1", rebalance,
                                           session, protocol_type, protocols, answers.append)
        return answers

    def sync(self, group, generation, member_id, assignments=None):
        answers = []
        self.coordinator.handle_sync_group(group, generation, member_id, assignments or {},
                                           answers.append)
        return answers

    def form_group(self, group, count):
        """Join ``count`` members one at a time (the others rejoining each time) and sync with
        each member's id as its assignment; returns the member ids, leader first."""
        members: list[str] = []
        for _ in range(count):
            newcomer = self.join(group)
            rejoins = []
            for member_id in members:
                generation = self.coordinator.group(group).generation_id
                assert self.coordinator.heartbeat(group, member_id, generation) == \
                    ErrorCode.REBALANCE_IN_PROGRESS
                rejoins.append(self.join(group, member_id))
            assert all(answers and answers[0].error == ErrorCode.NONE for answers in [newcomer, *rejoins])
            members.append(newcomer[0].member_id)
        leader = newcomer[0].leader_id
        generation = self.coordinator.group(group).generation_id
        follower_answers = [self.sync(group, generation, m) for m in members if m != leader]
        assert all(not answers for answers in follower_answers)   # they wait for the leader
        leader_answer = self.sync(group, generation, leader, {m: m.encode() for m in members})
        assert leader_answer[0].error == ErrorCode.NONE
        assert all(answers[0].error == ErrorCode.NONE for answers in follower_answers)
        return [leader] + [m for m in members if m != leader]

    def hold_commits(self, index: int = 0) -> HeldWriter:
        """From now on appends to partition ``index`` wait for ``HeldWriter.release``."""
        partition = self.coordinator.partitions[index]
        partition.writer = HeldWriter(partition.log)
        return partition.writer

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coordinator.poll()

    def restart(self, *, clean: bool = True) -> None:
        if clean:
            self.coordinator.shutdown()
            self.broker.log_manager.shutdown()
        else:
            for log in self._logs():
                log.flush()
            for log in self._logs():
                log.close()
        self._start()

    def _logs(self):
        manager = self.broker.log_manager
        for topic, count in manager.topics().items():
            for partition in range(count):
                yield manager.get_log(topic, partition)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.coordinator.shutdown()
            self.broker.log_manager.shutdown()


@pytest.fixture
def harness_factory(tmp_path):
    made = []

    def make(**overrides: str) -> CoordinatorHarness:
        harness = CoordinatorHarness(tmp_path / f"data{len(made)}", overrides)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()


@pytest.fixture
def harness(harness_factory):
    return harness_factory(**{"offsets.topic.num.partitions": "2"})
