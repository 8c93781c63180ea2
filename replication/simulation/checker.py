"""What the simulator checks, during a run and after it.

During the run:

* a replica never truncates its log below its high watermark (``Log.truncate_to`` is observed),
  and a leader's high watermark never goes down while it stays leader (sampled);
* a leader epoch has one leader accepting writes;
* a broker no fault touched accepts no write in a leader epoch once another broker has taken
  up a newer epoch's leadership of the partition (answered its LeaderAndIsr): a live leader
  whose leadership the controller moves (controlled shutdown, preferred leader, a broker that
  bounced) is demoted before its successor is told, so the two never lead at once (the old
  one's acks=1 writes would be truncated when it follows);
* a broker that ZooKeeper no longer names as leader stops accepting writes within
  ``ZOMBIE_BOUND_S``, unless a fault touched it (it cannot be told: Kafka 0.10.2 then keeps a
  zombie leader too);
* a broker whose controlled shutdown the controller handled is sent no LeaderAndIsr of a newer
  leader epoch by that controller: it was demoted and stopped, and made to follow again it fetches,
  rejoins the ISR and is taken out again in a new epoch, in a loop until it exits;
* ``LIVENESS_BOUND_S`` after the faults heal, with the crashed brokers still down, a partition
  with a live ISR member is led by a live broker that knows it.

After the run, with every broker back: every partition has a live leader; every acknowledged
acks=all value is in its log at the offset it was acknowledged at; a value a consumer read was
written, and is still at the offset it was read at; replicas match the leader below their high
watermark; and no value is stored twice because its first attempt was answered
NOT_LEADER_FOR_PARTITION by a broker that stayed the leader (defect 5's duplicate). The
transactional workload's own checks are ``transactions.TxnChecker``'s.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

import trio

from minikafka.broker.groups.coordinator import GROUP_METADATA_TOPIC
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.entries import iter_entries
from minikafka.protocol.records import iter_records
from minikafka.replication.kafka_zk import decode_leader_isr
from minikafka.replication.replica_manager import LEADER
from minikafka.replication.simulation.group_checker import GroupChecker
from minikafka.replication.simulation.transactions import TxnChecker
from minikafka.replication.simulation.workload import TOPIC

# The controller tells a replaced leader within a few round trips (2 ms each without faults).
ZOMBIE_BOUND_S = 0.2
# A dead leader's session expires after 4 s; then one election and one LeaderAndIsr.
LIVENESS_BOUND_S = 8.0
HW_SAMPLE_S = 0.05


@dataclass
class LeaderState:
    at: float
    leader: int
    epoch: int
    isr: list[int]


class Checker:
    def __init__(self, sim) -> None:
        self.sim = sim
        self.violations: list[str] = []
        self.sent_values: set[bytes] = set()
        self.attempts = []
        self.consumed_records: list[tuple[int, int, bytes, int]] = []
        self.states: dict[int, list[LeaderState]] = defaultdict(list)
        self.epoch_writers: dict[tuple[int, int], set[int]] = defaultdict(set)
        # partition -> (leader epoch, broker, when it answered the LeaderAndIsr making it leader)
        self.took_lead: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
        # node -> list of (start, end) of faults that touched it; "*" for everyone's;
        # ("slow", node) while the controller's requests reached it late (Faults._slow_demotion).
        self.disturbed: dict[object, list[tuple[float, float]]] = defaultdict(list)
        # broker id -> (its incarnation, the controller epoch, each partition's leader epoch)
        # when its controlled shutdown was answered.
        self.stopping: dict[int, tuple[int, int, dict[int, int]]] = {}
        self._reported: set[tuple] = set()
        self.groups = GroupChecker(self)
        self.transactions = TxnChecker(self)

    def violation(self, key: tuple, message: str) -> None:
        if key in self._reported:
            return
        self._reported.add(key)
        line = f"t={trio.current_time():.3f} VIOLATION {message}"
        self.violations.append(line)
        self.sim.trace("check", line)

    # ------------------------------------------------------------------ observations

    def zk_changed(self, path: str, node, session_id: int) -> None:
        if node is None or not path.endswith("/state"):
            return
        for topic, states, name in ((self.sim.topic, self.states, "p"),
                                    (GROUP_METADATA_TOPIC, self.groups.states, "offsets p")):
            prefix = f"/brokers/topics/{topic}/partitions/"
            if path.startswith(prefix):
                break
        else:
            return
        partition = int(path[len(prefix):].split("/")[0])
        state = decode_leader_isr(topic, partition, node.data)
        previous = states[partition][-1] if states[partition] else None
        if previous is not None and (previous.leader, previous.epoch) == (state.leader, state.leader_epoch):
            # In one leader epoch only the leader writes the ISR, one change at a time: each
            # write adds followers that caught up or drops laggards, never both at once.
            before, after = set(previous.isr), set(state.isr)
            if not (before <= after or after <= before):
                self.violation(("isr-step", name, partition, state.leader_epoch),
                               f"{name}{partition} epoch {state.leader_epoch}: ISR {previous.isr} written as "
                               f"{list(state.isr)}, adding and dropping at once")
        states[partition].append(LeaderState(trio.current_time(), state.leader, state.leader_epoch, list(state.isr)))
        self.sim.trace("zk", f"{name}{partition} leader {state.leader} epoch {state.leader_epoch} isr {state.isr}")
        if topic == self.sim.topic:
            self.sim.faults.isr_written(partition, session_id)

    def disturb(self, nodes, start: float, end: float) -> None:
        for node in nodes:
            self.disturbed[node].append((start, end))

    def _disturbed(self, node, start: float, end: float) -> bool:
        return any(s <= end and e >= start for key in (node, "*") for s, e in self.disturbed.get(key, ()))

    def sent(self, value: bytes) -> None:
        self.sent_values.add(value)

    def consumed(self, partition: int, offset: int, value: bytes, broker: int) -> None:
        self.consumed_records.append((partition, offset, value, broker))
        if value not in self.sent_values:
            self.violation(("phantom", value), f"p{partition}@{offset}: read {value!r}, which was never written")

    def shutdown_answered(self, broker, done: bool) -> None:
        self.sim.trace("broker", f"{broker.name} controlled shutdown {'complete' if done else 'incomplete'}")
        # Only a controller that handled the request knows: one the request never reached
        # (a cut link) rightly goes on telling the broker what it follows.
        controller = next((b.broker.cluster.controller for b in self.sim.brokers.values()
                           if b.alive and b.broker.cluster.controller is not None), None)
        if controller is not None and broker.node_id in controller.shutting_down:
            epochs = {(self.sim.topic, p): states[-1].epoch for p, states in self.states.items() if states}
            epochs.update({(GROUP_METADATA_TOPIC, p): states[-1].epoch
                           for p, states in self.groups.states.items() if states})
            self.stopping[broker.node_id] = (broker.incarnation, controller.epoch, epochs)

    def answered(self, broker, request, body) -> None:
        """A broker's answer, as it leaves: successful writes are checked against ZooKeeper."""
        if request.api_key == ApiKey.LEADER_AND_ISR:
            self._check_stopping_follows(broker, request.body)
            self._took_lead(broker, request.body, body)
        if request.api_key != ApiKey.PRODUCE:
            return
        now = trio.current_time()
        replicas = broker.broker.cluster.replicas.replicas
        for topic in body["responses"]:  # the Produce handler answers with plain dicts
            name = topic["name"]
            for answer in topic["partition_responses"]:
                if answer["error_code"] != ErrorCode.NONE:
                    continue
                partition = answer["index"]
                replica = replicas.get((name, partition))
                if replica is None:
                    continue
                writers = self.epoch_writers[(partition, replica.leader_epoch)]
                writers.add(broker.node_id)
                if len(writers) > 1:
                    self.violation(("epoch", partition, replica.leader_epoch),
                                   f"p{partition} epoch {replica.leader_epoch}: brokers {sorted(writers)} both accepted writes")
                self._check_superseded(broker.node_id, partition, replica.leader_epoch, request.body.acks, now)
                self.check_deposed(broker.node_id, self.states[partition], f"p{partition}", "accepted a write", now)

    def _took_lead(self, broker, request, body) -> None:
        refused = {(e["topic_name"], e["partition_index"]) for e in body["partition_errors"] if e["error_code"]}
        if body["error_code"]:
            return
        for state in request.ungrouped_partition_states:
            key = (state.topic_name, state.partition_index)
            if key[0] == self.sim.topic and state.leader == broker.node_id and key not in refused:
                self.took_lead[key[1]].append((state.leader_epoch, broker.node_id, trio.current_time()))

    def _check_superseded(self, node_id: int, partition: int, epoch: int, acks: int, now: float) -> None:
        newer = [(at, e, b) for e, b, at in self.took_lead[partition] if e > epoch and b != node_id]
        if not newer:
            return
        at, newer_epoch, successor = min(newer)
        if not self._disturbed(node_id, at, now):
            self.violation(("superseded", node_id, partition, epoch),
                           f"p{partition}: broker {node_id} acknowledged an acks={acks} write at epoch {epoch} "
                           f"{now - at:.4f} s after broker {successor} took up epoch {newer_epoch}'s leadership, "
                           "with no fault keeping it from being demoted first")

    def _check_stopping_follows(self, broker, request) -> None:
        incarnation, controller_epoch, epochs = self.stopping.get(broker.node_id, (None, None, {}))
        if incarnation != broker.incarnation or request.controller_epoch != controller_epoch:
            return
        for state in request.ungrouped_partition_states:
            key = (state.topic_name, state.partition_index)
            if state.leader_epoch > epochs.get(key, state.leader_epoch):
                self.violation(("stopping-follows", broker.node_id, *key),
                               f"{key[0]}-{key[1]}: {broker.name}, its controlled shutdown answered at "
                               f"epoch {epochs[key]}, is sent LeaderAndIsr of epoch "
                               f"{state.leader_epoch} (leader {state.leader})")

    def check_deposed(self, node_id: int, states: list[LeaderState], what: str, act: str, now: float) -> None:
        """``node_id`` did what only the leader of a partition (``what``) does (``act``);
        ZooKeeper named its leaders as ``states``: a violation if it was deposed long enough
        ago to know."""
        if not states or states[-1].leader == node_id:
            return
        moved_at = states[-1].at
        for state in reversed(states):
            if state.leader == node_id:
                break
            moved_at = state.at
        if now - moved_at > ZOMBIE_BOUND_S and not self._disturbed(node_id, moved_at, now) \
                and not self._disturbed(("slow", node_id), moved_at, now):
            self.violation(("zombie", node_id, what, moved_at),
                           f"{what}: broker {node_id} {act} {now - moved_at:.2f} s after "
                           f"ZooKeeper made {states[-1].leader} leader, with no fault keeping it from knowing")

    def truncating(self, log, offset: int) -> None:
        if offset < log.high_watermark:
            node = log.dir.parent.name
            self.violation(("truncate", node, log.topic, log.partition, offset),
                           f"{node} {partition_name(log.topic, log.partition)}: truncating to {offset}, below its high watermark "
                           f"{log.high_watermark}")

    async def watch_broker(self, sim_broker) -> None:
        """Sample the leaders' high watermarks of one incarnation."""
        last: dict[tuple[str, int], tuple[object, int]] = {}
        replicas = sim_broker.broker.cluster.replicas
        while True:
            for key, replica in list(replicas.replicas.items()):
                if replica.role != LEADER:
                    last.pop(key, None)
                    continue
                hw = replica.log.high_watermark
                before = last.get(key)
                if before is not None and hw < before[1]:
                    self.violation(("hw", sim_broker.name, key, hw),
                                   f"{sim_broker.name} {partition_name(*key)}: leader's high watermark went from "
                                   f"{before[1]} to {hw}")
                last[key] = (replica, hw)
            await trio.sleep(HW_SAMPLE_S)

    def check_leaders(self) -> None:
        """After the faults healed (the dead brokers still dead): a partition with a live ISR
        member is led by a live broker that knows it leads at ZooKeeper's epoch."""
        for partition, states in sorted(self.states.items()):
            state = states[-1]
            leader = self.sim.brokers.get(state.leader)
            if leader is not None and leader.alive:
                replica = leader.broker.cluster.replicas.replicas.get((self.sim.topic, partition))
                if replica is not None and replica.role == LEADER and replica.leader_epoch >= state.epoch:
                    continue
                self.violation(("unled", partition), f"p{partition}: ZooKeeper names {state.leader} leader at epoch "
                                                     f"{state.epoch}, which it does not know "
                                                     f"{LIVENESS_BOUND_S:g} s after the faults healed")
            elif any(self.sim.brokers[b].alive for b in state.isr if b in self.sim.brokers):
                self.violation(("unled", partition), f"p{partition}: leader {state.leader} is dead "
                                                     f"{LIVENESS_BOUND_S:g} s after the faults healed, while ISR "
                                                     f"{state.isr} has live members")

    # ------------------------------------------------------------------ after the run

    def final_check(self) -> None:
        logs: dict[int, dict[int, bytes]] = {}
        for partition in range(self.sim.partitions):
            state = self.states[partition][-1] if self.states[partition] else None
            leader = self.sim.brokers.get(state.leader) if state else None
            replica = leader.broker.cluster.replicas.replicas.get((self.sim.topic, partition)) if leader and leader.alive else None
            if replica is None or replica.role != LEADER:
                self.violation(("final-leader", partition), f"p{partition}: no live leader after the faults healed "
                                                             f"(ZooKeeper: {state})")
                continue
            logs[partition] = leader_log = read_log(replica.log)
            followers = []
            for other in self.sim.brokers.values():
                theirs = other.broker.cluster.replicas.replicas.get((self.sim.topic, partition)) if other.alive else None
                if theirs is None or other is leader:
                    continue
                followers.append((other.name, theirs))
                hw = theirs.log.high_watermark
                mine = read_log(theirs.log)
                for offset in range(hw):
                    if mine.get(offset) != leader_log.get(offset):
                        self.violation(("diverged", other.name, partition),
                                       f"p{partition}: {other.name} holds {mine.get(offset)!r} at {offset} below its "
                                       f"high watermark {hw}, the leader {leader.name} {leader_log.get(offset)!r}")
                        break
            self.transactions.final_check(partition, replica, leader_log, followers)
        self._check_no_stray_replicas()
        where: dict[int, dict[bytes, list[int]]] = {}
        for partition, log in logs.items():
            index = where[partition] = defaultdict(list)
            for offset, value in log.items():
                index[value].append(offset)
        for attempt in self.attempts:
            if attempt.acks != -1 or attempt.error != ErrorCode.NONE or attempt.partition not in logs:
                continue
            offsets = where[attempt.partition].get(attempt.value, [])
            if attempt.offset not in offsets:
                self.violation(("lost", attempt.value),
                               f"p{attempt.partition}: acknowledged {attempt.value.decode()} @{attempt.offset} "
                               + (f"is at {offsets} instead" if offsets else "is lost"))
        for partition, offset, value, broker in self.consumed_records:
            if partition in logs and logs[partition].get(offset) != value:
                self.violation(("read-lost", value), f"p{partition}@{offset}: {value!r} read from broker {broker} "
                                                     f"is now {logs[partition].get(offset)!r}")
        self._check_not_leader_duplicates(where)

    def _check_no_stray_replicas(self) -> None:
        """A live broker holds replicas only of partitions assigned to it, neither following
        nor on disk: one a move dropped (the move cancelled, or a new target given) was told to
        stop and delete its copy, and one not told (down when it was removed, or its
        StopReplica lost with its controller) deleted the copy on the controller's next
        UpdateMetadata."""
        controller = next((b.broker.cluster.controller for b in self.sim.brokers.values()
                           if b.alive and b.broker.cluster.controller is not None), None)
        if controller is None:
            return
        for partition in range(self.sim.partitions):
            assigned = controller.assignments.get(self.sim.topic, {}).get(partition, [])
            for other in self.sim.brokers.values():
                if not other.alive or other.node_id in assigned:
                    continue
                if (self.sim.topic, partition) in other.broker.cluster.replicas.replicas:
                    self.violation(("stray", other.name, partition),
                                   f"p{partition}: {other.name} still replicates it, not among its replicas {assigned}")
                elif other.broker.log_manager.get_log(self.sim.topic, partition) is not None:
                    self.violation(("stray-copy", other.name, partition),
                                   f"p{partition}: {other.name} still holds a copy, not among its replicas {assigned}")

    def _check_not_leader_duplicates(self, where) -> None:
        for attempt in self.attempts:
            # Only an answer that came after an append (it names the offset) can have stored
            # the value: one refused before it (-1, a leader whose LeaderAndIsr is still on its
            # way) stored nothing, whatever another attempt of the same value did.
            if attempt.error != ErrorCode.NOT_LEADER_FOR_PARTITION or attempt.offset < 0 \
                    or attempt.partition not in where:
                continue
            if len(where[attempt.partition].get(attempt.value, [])) < 2:
                continue
            states = self.states[attempt.partition]
            times = [s.at for s in states]
            first = bisect.bisect_right(times, attempt.sent_at) - 1
            last = bisect.bisect_right(times, attempt.answered_at) - 1
            if first >= 0 and all(s.leader == attempt.broker for s in states[first:last + 1]):
                self.violation(("duplicate", attempt.value),
                               f"p{attempt.partition}: {attempt.value.decode()} stored twice; broker {attempt.broker} "
                               "answered NOT_LEADER_FOR_PARTITION while ZooKeeper kept it leader")


def partition_name(topic: str, partition: int) -> str:
    """``p1`` for the workload's topic, ``__consumer_offsets-1`` for any other."""
    return f"p{partition}" if topic == TOPIC else f"{topic}-{partition}"


def read_log(log) -> dict[int, bytes]:
    records: dict[int, bytes] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        # Entries, not records, say how far a read went: a transaction marker holds none.
        last = max((entry.offset for entry in iter_entries(data)), default=offset - 1)
        if last < offset:
            break
        for record in iter_records(data):
            if record.offset >= offset:
                records[record.offset] = record.value
        offset = last + 1
    return records
