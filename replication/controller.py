"""The controller: the one broker, elected through ZooKeeper's ``/controller``, that decides
partition leadership for the cluster (Kafka 0.10.2's KafkaController, on trio).

It reads the cluster's state from ZooKeeper when it takes over (bumping ``/controller_epoch``),
then reacts to one event at a time: brokers registering or vanishing, topics created or marked
for deletion, ISR changes reported by leaders, controlled shutdown requests. Each decision
(replica assignment, leader election) is a pure function of ``assignment`` / ``election``;
the controller writes the new partition state to ZooKeeper with a conditional update, then
tells the brokers with LeaderAndIsr, StopReplica and UpdateMetadata, stamped with its epoch so
that a deposed controller's requests are refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping

import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.channel import PLAINTEXT, BrokerChannel, ChannelSecurity, Dialer, dial_address
from minikafka.replication.controller_channel import BrokerSender
from minikafka.replication.election import controlled_shutdown_leader, offline_leader, preferred_leader
from minikafka.replication.kafka_zk import BrokerInfo, KafkaZk, LeaderIsr, broker_path
from minikafka.replication.zookeeper import BadVersion, NodeExists, ZooKeeperError
from minikafka.storage.partition_metadata import new_topic_id

logger = logging.getLogger(__name__)

NO_LEADER = -1
# UpdateMetadata's leader for a partition being deleted (Kafka's LeaderDuringDelete).
LEADER_DURING_DELETE = -2
# v3: every listener of every broker, with its name, so each broker answers Metadata with the
# addresses of the listener a client used.
UPDATE_METADATA_VERSION = 3
_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass
class PartitionState:
    leader_isr: LeaderIsr
    zk_version: int


@dataclass
class Reassignment:
    """A partition being moved to ``target`` from ``origin`` (KIP-455's ReplicaAssignment):
    meanwhile its replicas are both, the target's first, so that the target's preferred
    replica is the partition's."""
    target: list[int]
    origin: list[int]

    @property
    def replicas(self) -> list[int]:
        return self.target + [r for r in self.origin if r not in self.target]

    @property
    def adding(self) -> list[int]:
        return [r for r in self.target if r not in self.origin]

    @property
    def removing(self) -> list[int]:
        return [r for r in self.origin if r not in self.target]


@dataclass(frozen=True)
class ControllerSettings:
    unclean_leader_election: bool
    socket_timeout_ms: int
    dial: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    inter_broker_listener: str = "PLAINTEXT"
    security: ChannelSecurity = PLAINTEXT  # how the other brokers' inter-broker listener is secured
    dialer: Dialer | None = None  # replaces TCP (the simulator's network)


class Controller:
    """Runs while this broker is the controller; ``events`` carries what to react to."""

    def __init__(self, node_id: int, zk: KafkaZk, settings: ControllerSettings) -> None:
        self.node_id = node_id
        self.zk = zk
        self.settings = settings
        self.epoch = 0
        self.live: dict[int, tuple[BrokerInfo, int]] = {}   # id -> (info, its registration's czxid)
        self.assignments: dict[str, dict[int, list[int]]] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        # Partitions being reassigned (AlterPartitionReassignments), kept in their topic znodes.
        self.reassignments: dict[tuple[str, int], Reassignment] = {}
        self.shutting_down: set[int] = set()
        # One per live broker's registration, opened and closed with it (see controller_channel).
        self._senders: dict[int, BrokerSender] = {}
        # broker -> its demotion not answered within the bound, while still unanswered: the
        # requests queued behind it cannot be answered sooner, so they are not awaited.
        self._overdue: dict[int, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        self._queue, self._events = trio.open_memory_channel[tuple](1000)
        self.active = False

    # ------------------------------------------------------------------ event intake

    def notify(self, kind: str, reply: trio.MemorySendChannel | None = None, **args) -> None:
        """Queue an event: "brokers", "broker_modified", "topics", "deletions", "isr_changes",
        "controlled_shutdown" (broker_id=...), "preferred_leader" (topic=..., partition=...),
        "preferred_elections" (the /admin/preferred_replica_election request)."""
        try:
            self._queue.send_nowait((kind, reply, args))
        except trio.WouldBlock:
            logger.error("controller event queue full: dropping %s", kind)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Until cancelled, or a ZooKeeperError (raised as itself, for the caller to give up
        control: out of the senders' nursery it would come wrapped in an ExceptionGroup)."""
        lost: ZooKeeperError | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    await self._take_over()
                    self.active = True
                    task_status.started()
                    async for kind, reply, args in self._events:
                        try:
                            result = await self._handle(kind, **args)
                        except ControllerError as exc:
                            result = exc
                        if reply is not None:
                            reply.send_nowait(result)
                except ZooKeeperError as exc:
                    lost = exc
                nursery.cancel_scope.cancel()
            if lost is not None:
                raise lost
        finally:
            self.active = False
            for sender in self._senders.values():
                await sender.aclose()

    async def _handle(self, kind: str, **args):
        if kind == "brokers":
            return await self._on_broker_change()
        if kind == "broker_modified":
            return await self._on_broker_modified()
        if kind == "topics":
            return await self._on_topic_change()
        if kind == "deletions":
            return await self._on_deletions()
        if kind == "isr_changes":
            return await self._on_isr_changes()
        if kind == "controlled_shutdown":
            return await self._on_controlled_shutdown(args["broker_id"])
        if kind == "preferred_leader":
            return await self._on_preferred_leader(args["topic"], args["partition"], args.get("to"))
        if kind == "preferred_elections":
            return await self._on_preferred_elections()
        if kind == "elect_leaders":
            return {key: await self._on_elect_leader(*key, args["unclean"]) for key in args["partitions"]}
        if kind == "partitions_added":
            return await self._on_partitions_added(args["topic"])
        if kind == "alter_reassignments":
            return {key: await self._reassign(key, target) for key, target in args["partitions"].items()}
        raise ValueError(f"unknown controller event {kind!r}")

    # ------------------------------------------------------------------ take over

    async def _take_over(self) -> None:
        self.epoch = await self.zk.increment_controller_epoch()
        logger.info("broker %d is the controller (controller epoch %d)", self.node_id, self.epoch)
        self.live = await self.zk.broker_registrations()
        for broker_id in self.live:
            self._open_sender(broker_id)
            await self.zk.zk.watch_data(broker_path(broker_id))
        for topic in await self.zk.topics():
            assignment, adding, removing = await self.zk.topic_replicas(topic) or ({}, {}, {})
            if assignment:
                self.assignments[topic] = assignment
                self.topic_configs[topic] = await self.zk.topic_config(topic)
                await self._give_topic_id(topic)
                self._resume_reassignments(topic, adding, removing)
        await self._load_states()
        await self._bring_online(list(self.states) + self._partitions_without_state())
        await self._drop_unavailable_from_isrs(list(self.states))
        await self._on_deletions()
        # Kafka's controller also finishes an election request left by its predecessor.
        await self._on_preferred_elections()
        # Every live broker gets its partitions' states (a broker ignores those it already
        # has at that leader epoch) and the whole metadata.
        self._send_leader_and_isr(list(self.assignment_keys()), set(self.live))
        self._send_update_metadata(set(self.live))
        await self._complete_reassignments(list(self.reassignments))

    async def _load_states(self) -> None:
        self.states = {}
        for topic, assignment in self.assignments.items():
            for partition in assignment:
                found = await self.zk.partition_state(topic, partition)
                if found is not None:
                    self.states[(topic, partition)] = PartitionState(*found)

    def assignment_keys(self):
        for topic, assignment in self.assignments.items():
            for partition in sorted(assignment):
                yield topic, partition

    def _partitions_without_state(self) -> list[tuple[str, int]]:
        return [key for key in self.assignment_keys() if key not in self.states]

    # ------------------------------------------------------------------ leadership

    def _live_ids(self) -> set[int]:
        """The brokers that lead, follow and are sent LeaderAndIsr: not those shutting down
        (Kafka's liveBrokerIds), which a LeaderAndIsr would make fetch again (see
        _on_controlled_shutdown)."""
        return set(self.live) - self.shutting_down

    def _unclean(self, topic: str) -> bool:
        value = self.topic_configs.get(topic, {}).get("unclean.leader.election.enable")
        return self.settings.unclean_leader_election if value is None else value == "true"

    async def _bring_online(self, keys: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """New partitions get a first leader; partitions whose leader is gone get a new one.
        Returns the partitions whose state changed."""
        changed = []
        live = self._live_ids()
        for key in keys:
            topic, partition = key
            assigned = self.assignments[topic][partition]
            state = self.states.get(key)
            if state is None:
                live_replicas = [r for r in assigned if r in live]
                leader = live_replicas[0] if live_replicas else NO_LEADER
                new = LeaderIsr(leader=leader, leader_epoch=0, isr=live_replicas or list(assigned),
                                controller_epoch=self.epoch)
                try:
                    version = await self.zk.create_partition_state(topic, partition, new)
                except NodeExists:
                    found = await self.zk.partition_state(topic, partition)
                    if found is not None:
                        self.states[key] = PartitionState(*found)
                    continue
                self.states[key] = PartitionState(new, version)
                changed.append(key)
                continue
            if state.leader_isr.leader in live:
                continue

            def elect(current: LeaderIsr, topic=topic, partition=partition, assigned=assigned):
                if current.leader in live:
                    return None
                elected = offline_leader(assigned, current.isr, live, unclean=self._unclean(topic))
                if elected is None:
                    if current.leader == NO_LEADER:
                        return None
                    logger.warning("%s-%d is offline: no live replica in ISR %s", topic, partition, current.isr)
                    return NO_LEADER, current.isr
                if elected[0] not in current.isr:
                    logger.warning("%s-%d: unclean leader election of broker %d (ISR was %s)",
                                   topic, partition, elected[0], current.isr)
                return elected

            if await self._update_state(key, elect):
                changed.append(key)
        return changed

    async def _update_state(self, key: tuple[str, int],
                            decide: Callable[[LeaderIsr], tuple[int, list[int]] | None]) -> bool:
        """Write the partition's next state, ``decide(current) -> (leader, isr)`` in a new leader
        epoch (None: nothing to change), conditional on the version last read; True if written.

        On BadVersion someone else wrote it since (a leader changing its own ISR, whose
        notification has not been handled yet): the partition's state is read again and
        ``decide`` runs on it, as Kafka's state machines retry each partition with the
        refreshed leaderIsrAndControllerEpoch. Re-running the whole event instead would lose
        what the event itself already changed (the brokers it found dead, the partitions it
        already moved)."""
        topic, partition = key
        while True:
            state = self.states[key]
            decided = decide(state.leader_isr)
            if decided is None:
                return False
            leader, isr = decided
            new = LeaderIsr(leader=leader, leader_epoch=state.leader_isr.leader_epoch + 1, isr=list(isr),
                            controller_epoch=self.epoch)
            try:
                version = await self.zk.update_partition_state(topic, partition, new, state.zk_version)
            except BadVersion:
                found = await self.zk.partition_state(topic, partition)
                if found is None:
                    return False  # deleted meanwhile
                self.states[key] = PartitionState(*found)
                if found[0].controller_epoch > self.epoch:
                    # Written by a newer controller: this one is deposed and must not overwrite
                    # it (Kafka's state change fails for the partition, logged, the rest go on).
                    logger.warning("%s-%d: state written by controller epoch %d, newer than ours (%d)",
                                   topic, partition, found[0].controller_epoch, self.epoch)
                    return False
                logger.info("%s-%d: state changed in ZooKeeper (now %s); deciding again", topic, partition, found[0])
                continue
            self.states[key] = PartitionState(new, version)
            logger.info("%s-%d: leader %d, leader epoch %d, ISR %s", topic, partition, leader,
                        new.leader_epoch, list(isr))
            return True

    # ------------------------------------------------------------------ events

    async def _on_broker_change(self) -> None:
        now_live = await self.zk.broker_registrations()
        gone = {b for b, (_, czxid) in self.live.items() if now_live.get(b, (None, None))[1] != czxid}
        came = {b for b, (_, czxid) in now_live.items() if self.live.get(b, (None, None))[1] != czxid}
        self.shutting_down &= set(now_live)
        self.shutting_down -= came
        if gone:
            logger.info("controller: broker(s) %s left", sorted(gone))
        if came:
            logger.info("controller: broker(s) %s joined", sorted(came))
        for broker_id in gone:
            await self._senders.pop(broker_id).aclose()
            self._overdue.pop(broker_id, None)
            if broker_id not in came:
                await self.zk.zk.unwatch(broker_path(broker_id))
        # Brokers that bounced (see below) while leading: alive, they are demoted first.
        bounced_leaders = gone & came & {s.leader_isr.leader for s in self.states.values()}
        changed = []
        if gone:
            # A broker that re-registered (restarted before its old session expired) counts as
            # failed first: it may have lost an unflushed tail, so its leaderships move to the
            # ISR and it rejoins as a follower that truncates by epoch.
            self.live = {b: v for b, v in now_live.items() if b not in gone}
            changed += await self._on_brokers_failed(gone)
        self.live = now_live
        for broker_id in came:
            self._open_sender(broker_id)
            await self.zk.zk.watch_data(broker_path(broker_id))
        # Partitions the returning brokers can now lead, and everything they replicate.
        changed += await self._bring_online([k for k in self.assignment_keys()
                                             if self.states.get(k) is None
                                             or self.states[k].leader_isr.leader == NO_LEADER])
        self._send_update_metadata(set(self.live))
        told = {}
        if came:
            theirs = [k for k in self.assignment_keys() if set(self.assignments[k[0]][k[1]]) & came]
            told = self._send_leader_and_isr(theirs, came)
        if changed:
            # A bounced leader hears that it follows before its successors hear that they lead
            # (see _move_leaderships).
            await self._await_demotion({b: answered for b, answered in told.items() if b in bounced_leaders})
            self._send_leader_and_isr(changed, self._live_ids() - came)
        # A reassignment waiting for its target's leader to come back, or for a new leader.
        await self._complete_reassignments(list(self.reassignments))

    async def _on_broker_modified(self) -> None:
        """Kafka 2.x's BrokerModifications: a broker that rewrote its registration with other
        endpoints (a dynamic advertised.listeners) is named at its new address by every broker.
        The controller's connection to it stays as it was opened, as Kafka's channel manager
        keeps a broker's first address: it is re-dialled when the broker registers anew."""
        now_live = await self.zk.broker_registrations()
        modified = {b for b, (info, czxid) in now_live.items()
                    if b in self.live and self.live[b][1] == czxid and self.live[b][0].endpoints != info.endpoints}
        if not modified:
            return  # registered anew (the broker-change event's) or rewritten alike
        logger.info("controller: broker(s) %s changed their endpoints", sorted(modified))
        for broker_id in modified:
            self.live[broker_id] = now_live[broker_id]
        self._send_update_metadata(set(self.live))

    async def _on_brokers_failed(self, dead: set[int]) -> list[tuple[str, int]]:
        changed = await self._bring_online([k for k, s in self.states.items() if s.leader_isr.leader in dead])

        def without_dead(current: LeaderIsr):
            if current.leader in dead or current.leader == NO_LEADER:
                return None
            isr = [r for r in current.isr if r not in dead]
            return None if isr == current.isr else (current.leader, isr)

        for key in list(self.states):
            if key not in changed and await self._update_state(key, without_dead):
                changed.append(key)
        return changed

    async def _on_topic_change(self) -> None:
        new_keys = []
        for topic in await self.zk.topics():
            if topic in self.assignments:
                continue
            assignment = await self.zk.topic_assignment(topic)
            if not assignment:
                continue
            self.assignments[topic] = assignment
            self.topic_configs[topic] = await self.zk.topic_config(topic)
            await self._give_topic_id(topic)
            new_keys += [(topic, p) for p in sorted(assignment)]
        await self._start_partitions(new_keys)

    async def _give_topic_id(self, topic: str) -> None:
        """A topic from before topic ids gets one, before any replica is told of it (Kafka 2.8's
        controller, ``setTopicIds``); brokers create and check their replicas' ids from it."""
        proposed = new_topic_id()
        if await self.zk.give_topic_id(topic, proposed) == proposed:
            logger.info("controller: topic %r, created before topic ids, now has id %s", topic, proposed)

    async def _on_partitions_added(self, topic: str) -> None:
        """CreatePartitions wrote a larger assignment of ``topic`` (Kafka's
        PartitionModificationsListener, onNewPartitionCreation): its new partitions start."""
        assignment = await self.zk.topic_assignment(topic)
        known = self.assignments.get(topic)
        if not assignment or known is None:
            return
        new_keys = [(topic, p) for p in sorted(assignment) if p not in known]
        self.assignments[topic] = assignment
        await self._start_partitions(new_keys)

    async def _start_partitions(self, new_keys: list[tuple[str, int]]) -> None:
        """First leaders for new partitions, and every broker told."""
        if not new_keys:
            return
        changed = await self._bring_online(new_keys)
        self._send_leader_and_isr(new_keys, self._live_ids())
        self._send_update_metadata(set(self.live), keys=changed or new_keys)

    async def _on_deletions(self) -> None:
        for topic in await self.zk.topics_to_delete():
            assignment = self.assignments.pop(topic, None) or {}
            keys = [(topic, p) for p in sorted(assignment)]
            replicas_of = {k: self.assignments_of(assignment, k[1]) for k in keys}
            for broker_id in set(self.live):
                mine = [k for k in keys if broker_id in replicas_of[k]]
                if mine:
                    self._stop_replicas(broker_id, mine, True)
            for key in keys:
                self.states.pop(key, None)
                self.reassignments.pop(key, None)
            self.topic_configs.pop(topic, None)
            await self.zk.delete_topic_nodes(topic)
            self._send_update_metadata(set(self.live), deleted=keys)
            logger.info("controller: deleted topic %r", topic)

    @staticmethod
    def assignments_of(assignment: dict[int, list[int]], partition: int) -> list[int]:
        return assignment.get(partition, [])

    async def _on_isr_changes(self) -> None:
        keys = [k for k in await self.zk.take_isr_change_notifications() if k in self.states]
        for key in keys:
            found = await self.zk.partition_state(*key)
            if found is not None:
                self.states[key] = PartitionState(*found)
        shrunk = await self._drop_unavailable_from_isrs(keys)
        if keys:
            self._send_update_metadata(set(self.live), keys=keys)
        if shrunk:
            self._send_leader_and_isr(shrunk, self._live_ids())
        # Kafka 2.4+'s PartitionReassignmentIsrChangeHandler: a target replica caught up.
        await self._complete_reassignments([k for k in keys if k in self.reassignments])

    async def _drop_unavailable_from_isrs(self, keys: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Take brokers that are shutting down or not registered out of these partitions' ISRs
        (those with a live leader); returns the partitions changed.

        A leader may have taken back into its ISR a broker that is shutting down (demoted to
        a follower, it fetched until it stopped) or has gone since, after the controller
        handled its going: acks=all would wait for it until the leader drops it again. The
        controller knows, and takes it out, as Kafka's controller since KIP-841 refuses such
        an ISR (minikafka's leaders write their ISR themselves, as 0.10.2's do, so it is
        undone instead): when it hears of the ISR change, and when it takes over (the change
        may have come while there was no controller)."""
        live = self._live_ids()

        def without_unavailable(current: LeaderIsr):
            isr = [r for r in current.isr if r in live]
            return None if current.leader not in live or isr == current.isr else (current.leader, isr)

        return [key for key in keys if await self._update_state(key, without_unavailable)]

    async def _on_controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        """Move ``broker_id``'s leaderships away, stop its replicas and take it out of every
        ISR; answers the replicated partitions it still leads (no other replica could take them).

        The moved partitions' new state goes to ``broker_id`` too, as Kafka 0.10.2's
        ControlledShutdownLeaderSelector sends it to every assigned replica live or shutting
        down: until it has stopped, the old leader is a follower that refuses produces, not a
        leader acknowledging writes the new leader never gets. Unlike 0.10.2 it goes there
        first, and the new leaders are told once it has answered (see _move_leaderships).

        Then, as Kafka's shutdownBroker does for the partitions the broker follows, it is sent
        StopReplica (its fetchers stop) before it leaves their ISRs. Unlike 0.10.2 this
        includes the partitions just moved away from it: a stopping broker that fetched as
        their follower would be taken back into the ISR by the new leader, which this
        controller undoes (see _drop_unavailable_from_isrs) with a new epoch, and again, until
        the broker is gone. Requests to it queue in order: demoted first, then stopped."""
        if broker_id not in self.live:
            raise ControllerError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        self.shutting_down.add(broker_id)
        live = self._live_ids()
        moved = []
        followed = []

        def move_away(current: LeaderIsr, assigned: list[int]):
            if current.leader != broker_id:
                return None
            return controlled_shutdown_leader(assigned, current.isr, live, {broker_id})

        def leave_isr(current: LeaderIsr):
            if current.leader in (NO_LEADER, broker_id) or broker_id not in current.isr:
                return None
            return current.leader, [r for r in current.isr if r != broker_id]

        for key, state in list(self.states.items()):
            assigned = self.assignments[key[0]][key[1]]
            # As Kafka, a partition with one replica is left alone: it cannot move.
            if broker_id not in assigned or len(assigned) == 1:
                continue
            if state.leader_isr.leader != broker_id:
                followed.append(key)
            elif await self._update_state(key, lambda c, a=assigned: move_away(c, a)):
                moved.append(key)
        if moved:
            await self._move_leaderships(moved, broker_id, live)
        if moved or followed:
            self._stop_replicas(broker_id, moved + followed, False)
        shrunk = [key for key in followed if await self._update_state(key, leave_isr)]
        if shrunk:
            self._send_leader_and_isr(shrunk, live)
        self._send_update_metadata(set(self.live))
        # As Kafka, only replicated partitions count: one with a single replica cannot move.
        return [k for k, s in self.states.items()
                if s.leader_isr.leader == broker_id and len(self.assignments[k[0]][k[1]]) > 1]

    async def _reread_state(self, key: tuple[str, int]) -> PartitionState | None:
        """The partition's state as ZooKeeper has it now, kept (None: not a partition here).

        An election asked for by an administrator decides on it, as Kafka 0.10.2's
        electLeaderForPartition reads the state before electing: a leader may have changed its
        ISR since the controller last heard (its notification queued behind this event), and
        the cached ISR would refuse a replica that is in sync. The events that elect because a
        broker went away keep deciding on the cache: a stale ISR there only fails the
        conditional write, which re-reads (see _update_state)."""
        if key not in self.states:
            return None
        found = await self.zk.partition_state(*key)
        if found is not None:
            self.states[key] = PartitionState(*found)
        return self.states[key]

    async def _on_preferred_leader(self, topic: str, partition: int, to: int | None) -> ErrorCode:
        """Make ``to`` (default: the preferred replica) the leader, if it is live and in the ISR."""
        key = (topic, partition)
        state = await self._reread_state(key)
        if state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assigned = list(self.assignments[topic][partition])
        if to is not None:
            if to not in assigned:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT
            assigned.remove(to)
            assigned.insert(0, to)
        if state.leader_isr.leader == assigned[0]:
            return ErrorCode.NONE
        replaced = []  # the leader each decision took the partition from

        def elect(current: LeaderIsr):
            if current.leader == assigned[0]:
                return None
            replaced.append(current.leader)
            return preferred_leader(assigned, current.isr, self._live_ids())

        if not await self._update_state(key, elect):
            return (ErrorCode.NONE if self.states[key].leader_isr.leader == assigned[0]
                    else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
        old_leader = replaced[-1]
        await self._move_leaderships([key], old_leader, self._live_ids())
        if old_leader in self.shutting_down:
            # Demoted, a broker in controlled shutdown would fetch as a follower and rejoin
            # the ISR: it is stopped too, as _on_controlled_shutdown stops the ones it moves.
            self._stop_replicas(old_leader, [key], False)
        self._send_update_metadata(set(self.live), keys=[key])
        return ErrorCode.NONE

    async def _on_elect_leader(self, topic: str, partition: int, unclean: bool) -> ErrorCode:
        """ElectLeaders for one partition (Kafka 2.8's PreferredReplicaPartitionLeaderElection
        and, with ``unclean``, its offline-partition election with unclean election allowed):
        ELECTION_NOT_NEEDED where the leader already is what the election would give."""
        key = (topic, partition)
        state = await self._reread_state(key)
        if state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assigned = self.assignments[topic][partition]
        if not unclean:
            if state.leader_isr.leader == assigned[0]:
                return ErrorCode.ELECTION_NOT_NEEDED
            return await self._on_preferred_leader(topic, partition, None)
        live = self._live_ids()
        if state.leader_isr.leader in live:
            return ErrorCode.ELECTION_NOT_NEEDED

        def elect(current: LeaderIsr):
            if current.leader in live:
                return None
            return offline_leader(assigned, current.isr, live, unclean=True)

        if not await self._update_state(key, elect):
            return (ErrorCode.NONE if self.states[key].leader_isr.leader in live
                    else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        self._send_leader_and_isr([key], live)
        self._send_update_metadata(set(self.live), keys=[key])
        return ErrorCode.NONE

    async def _on_preferred_elections(self) -> dict[tuple[str, int], ErrorCode]:
        """Run the elections /admin/preferred_replica_election asks for, then delete it (so the
        next request can be written); one partition's failure does not stop the others.

        Deleted only once every election is written and its leaders told, as Kafka 0.10.2's
        onPreferredReplicaElection removes it in its finally: whoever wrote the request takes
        its disappearance for the answer (kafka-preferred-replica-election.sh, the test
        fixture's move_leader), and a controller that loses control half-way leaves it for its
        successor to finish. Deleted first (before), a reader saw the old leader still there.
        Only the request read is deleted: the event that the deletion itself fires finds none,
        and must not delete the next request, written after it looked (that lost the fixture's
        elections in CI, "the controller did not elect broker 2")."""
        results = {}
        elections, version = await self.zk.preferred_replica_election()
        for topic, partition, leader in elections:
            code = await self._on_preferred_leader(topic, partition, leader)
            if code != ErrorCode.NONE:
                logger.warning("controller: preferred replica election of %s-%d%s: %s", topic, partition,
                               "" if leader is None else f" to broker {leader}", code.name)
            results[(topic, partition)] = code
        if version is not None:
            await self.zk.delete_preferred_replica_election(version)
        return results

    # ------------------------------------------------------------------ reassignment (KIP-455)

    def _resume_reassignments(self, topic: str, adding: dict[int, list[int]], removing: dict[int, list[int]]) -> None:
        """The reassignments a topic znode records (a predecessor's, or one this controller was
        running before it lost control): target = replicas - removing, origin = replicas -
        adding, as Kafka 2.8's initializePartitionReassignments reads them."""
        for partition, replicas in self.assignments[topic].items():
            added, removed = adding.get(partition, []), removing.get(partition, [])
            if added or removed:
                self.reassignments[(topic, partition)] = Reassignment(
                    target=[r for r in replicas if r not in removed], origin=[r for r in replicas if r not in added])

    async def _reassign(self, key: tuple[str, int], target: list[int] | None) -> tuple[ErrorCode, str | None]:
        """AlterPartitionReassignments for one partition (Kafka 2.8's onPartitionReassignment,
        phase A): the partition's replicas become target + origin, recorded with what is added
        and removed in the topic znode, in a new leader epoch that every replica hears of, so
        the added ones start fetching; it completes (_complete_reassignments) once every target
        replica is in the ISR. ``target`` None cancels a reassignment in progress: the
        partition goes back to its origin the same way (the added replicas are removed once the
        origin is in sync, as Kafka's cancellation). Returns (error, message)."""
        topic, partition = key
        current = self.assignments.get(topic, {}).get(partition)
        if current is None or key not in self.states:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{partition}"
        ongoing = self.reassignments.get(key)
        if target is None:
            if ongoing is None:
                return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {topic}-{partition} is in progress"
            target = ongoing.origin
        elif not target:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "the replica list is empty"
        elif len(set(target)) != len(target):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"the replica list {target} names a broker twice"
        elif any(b < 0 for b in target):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"the replica list {target} names a negative broker id"
        elif not set(target) <= set(self.live):
            # Kafka 2.8 checks liveOrShuttingDownBrokerIds, as here (self.live keeps the latter).
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"brokers {sorted(set(target) - set(self.live))} of {target} are not alive")
        origin = ongoing.origin if ongoing is not None else list(current)
        reassignment = Reassignment(target=list(target), origin=origin)
        if ongoing is None and reassignment.target == current:
            return ErrorCode.NONE, None
        # Replicas a move in progress was adding that neither the new target nor the origin
        # keeps (a cancel, or a new target): Kafka 2.8's updateCurrentReassignment stops them
        # and deletes their copies at once. Before that they leave the leadership and the ISR.
        dropped = [b for b in current if b not in reassignment.replicas]
        if dropped:
            refused = await self._hand_over_from(key, dropped, reassignment.replicas)
            if refused is not None:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, refused
        self.reassignments[key] = reassignment
        self.assignments[topic][partition] = reassignment.replicas
        await self._write_reassignments(topic)
        logger.info("controller: reassigning %s-%d to %s (from %s; adding %s, removing %s)", topic, partition,
                    reassignment.target, origin, reassignment.adding, reassignment.removing)
        # A new epoch (Kafka's updateLeaderEpochAndSendRequest): replicas that already hold the
        # partition take the new replica set; a partition without a leader keeps its state,
        # which the added replicas get as it is.
        await self._update_state(key, lambda c: None if c.leader == NO_LEADER else
                                 (c.leader, [b for b in c.isr if b not in dropped]))
        live = self._live_ids()
        self._send_leader_and_isr([key], live)
        self._delete_replicas(key, dropped)
        self._send_update_metadata(set(self.live), keys=[key])
        await self._complete_reassignments([key])
        return ErrorCode.NONE, None

    async def _hand_over_from(self, key: tuple[str, int], dropped: list[int], kept: list[int]) -> str | None:
        """Before the replicas ``dropped`` leave the partition: a leader among them hands over to
        a live in-sync replica of ``kept`` (demoted first, see _move_leaderships). Returns why
        they cannot leave, if so: they are the only in-sync replicas (every copy kept may lack
        acknowledged writes), or lead with no in-sync replica alive to take over. Kafka 2.8
        takes them out all the same, leaving the partition without a leader, or with none but
        an unclean one; minikafka refuses the request instead, as it never loses an
        acknowledged write."""
        state = await self._reread_state(key)
        live = self._live_ids()
        replaced = []

        def heir_of(current: LeaderIsr) -> int | None:
            return next((b for b in kept if b in current.isr and b in live), None)

        def lead_from_kept(current: LeaderIsr):
            heir = heir_of(current)
            if current.leader not in dropped or heir is None:
                return None
            replaced.append(current.leader)
            return heir, current.isr

        if state.leader_isr.isr and not any(b in kept for b in state.leader_isr.isr):
            return f"replicas {dropped} are the only in-sync ones: the replicas kept may lack acknowledged writes"
        if await self._update_state(key, lead_from_kept):
            await self._move_leaderships([key], replaced[-1], live)
        if self.states[key].leader_isr.leader in dropped:
            return f"replicas {dropped} include the leader and no in-sync replica kept is alive to take over"
        return None

    async def _complete_reassignments(self, keys: list[tuple[str, int]]) -> None:
        """Phase B of Kafka 2.8's onPartitionReassignment for each of ``keys`` whose target
        replicas are all in the ISR: a leader outside the target (or not alive) hands over to
        the first live target replica in the ISR — demoted first when alive (see
        _move_leaderships) —; then, in one more epoch, the partition's replicas are the target
        and the removed replicas leave its ISR; they are stopped and their copies deleted, the
        topic znode no longer records the move, and every broker is told.

        Each state write re-checks, on the state it is written over, that the target is still
        all in the ISR (a leader may have shrunk it since): otherwise the move waits for the
        next ISR change. A removed replica is never taken out while a target replica could
        still be missing acknowledged writes: every ISR member holds everything below the high
        watermark."""
        for key in keys:
            reassignment = self.reassignments.get(key)
            state = self.states.get(key)
            if reassignment is None or state is None or not set(reassignment.target) <= set(state.leader_isr.isr):
                continue
            await self._complete_reassignment(key, reassignment)

    async def _complete_reassignment(self, key: tuple[str, int], reassignment: Reassignment) -> None:
        topic, partition = key
        target = reassignment.target
        live = self._live_ids()
        replaced = []

        def lead_from_target(current: LeaderIsr):
            if not set(target) <= set(current.isr) or (current.leader in target and current.leader in live):
                return None
            heir = next((b for b in target if b in current.isr and b in live), None)
            if heir is None:
                return None
            replaced.append(current.leader)
            return heir, current.isr

        if await self._update_state(key, lead_from_target):
            # The old leader still holds a replica (the partition's replicas are target + origin
            # until the next step): it hears first that it follows.
            await self._move_leaderships([key], replaced[-1], live)
        leader = self.states[key].leader_isr.leader
        if leader not in target or leader not in live:
            return  # no target replica can lead yet
        self.assignments[topic][partition] = list(target)

        def shrink_to_target(current: LeaderIsr):
            if not set(target) <= set(current.isr) or current.leader not in target:
                return None
            return current.leader, [b for b in current.isr if b in target]

        if not await self._update_state(key, shrink_to_target):
            self.assignments[topic][partition] = reassignment.replicas
            return
        del self.reassignments[key]
        self._send_leader_and_isr([key], live)
        self._delete_replicas(key, reassignment.removing)
        await self._write_reassignments(topic)
        self._send_update_metadata(set(self.live), keys=[key])
        logger.info("controller: %s-%d reassigned to %s", topic, partition, target)

    async def _write_reassignments(self, topic: str) -> None:
        """The topic znode with its partitions' replicas and the moves in progress."""
        moving = {p: r for (t, p), r in self.reassignments.items() if t == topic}
        await self.zk.set_reassignment(topic, self.assignments[topic],
                                       {p: r.adding for p, r in moving.items() if r.adding},
                                       {p: r.removing for p, r in moving.items() if r.removing})

    def reassignments_of(self, keys: list[tuple[str, int]] | None) -> dict[tuple[str, int], Reassignment]:
        """ListPartitionReassignments: those in progress (of ``keys``; None: all)."""
        if keys is None:
            return dict(self.reassignments)
        return {key: self.reassignments[key] for key in keys if key in self.reassignments}

    async def _move_leaderships(self, keys: list[tuple[str, int]], old_leader: int, brokers: set[int]) -> None:
        """Send the new state of ``keys``, whose leadership the controller just took from
        ``old_leader``, to ``old_leader`` first and, once it has answered, to ``brokers``.

        Kafka 0.10.2 sends them all at once, so that for a moment both lead: the new leader
        takes writes in the new epoch while the old one, its LeaderAndIsr still on the way,
        acknowledges acks=1 writes in the old epoch that the new leader never fetches and the
        old one truncates when it follows. An old leader that is alive answers in a round trip,
        and only then do its successor, and through the UpdateMetadata sent after, the clients,
        hear of the change. (Kafka's later fencing, KIP-320, closes it differently, in the
        brokers; this controller keeps 0.10.2's.)

        The paths that move leaderships from a live broker come here: controlled shutdown and
        preferred-leader elections (ElectLeaders too); a broker that bounced (registered again
        before its old session ended) is demoted first in _on_broker_change the same way. The
        others take leaderships only from brokers that are not registered (_bring_online,
        unclean elections) or keep the leader (ISR changes), so there is no one to demote first.

        The wait is bounded by controller.socket.timeout.ms, the time the controller's channel
        gives one attempt at a request. An old leader that has not answered by then is dead,
        paused or cut off: one that died cannot acknowledge anything, and one cut off cannot be
        told however long the controller waits (it stays a zombie until it hears, as in Kafka
        0.10.2), while the partition is unavailable and every other controller event waits.
        Its death cannot be awaited instead: the controller hears of it in the broker-change
        event, which this one holds back."""
        if old_leader in self.live:
            await self._await_demotion(self._send_leader_and_isr(keys, {old_leader}))
        self._send_leader_and_isr(keys, brokers - {old_leader})

    async def _await_demotion(self, answered: dict[int, trio.Event]) -> None:
        """Until each old leader has answered the request that demotes it, or for
        controller.socket.timeout.ms (see _move_leaderships); not for one whose earlier
        demotion is overdue (an ElectLeaders of many partitions it led would wait out the bound
        for each)."""
        waiting = {b: event for b, event in answered.items() if b not in self._overdue or self._overdue[b].is_set()}
        with trio.move_on_after(self.settings.socket_timeout_ms / 1000):
            for event in waiting.values():
                await event.wait()
        for broker_id, event in waiting.items():
            if not event.is_set():
                self._overdue[broker_id] = event
                logger.warning("controller: broker %d did not answer its demotion in %d ms; telling the new "
                               "leaders all the same", broker_id, self.settings.socket_timeout_ms)

    # ------------------------------------------------------------------ requests to brokers

    def _open_sender(self, broker_id: int) -> None:
        """Start delivering to ``broker_id``'s registration in ``live``, at its address."""
        assert self._nursery is not None
        host, port = dial_address(broker_id, *self.live[broker_id][0].address(self.settings.inter_broker_listener),
                                  self.settings.dial)
        channel = BrokerChannel(host, port, client_id=f"controller-{self.node_id}",
                                timeout_s=self.settings.socket_timeout_ms / 1000,
                                security=self.settings.security, dialer=self.settings.dialer)
        self._senders[broker_id] = BrokerSender(broker_id, channel, self._nursery)

    def _partition_state_entry(self, key: tuple[str, int], leader: int | None = None) -> dict:
        state = self.states[key]
        current = state.leader_isr
        return {"topic_name": key[0], "partition_index": key[1], "controller_epoch": current.controller_epoch,
                "leader": current.leader if leader is None else leader, "leader_epoch": current.leader_epoch,
                "isr": list(current.isr), "zk_version": state.zk_version,
                "replicas": list(self.assignments[key[0]][key[1]])}

    def _live_broker_entries(self) -> list[dict]:
        """UpdateMetadata v3's live brokers: every listener, named."""
        return [{"id": b, "rack": info.rack,
                 "endpoints": [{"host": host, "port": port, "listener": name,
                                "security_protocol": _PROTOCOL_IDS[info.protocol(name)]}
                               for name, (host, port) in info.endpoints.items()]}
                for b, (info, _) in sorted(self.live.items())]

    def _send_leader_and_isr(self, keys: list[tuple[str, int]], brokers: set[int]) -> dict[int, trio.Event]:
        """Returns each broker's event, set once it answered its request."""
        answered = {}
        for broker_id in brokers:
            mine = [k for k in keys if k in self.states and broker_id in self.assignments[k[0]][k[1]]]
            if not mine:
                continue
            leaders = {self.states[k].leader_isr.leader for k in mine}
            body = {"controller_id": self.node_id, "controller_epoch": self.epoch,
                    "ungrouped_partition_states": [self._partition_state_entry(k) for k in mine],
                    "live_leaders": [{"broker_id": b, "host_name": address[0], "port": address[1]}
                                     for b in sorted(leaders) if b in self.live
                                     for address in [self.live[b][0].address(self.settings.inter_broker_listener)]]}
            sent = self._send(broker_id, ApiKey.LEADER_AND_ISR, 0, body)
            if sent is not None:
                answered[broker_id] = sent
        return answered

    def _send_update_metadata(self, brokers: set[int], *, keys: list[tuple[str, int]] | None = None,
                              deleted: list[tuple[str, int]] = ()) -> None:
        keys = list(self.states) if keys is None else [k for k in keys if k in self.states]
        states = [self._partition_state_entry(k) for k in keys]
        states += [{"topic_name": t, "partition_index": p, "controller_epoch": self.epoch, "leader": LEADER_DURING_DELETE,
                    "leader_epoch": 0, "isr": [], "zk_version": 0, "replicas": []} for t, p in deleted]
        body = {"controller_id": self.node_id, "controller_epoch": self.epoch,
                "ungrouped_partition_states": states, "live_brokers": self._live_broker_entries()}
        for broker_id in brokers:
            self._send(broker_id, ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION, body)

    def _delete_replicas(self, key: tuple[str, int], brokers: list[int]) -> None:
        """Stop the replicas of ``key`` that a move took off ``brokers`` and delete their copies
        (a broker not registered deletes its copy at its next UpdateMetadata instead)."""
        for broker_id in brokers:
            if broker_id in self.live:
                self._stop_replicas(broker_id, [key], True)

    def _stop_replicas(self, broker_id: int, keys: list[tuple[str, int]], delete: bool) -> None:
        body = {"controller_id": self.node_id, "controller_epoch": self.epoch, "delete_partitions": delete,
                "ungrouped_partitions": [{"topic_name": t, "partition_index": p} for t, p in keys]}
        self._send(broker_id, ApiKey.STOP_REPLICA, 0, body)

    def _send(self, broker_id: int, api_key: ApiKey, version: int, body: dict) -> trio.Event | None:
        sender = self._senders.get(broker_id)
        if sender is None:
            # Not registered: a broker that registers gets its whole state then (Kafka's
            # sendRequest drops it too).
            logger.info("controller: not sending %s to broker %d: it is not registered", api_key.name, broker_id)
            return None
        return sender.send(api_key, version, body)


class ControllerError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
