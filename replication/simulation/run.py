"""One simulated run: a seed, three brokers, a topic, the workload and the faults, then the
checks. :func:`run_seed` sets up what makes a run deterministic and runs it on virtual time."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import trio
import trio.testing

from minikafka.broker.groups.coordinator import GROUP_METADATA_TOPIC
from minikafka.replication.kafka_zk import KafkaZk
from minikafka.replication.simulation.brokers import OFFSETS_PARTITIONS, SESSION_TIMEOUT_MS, SimBroker, VirtualClock
from minikafka.replication.simulation.checker import LIVENESS_BOUND_S, Checker
from minikafka.replication.simulation.faults import Faults
from minikafka.replication.simulation.network import SimNetwork
from minikafka.replication.simulation.transactions import ReadCommittedConsumer, TxnProducer
from minikafka.replication.simulation.workload import GROUPS, MEMBERS_PER_GROUP, TOPIC, Consumer, GroupMember, Producer
from minikafka.replication.simulation.zk import SimZkClient, SimZooKeeper
from minikafka.storage.checkpoint import calls_in_turn
from minikafka.storage.log import Log
from minikafka.storage.partition_metadata import new_topic_id

DURATION_S = 40.0  # of faults, in virtual time
SETTLE_S = 20.0  # after healing: the ISR catches up, the consumer reads to the end
SETTLE_BOUND_S = 180.0  # a run not done this long after its faults end has not settled
EPOCH_MS = 1_700_000_000_000
# The data topic's format on odd seeds (magic 1); even seeds take the default, record batches.
# Followers learn leader epochs differently in each: from OffsetForLeaderEpoch answers only,
# or also from the batches they append.
MAGIC_1_TOPIC_CONFIGS = {"message.format.version": "0.10.2"}


@dataclass
class Result:
    seed: int
    violations: list[str]
    failovers: int
    virtual_s: float
    wall_s: float
    digest: str
    trace: list[str]
    group_figures: Counter[str]
    txn_figures: Counter[str]


class Simulation:
    def __init__(self, seed: int, work_dir: str, *, duration_s: float = DURATION_S, brokers: int = 3,
                 partitions: int = 3, verbose: bool = False, transactions: bool = False,
                 slow_demotion: bool = False, reassignments: bool = False) -> None:
        self.seed = seed
        self.work_dir = work_dir
        self.duration_s = duration_s
        self.rng = random.Random(seed)
        self.topic = TOPIC
        # The transactional workload needs record batches: its runs keep the default format.
        self.transactions = transactions
        self.topic_configs = MAGIC_1_TOPIC_CONFIGS if seed % 2 and not transactions else {}
        # Controlled shutdowns of a loaded broker (see Faults.controlled_shutdown): an option,
        # so that the seeds without it keep their schedules.
        self.slow_demotion = slow_demotion
        # Partition moves among the faults (Faults.reassign): an option for the same reason.
        self.reassignments = reassignments
        self.partitions = partitions
        self.broker_ids = list(range(1, brokers + 1))
        self.verbose = verbose
        self.lines: list[str] = []
        self.clock = VirtualClock(EPOCH_MS)
        self.net = SimNetwork(self.rng, self.trace)
        self.checker = Checker(self)
        self.faults = Faults(self)
        self.brokers: dict[int, SimBroker] = {}
        self.settle_deadline = float("inf")  # main's bound, which faults under way respect too

    def trace(self, kind: str, message: str) -> None:
        line = f"{trio.current_time():10.4f} {kind:8} {message}"
        self.lines.append(line)
        if self.verbose:
            print(line, flush=True)

    def _topic_id(self, topic: str) -> str:
        """The topic's id, from the seed and the name (not the fault schedule's generator), so a
        seed replays with the same ids."""
        return new_topic_id(random.Random(f"{self.seed}/{topic}").randbytes)

    async def start_broker(self, broker_id: int) -> None:
        await self.brokers[broker_id].start()

    async def main(self) -> None:
        # A run whose cluster never settles (a broker never ready again, a fault that never
        # ends) is a finding, not a hang: it stops at this bound, in virtual time, and says so.
        with trio.move_on_after(self.duration_s + SETTLE_BOUND_S) as bound, calls_in_turn():
            self.settle_deadline = bound.deadline
            await self._main()
        if bound.cancelled_caught:
            self.checker.violation(("settle",), f"the run had not settled {self.duration_s + SETTLE_BOUND_S:g} "
                                                "virtual s after it began (a broker never ready again?)")
            self.finished_at = trio.current_time()

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self.zk = SimZooKeeper(nursery, self.trace)
            self.zk.on_change.append(self.checker.zk_changed)
            self.admin = SimZkClient(self.zk, "admin", session_timeout_ms=SESSION_TIMEOUT_MS)
            await self.admin.start()
            for broker_id in self.broker_ids:
                self.brokers[broker_id] = SimBroker(self, broker_id)
                await self.start_broker(broker_id)
            n = len(self.broker_ids)
            assignment = {p: [self.broker_ids[(p + i) % n] for i in range(n)] for p in range(self.partitions)}
            await KafkaZk(self.admin).create_topic(self.topic, assignment, self.topic_configs,
                                                   self._topic_id(self.topic))
            # Created here rather than by the first FindCoordinator, whose replica assignment
            # starts at a random broker (a seed would not replay).
            offsets_configs = self.brokers[self.broker_ids[0]].broker.group_coordinator.offsets_topic_configs()
            await KafkaZk(self.admin).create_topic(GROUP_METADATA_TOPIC, {
                p: [self.broker_ids[(p + 1 + i) % n] for i in range(n)] for p in range(OFFSETS_PARTITIONS)},
                offsets_configs, self._topic_id(GROUP_METADATA_TOPIC))
            with trio.move_on_after(30):
                while len(self.checker.states) < self.partitions:
                    await trio.sleep(0.1)
            async with trio.open_nursery() as workload:
                producers = [Producer(self, "all", -1), Producer(self, "one", 1)]
                consumer = Consumer(self, "reader")
                members = [GroupMember(self, f"{group}-m{i}", group) for group in GROUPS
                           for i in range(MEMBERS_PER_GROUP)]
                transactional = [TxnProducer(self, "tx"), ReadCommittedConsumer(self, "committed")] \
                    if self.transactions else []
                for client in (*producers, consumer, *members, *transactional):
                    workload.start_soon(client.run)
                await self.faults.run(until=trio.current_time() + self.duration_s)
                self.trace("heal", "faults end: network healed")
                self.net.heal()
                for broker in self.brokers.values():
                    if broker.zk is not None:
                        broker.zk.set_reachable(True)
                await trio.sleep(LIVENESS_BOUND_S)
                self.checker.check_leaders()
                self.trace("heal", "crashed brokers restart")
                for broker_id, broker in self.brokers.items():
                    if not broker.alive:
                        await self.start_broker(broker_id)
                await trio.sleep(SETTLE_S / 2)
                for client in transactional:
                    if isinstance(client, TxnProducer):
                        self.checker.transactions.check_usable(client)
                workload.cancel_scope.cancel()
            await trio.sleep(SETTLE_S / 2)
            self.checker.final_check()
            for broker in self.brokers.values():
                if broker.alive:
                    await broker.crash(lose_unflushed=False)
            self.finished_at = trio.current_time()
            nursery.cancel_scope.cancel()


async def _inline(fn, *args, **_options):
    """trio.to_thread.run_sync in the simulator: on the event loop, so that runs repeat."""
    await trio.lowlevel.checkpoint()
    return fn(*args)


@contextlib.contextmanager
def _deterministic(seed: int, checker_ref: list):
    import trio._core._run as trio_run

    saved_run_sync = trio.to_thread.run_sync
    saved_truncate = Log.truncate_to
    saved_uuid4 = uuid.uuid4
    saved_state = trio_run._r.getstate()
    saved_random = random.getstate()
    saved_scheduling = trio_run._ALLOW_DETERMINISTIC_SCHEDULING

    def truncate_to(log, offset):
        checker_ref[0].truncating(log, offset)
        return saved_truncate(log, offset)

    trio.to_thread.run_sync = _inline
    Log.truncate_to = truncate_to
    # Member ids are client_id-uuid4: their order decides the group leader's assignment.
    ids = random.Random(seed)
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)
    # trio's own switch (pytest-trio sets it under Hypothesis): each batch of runnable tasks is
    # put in creation order before the seeded shuffle, instead of the order they woke in, which
    # can depend on object addresses (sets of tasks, id() tie-breaks) that differ between runs.
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True
    trio_run._r.seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        trio.to_thread.run_sync = saved_run_sync
        uuid.uuid4 = saved_uuid4
        Log.truncate_to = saved_truncate
        trio_run._r.setstate(saved_state)
        random.setstate(saved_random)
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved_scheduling


class _TraceLogs(logging.Handler):
    def __init__(self, sim: Simulation) -> None:
        super().__init__(logging.INFO)
        self.sim = sim

    def emit(self, record: logging.LogRecord) -> None:
        try:
            now = trio.current_time()
        except RuntimeError:
            return
        print(f"{now:10.4f} log      {record.name.rsplit('.', 1)[-1]}: {record.getMessage()}", flush=True)


def run_seed(seed: int, *, duration_s: float = DURATION_S, verbose: bool = False, transactions: bool = False,
             slow_demotion: bool = False, reassignments: bool = False) -> Result:
    started = time.perf_counter()
    # Real files, but in memory where the system has a tmpfs: the brokers fsync on every flush
    # and checkpoint, which on a disk would make the wall time, not the simulation, the cost.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix=f"minikafka-sim-{seed}-", dir=shm) as work_dir:
        sim = Simulation(seed, work_dir, duration_s=duration_s, verbose=verbose, transactions=transactions,
                         slow_demotion=slow_demotion, reassignments=reassignments)
        root = logging.getLogger("minikafka")
        handler = _TraceLogs(sim) if verbose else None
        saved_level, saved_propagate = root.level, root.propagate
        if handler is not None:
            root.addHandler(handler)
            root.setLevel(logging.INFO)
        else:
            root.setLevel(logging.CRITICAL + 1)
        root.propagate = False
        try:
            with _deterministic(seed, [sim.checker]):
                trio.run(sim.main, clock=trio.testing.MockClock(autojump_threshold=0))
        finally:
            root.setLevel(saved_level)
            root.propagate = saved_propagate
            if handler is not None:
                root.removeHandler(handler)
        digest = hashlib.sha256("\n".join(sim.lines).encode()).hexdigest()[:16]
        return Result(seed, sim.checker.violations, sim.faults.failovers, sim.finished_at,
                      time.perf_counter() - started, digest, sim.lines, sim.checker.groups.figures,
                      sim.checker.transactions.figures)
