"""The faults a seed drives: each step picks one kind, its target and how long it lasts.

The mix leans towards the sequences that have cost acknowledged writes before (issue 23):
a follower dying (an ISR shrink with a same-leader epoch bump) while acks=all writes wait and
the controller's LeaderAndIsr to the other follower is slow, then the leader dying; a
controlled shutdown while producers still write acks=1 to the old leader; a leader that writes
its own ISR change and dies at once. The run's ``slow_demotion`` (``--slow-demotion``) makes the
controller's requests to a broker in controlled shutdown arrive late.
"""

from __future__ import annotations

import functools

import trio

from minikafka.broker.groups.coordinator import GROUP_METADATA_TOPIC
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.kafka_zk import PREFERRED_REPLICA_ELECTION_PATH, encode_preferred_replica_election
from minikafka.replication.simulation.brokers import REPLICA_LAG_TIME_MAX_MS, SESSION_TIMEOUT_MS
from minikafka.replication.simulation.network import LinkFaults

# kind -> weight
KINDS = {
    "crash": 4, "power_loss": 2, "pause": 2, "delay": 3, "drop": 1, "cut": 2, "zk_partition": 2,
    "zk_expiry": 1, "controlled_shutdown": 3, "preferred_leader": 2, "isr_shrink": 3,
    "crash_after_isr_write": 2, "slow_controller": 3,
}

# With --reassignments (an option: the seeds without it keep their schedules).
REASSIGNMENT_KINDS = {"reassign": 3}


class Faults:
    def __init__(self, sim) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.down: set[int] = set()
        self.failovers = 0
        self._crash_on_isr_write = False
        self._busy: set[int] = set()  # brokers a fault is stopping or starting
        self._nursery: trio.Nursery | None = None  # the faults' own, while they run
        # A power loss holds every other fault back until its broker is back in every ISR:
        # acknowledged writes survive one lost page cache at a time, not a second failure
        # (a controller failover that misses the bounce keeps the emptied broker leader,
        # KAFKA-1120) while the first is being repaired.
        self._power_lost = False
        self._cut_off = 0  # brokers paused or away from ZooKeeper now

    # ------------------------------------------------------------------ schedule

    async def run(self, until: float) -> None:
        kinds, weights = zip(*(KINDS | REASSIGNMENT_KINDS if self.sim.reassignments else KINDS).items())
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while trio.current_time() < until:
                await trio.sleep(self.rng.uniform(0.3, 2.5))
                kind = self.rng.choices(kinds, weights)[0]
                if not self._power_lost:
                    nursery.start_soon(getattr(self, kind))
            self._nursery = None
            nursery.cancel_scope.cancel()

    def _live(self) -> list[int]:
        return [b for b, broker in sorted(self.sim.brokers.items()) if broker.alive and b not in self._busy]

    def _pick_live(self, *, keep: int = 1) -> int | None:
        live = self._live()
        if len(live) <= keep:
            return None
        return self.rng.choice(live)

    def _disturb(self, nodes, seconds: float) -> None:
        now = trio.current_time()
        self.sim.checker.disturb(nodes, now, now + seconds)

    def _leader_of(self, partition: int) -> int | None:
        states = self.sim.checker.states.get(partition)
        return states[-1].leader if states and states[-1].leader in self.sim.brokers else None

    # ------------------------------------------------------------------ broker faults

    async def _down_for(self, broker_id: int, seconds: float, *, how: str) -> None:
        broker = self.sim.brokers[broker_id]
        self._busy.add(broker_id)
        self.down.add(broker_id)
        try:
            self.sim.trace("fault", f"{how} broker {broker_id} for {seconds:.2f} s")
            # A broker in controlled shutdown is still up and must hear of its lost leaderships
            # (defect 2): faults disturb it only once it stops.
            if how != "controlled shutdown of":
                # Back before its old session ends, a broker is still registered under it and
                # may be told to lead through it; when it ends, the controller moves those
                # leaderships without a word to the broker, whose registration is gone.
                self._disturb([broker_id], max(seconds, SESSION_TIMEOUT_MS / 1000) + 1)
            # Stopping and starting are not cut short by the end of the faults: the harness
            # restarts what is down then, and a half-stopped broker still holds its log dir.
            # The run's settle bound does cut them short: a broker never ready again is its finding.
            with trio.CancelScope(shield=True, deadline=self.sim.settle_deadline):
                if how == "controlled shutdown of":
                    if self.sim.slow_demotion:
                        self._slow_demotion(broker_id)
                    await broker.controlled_stop()
                    self._disturb([broker_id], seconds + 1)
                else:
                    await broker.crash(lose_unflushed=how == "power loss of")
            self.failovers += 1
            await trio.sleep(seconds)
            with trio.CancelScope(shield=True, deadline=self.sim.settle_deadline):
                await self.sim.start_broker(broker_id)
        finally:
            self.down.discard(broker_id)
            self._busy.discard(broker_id)

    async def crash(self) -> None:
        if self._power_lost:
            return
        target = self._pick_live(keep=1)
        if target is not None:
            await self._down_for(target, self.rng.choice([self.rng.uniform(0.5, 4), self.rng.uniform(8, 16)]),
                                 how="crash of")

    async def power_loss(self) -> None:
        # The page cache is lost: only while every replica is in sync, else Kafka itself (which
        # does not fsync before acknowledging) may lose acknowledged writes.
        if self.down or self._busy or self._cut_off or self._power_lost or not self._all_in_sync():
            return
        # Not the controller: its successor, elected when the lost session expires, can read
        # the broker's new registration before it ever saw it gone and keep it leader of its
        # emptied logs (KAFKA-1120, fixed in Kafka 1.1; 0.10.2 loses those writes too).
        candidates = [b for b in self._live() if self.sim.brokers[b].broker.cluster.controller is None]
        if len(candidates) < 1 or len(self._live()) < 2:
            return
        target = self.rng.choice(candidates)
        self._power_lost = True
        try:
            await self._down_for(target, self.rng.uniform(0.5, 6), how="power loss of")
            with trio.move_on_after(60):
                while not self._all_in_sync():
                    await trio.sleep(0.2)
        finally:
            self._power_lost = False

    def _all_in_sync(self) -> bool:
        """Every partition's ISR holds all its replicas (as many as the brokers, unless a move
        changed the partition's replica count: then as the controller assigns them)."""
        states = self.sim.checker.states
        controller = self._controller()
        assigned = {} if controller is None else \
            self.sim.brokers[controller].broker.cluster.controller.assignments.get(self.sim.topic, {})
        return all(len(s[-1].isr) >= len(assigned.get(p, self.sim.brokers)) for p, s in states.items())

    async def controlled_shutdown(self) -> None:
        if self._power_lost:
            return
        target = self._pick_live(keep=1)
        if target is not None:
            await self._down_for(target, self.rng.uniform(0.5, 5), how="controlled shutdown of")

    def _slow_demotion(self, target: int) -> None:
        """The run's ``slow_demotion``, as ``target``'s controlled shutdown begins: for a second
        or three the controller's requests to it arrive late (up to 1 s, well within
        controller.socket.timeout.ms) as to a loaded process, while its successor's arrive at
        once. The order in which the controller sends them, not the network, must keep the two
        from leading at once: the zombie check allows for the delay, the check that an old
        leader acknowledges nothing once its successor leads does not."""
        controller = self._controller()
        if controller is None or self._nursery is None:
            return
        link = self.sim.net.link(self.sim.brokers[controller].name, self.sim.brokers[target].name)
        top, seconds = self.rng.uniform(0.05, 1.0), self.rng.uniform(1, 3)
        self.sim.trace("fault", f"controller {controller}'s requests to broker {target} delayed up to {top:.3f} s "
                                f"for {seconds:.2f} s")
        self._disturb([("slow", target)], seconds + top)
        link.delay = (top / 2, top)

        async def undo() -> None:
            await trio.sleep(seconds)
            link.delay = LinkFaults().delay
        self._nursery.start_soon(undo)

    def _controller(self) -> int | None:
        return next((b for b, broker in self.sim.brokers.items()
                     if broker.alive and broker.broker.cluster.controller is not None), None)

    async def crash_after_isr_write(self) -> None:
        """Arm: the next leader to write its own ISR change dies right after."""
        self._crash_on_isr_write = True
        self.sim.trace("fault", "armed: crash the next leader that writes its ISR")

    def isr_written(self, partition: int, session_id: int) -> None:
        if not self._crash_on_isr_write or self._nursery is None or self._power_lost:
            return
        for broker_id, broker in self.sim.brokers.items():
            if broker.alive and broker.zk is not None and broker.zk.session_id == session_id \
                    and broker.broker.cluster.controller is None and broker_id not in self._busy:
                self._crash_on_isr_write = False
                self._nursery.start_soon(functools.partial(
                    self._down_for, broker_id, self.rng.uniform(11, 18), how="crash of"))
                return

    async def pause(self) -> None:
        if self._power_lost:
            return
        target = self._pick_live(keep=0)
        if target is None:
            return
        seconds = self.rng.uniform(0.2, 6)
        broker = self.sim.brokers[target]
        self.sim.trace("fault", f"pause broker {target} for {seconds:.2f} s")
        self._disturb([target, "*"], seconds + 1)
        self.sim.net.pause(broker.name, seconds)
        await self._without_zookeeper(broker.zk, seconds)

    async def _without_zookeeper(self, zk, seconds: float) -> None:
        """``zk`` (a broker's session) cannot reach ZooKeeper for ``seconds``."""
        zk.set_reachable(False)
        self._cut_off += 1
        try:
            await trio.sleep(seconds)
        finally:
            self._cut_off -= 1
            zk.set_reachable(True)

    # ------------------------------------------------------------------ network faults

    def _pair(self) -> tuple[int, int]:
        a, b = self.rng.sample(sorted(self.sim.brokers), 2)
        return a, b

    async def _link_fault(self, a: int, b: int, seconds: float, what: str, apply, undo) -> None:
        self.sim.trace("fault", f"{what} {a}->{b} for {seconds:.2f} s")
        self._disturb([a, b], seconds + 1)
        apply()
        try:
            await trio.sleep(seconds)
        finally:
            # Undone when the faults end too: a broker a fault is restarting (not cut short)
            # may be ready only once the controller reaches it over this link, and the
            # network heals only after that.
            undo()

    async def delay(self) -> None:
        a, b = self._pair()
        link = self.sim.net.link(self.sim.brokers[a].name, self.sim.brokers[b].name)
        top = self.rng.uniform(0.02, 1.0)

        def apply():
            link.delay = (0.0005, top)

        def undo():
            link.delay = (0.0005, 0.002)
        await self._link_fault(a, b, self.rng.uniform(0.5, 8), f"delay up to {top:.3f} s", apply, undo)

    async def drop(self) -> None:
        a, b = self._pair()
        link = self.sim.net.link(self.sim.brokers[a].name, self.sim.brokers[b].name)
        chance = self.rng.uniform(0.05, 0.5)

        def apply():
            link.drop = chance

        def undo():
            link.drop = 0.0
        await self._link_fault(a, b, self.rng.uniform(0.5, 5), f"drop {chance:.2f}", apply, undo)

    async def cut(self) -> None:
        a, b = self._pair()
        names = self.sim.brokers[a].name, self.sim.brokers[b].name
        await self._link_fault(a, b, self.rng.uniform(0.5, 8), "cut", lambda: self.sim.net.cut(*names),
                               lambda: self.sim.net.cut(*names, cut=False))

    async def isr_shrink(self) -> None:
        """Cut a follower from its leader for longer than replica.lag.time.max.ms (shrink),
        then heal (expand)."""
        partition = self.rng.randrange(self.sim.partitions)
        leader = self._leader_of(partition)
        if leader is None:
            return
        follower = self.rng.choice([b for b in self.sim.brokers if b != leader])
        names = self.sim.brokers[leader].name, self.sim.brokers[follower].name
        seconds = REPLICA_LAG_TIME_MAX_MS / 1000 + self.rng.uniform(0.5, 3)
        await self._link_fault(follower, leader, seconds, "cut (ISR shrink)", lambda: self.sim.net.cut(*names),
                               lambda: self.sim.net.cut(*names, cut=False))

    async def slow_controller(self) -> None:
        """Delay the controller's requests to one broker: its fetchers can then see a new
        epoch's data before its LeaderAndIsr."""
        controller = self._controller()
        if controller is None:
            return
        target = self.rng.choice([b for b in self.sim.brokers if b != controller])
        link = self.sim.net.link(self.sim.brokers[controller].name, self.sim.brokers[target].name)
        top = self.rng.uniform(0.2, 1.5)

        def apply():
            link.delay = (top / 2, top)

        def undo():
            link.delay = (0.0005, 0.002)
        await self._link_fault(controller, target, self.rng.uniform(2, 10), f"controller delay {top:.2f} s", apply, undo)
        # the follower dying next is what bumps the epoch with the same leader
        if self.rng.random() < 0.5:
            await self.crash()

    async def zk_partition(self) -> None:
        if self._power_lost:
            return
        target = self._pick_live(keep=0)
        if target is None:
            return
        seconds = self.rng.choice([self.rng.uniform(0.2, 2), self.rng.uniform(3, 10)])
        zk = self.sim.brokers[target].zk
        self.sim.trace("fault", f"partition broker {target} from ZooKeeper for {seconds:.2f} s")
        self._disturb([target, "*", "zk"], seconds + 1)
        await self._without_zookeeper(zk, seconds)

    async def zk_expiry(self) -> None:
        if self._power_lost:
            return
        target = self._pick_live(keep=0)
        if target is None:
            return
        self.sim.trace("fault", f"expire broker {target}'s ZooKeeper session")
        self._disturb([target, "*", "zk"], 2)
        self.sim.zk.expire(self.sim.brokers[target].zk.session_id)

    async def preferred_leader(self) -> None:
        """Move a partition's leadership: of the topic, or of ``__consumer_offsets`` (its
        groups' coordinator moves)."""
        offsets = sorted(self.sim.checker.groups.states)
        if offsets and self.rng.random() < 0.5:
            topic, partition, name = GROUP_METADATA_TOPIC, self.rng.choice(offsets), "offsets p"
        else:
            topic, partition, name = self.sim.topic, self.rng.randrange(self.sim.partitions), "p"
        to = self.rng.choice(sorted(self.sim.brokers))
        self.sim.trace("fault", f"move {name}{partition}'s leadership to {to}")
        self._disturb([], 0)
        try:
            await self.sim.admin.create(PREFERRED_REPLICA_ELECTION_PATH,
                                        encode_preferred_replica_election([(topic, partition, to)]))
        except Exception as exc:  # an earlier request still pending
            self.sim.trace("fault", f"move refused: {type(exc).__name__}")

    async def reassign(self) -> None:
        """Move a partition of the topic to other replicas through the controller (what
        AlterPartitionReassignments asks): two or three of the brokers in a random order, or,
        one time in five, cancel the move in progress. The move then races whatever the other
        faults do: its new replicas may be down, its controller may change mid-move."""
        controller = self._controller()
        if controller is None:
            return
        partition = self.rng.randrange(self.sim.partitions)
        if self.rng.random() < 0.2:
            target, what = None, "cancel the move of"
        else:
            target = self.rng.sample(sorted(self.sim.brokers), self.rng.choice([2, 3]))
            what = f"move to {target}"
        self.sim.trace("fault", f"{what} p{partition}")
        self._disturb([], 0)
        cluster = self.sim.brokers[controller].broker.cluster
        try:
            results = await cluster.controller_request("alter_reassignments", 10,
                                                       partitions={(self.sim.topic, partition): target})
        except Exception as exc:  # the controller moved meanwhile
            self.sim.trace("fault", f"move refused: {type(exc).__name__}")
            return
        code, _ = results[(self.sim.topic, partition)]
        self.sim.trace("fault", f"move of p{partition}: {ErrorCode(code).name}")
        if code == ErrorCode.NONE and target is not None and self.rng.random() < 0.5:
            await self._crash_leader_once_moved(partition)

    async def _crash_leader_once_moved(self, partition: int) -> None:
        """The partition's leader dies as soon as its move has completed: the ISR the move left
        (its new replicas only, the removed ones stopped) must already hold every acknowledged
        write, so the next leader is elected from replicas that were in sync when the answer
        went out, not ones the move added and the ISR named too early."""
        key = (self.sim.topic, partition)
        deadline = trio.current_time() + 30
        while True:
            controller = self._controller()
            if controller is not None and key not in self.sim.brokers[controller].broker.cluster.controller.reassignments:
                break
            if trio.current_time() > deadline:
                return
            await trio.sleep(0.05)
        leader = self._leader_of(partition)
        if leader is None or leader not in self._live() or self._power_lost or len(self._live()) < 2:
            return
        self.sim.trace("fault", f"crash p{partition}'s leader {leader} once its move completed")
        await self._down_for(leader, self.rng.uniform(0.5, 4), how="crash of")
