"""The partitions this broker replicates in a cluster: which it leads, which it follows.

Kafka's ReplicaManager, on trio. The controller's LeaderAndIsr makes a replica a leader
(it records ``(new epoch, log end)`` in the leader epoch cache before taking a write and
tracks its followers in a :class:`~replication.partition_state.LeaderState`) or a follower
(handed to the :class:`~replication.fetcher.ReplicaFetcher` of its leader, which truncates it by
epoch first). Leaders move the high watermark as followers fetch, write ISR changes to
ZooKeeper with a conditional update, and release ``acks=-1`` produces once the high watermark
passes them.

The decisions (high watermark, ISR membership, truncation point) are the pure functions of
``partition_state`` and ``truncation``; this module applies them to logs and ZooKeeper.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from minikafka.protocol.errors import ErrorCode
from minikafka.replication.metadata_cache import BrokerEndpoint, MetadataCache, PartitionInfo
from minikafka.replication.partition_state import LeaderState, enough_replicas
from minikafka.replication.truncation import epochs_reached, truncates_on_leader_and_isr
from minikafka.replication.kafka_zk import KafkaZk, LeaderIsr
from minikafka.replication.zookeeper import BadVersion, ZooKeeperError
from minikafka.storage.clock import Clock
from minikafka.storage.log import Log
from minikafka.storage.log_manager import LogManager

logger = logging.getLogger(__name__)

LEADER = "leader"
FOLLOWER = "follower"


@dataclass(frozen=True)
class PartitionStateUpdate:
    """One partition's state in a LeaderAndIsr request."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    zk_version: int
    replicas: list[int]


class NotLeader(Exception):
    """This broker cannot serve the partition as leader; ``code`` says why."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)


@dataclass
class Replica:
    """This broker's replica of one partition."""

    topic: str
    partition: int
    log: Log
    role: str
    leader_id: int
    leader_epoch: int
    assigned: list[int]
    leader_state: LeaderState | None = None
    # Set (and replaced) whenever the high watermark or the leadership changes: acks=-1
    # produces wait on it.
    changed: trio.Event = field(default_factory=trio.Event)
    # Follower: the leader epochs still to record as the log end passes their starts.
    pending_epochs: list[tuple[int, int]] = field(default_factory=list)
    # Follower: to truncate against a new leader before fetching; or, for a new epoch of the
    # same leader, only to learn from it where the epochs it does not know yet start.
    needs_truncation: bool = False
    needs_epochs: bool = False
    # Follower: the leader's high watermark less our log end after the last answer applied
    # (Kafka's fetcher lag); 0 counts as in sync for the replication throttle, None: not yet.
    fetch_lag: int | None = None

    def signal(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


class ReplicaManager:
    def __init__(self, *, node_id: int, log_manager: LogManager, clock: Clock, zk: KafkaZk,
                 metadata: MetadataCache, replica_lag_time_max_ms: int,
                 on_readable: Callable[[str, int], None],
                 on_role_change: Callable[[str, int, "Replica | None"], None] | None = None) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.clock = clock
        self.zk = zk
        self.metadata = metadata
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # Wakes consumers' long polls: a consumer reads below the high watermark, so "new
        # data" for it is a high watermark that moved, not an append.
        self.on_readable = on_readable
        # Kafka's onLeadershipChange: told when this broker becomes leader or follower of a
        # partition (a new leader, not a new epoch of the same one) or stops replicating it
        # (None), so state kept beside a log (the group coordinator's) follows the log.
        self.on_role_change = on_role_change
        self.controller_epoch = 0
        self.replicas: dict[tuple[str, int], Replica] = {}
        self._fetchers = None
        self._fetchers_ready = trio.Event()
        self._isr_writes = trio.Lock()

    # ------------------------------------------------------------------ controller requests

    def stale_controller(self, controller_epoch: int) -> bool:
        if controller_epoch < self.controller_epoch:
            return True
        self.controller_epoch = controller_epoch
        return False

    @property
    def fetchers(self):
        """The FetcherManager, set by the broker once it joins the cluster (it needs its nursery)."""
        return self._fetchers

    @fetchers.setter
    def fetchers(self, manager) -> None:
        self._fetchers = manager
        if manager is not None:
            self._fetchers_ready.set()

    async def become_leader_or_follower(self, controller_epoch: int, states: list[PartitionStateUpdate],
                                        live_leaders: list[BrokerEndpoint]) -> tuple[ErrorCode, list[tuple[str, int, ErrorCode]]]:
        """Apply a LeaderAndIsr request."""
        if self.stale_controller(controller_epoch):
            return ErrorCode.STALE_CONTROLLER_EPOCH, []
        # A restarted broker listens a moment before it has fetchers, and a controller that has
        # not yet seen its old session end may already send it LeaderAndIsr: applied then, a
        # follower would be made with nothing fetching for it, and the same epoch sent again
        # later is ignored. Held until the fetchers exist, it is applied as it should be.
        await self._fetchers_ready.wait()
        live = {b.node_id: b for b in live_leaders}
        results = []
        topic_ids: dict[str, str | None] = {}  # read from ZooKeeper once per topic of the request
        for state in states:
            key = (state.topic, state.partition)
            replica = self.replicas.get(key)
            if replica is not None and state.leader_epoch <= replica.leader_epoch:
                logger.info("%s-%d: ignoring LeaderAndIsr with leader epoch %d (current %d)",
                            state.topic, state.partition, state.leader_epoch, replica.leader_epoch)
                results.append((state.topic, state.partition, ErrorCode.STALE_CONTROLLER_EPOCH))
                continue
            if self.node_id not in state.replicas:
                results.append((state.topic, state.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if state.leader == self.node_id and self.node_id not in state.isr:
                # No controller elects a leader outside the ISR (election.py); the high
                # watermark and acks=all are counted over an ISR that holds the leader. Refused
                # before anything is applied; the request's other partitions still are.
                logger.error("%s-%d: refusing LeaderAndIsr at epoch %d making this broker leader outside "
                             "the ISR %s", state.topic, state.partition, state.leader_epoch, list(state.isr))
                results.append((state.topic, state.partition, ErrorCode.INVALID_REQUEST))
                continue
            try:
                log = await self._local_log(state.topic, state.partition, topic_ids)
            except (OSError, ValueError, ZooKeeperError) as exc:
                logger.error("%s-%d: cannot create the replica: %s", state.topic, state.partition, exc)
                results.append((state.topic, state.partition, ErrorCode.KAFKA_STORAGE_ERROR))
                continue
            self.metadata.update_partition(state.topic, state.partition, _partition_info(state))
            if state.leader == self.node_id:
                self._make_leader(state, log, replica)
            else:
                self._make_follower(state, log, replica, live.get(state.leader))
            results.append((state.topic, state.partition, ErrorCode.NONE))
        return ErrorCode.NONE, results

    async def _local_log(self, topic: str, partition: int, topic_ids: dict[str, str | None]) -> Log:
        """The partition's log, created with the topic's id and configs as ZooKeeper holds them.

        The LeaderAndIsr of the 0.10.2 protocol spoken here carries no topic id (Kafka 2.8's v5
        does), so the replica reads it from the topic znode the controller wrote it to. A local
        log holding another id is taken to be from before ids were one per topic across the
        cluster (each broker made its own) and takes the cluster's, where Kafka 2.8, which never
        had such logs, answers INCONSISTENT_TOPIC_ID. (It may also be a deleted topic's replica
        left on a broker that was down during the deletion, which the controller does not wait
        for; such a log was taken for the new topic before ids too.)"""
        if topic not in topic_ids:
            topic_ids[topic] = await self.zk.topic_id(topic)
        topic_id = topic_ids[topic]
        log = self.log_manager.get_log(topic, partition)
        if log is not None:
            if topic_id is not None and log.topic_id != topic_id:
                logger.warning("%s: local partitions hold topic id %s, the cluster's is %s: taking the cluster's",
                               topic, log.topic_id, topic_id)
                await trio.to_thread.run_sync(self.log_manager.adopt_topic_id, topic, topic_id)
            return log
        overrides = await self.zk.topic_config(topic)
        return await trio.to_thread.run_sync(self.log_manager.create_log, topic, partition, overrides, topic_id)

    def _make_leader(self, state, log: Log, old: Replica | None) -> None:
        if self.fetchers is not None:
            self.fetchers.remove(state.topic, state.partition)
        log.leader_epoch_cache.assign(state.leader_epoch, log.log_end_offset)
        now = self.clock.time_ms()
        if old is not None and old.role == LEADER and old.leader_state is not None:
            # Still the leader (a new epoch for an ISR change): the same replica, updated in
            # place, so the followers' positions stay and a produce waiting on it is answered
            # by the high watermark, as Kafka's delayed produce fails only when the broker no
            # longer leads.
            replica = old
            replica.leader_epoch = state.leader_epoch
            replica.assigned = list(state.replicas)
            replica.leader_state.leader_and_isr(assigned=list(state.replicas), isr=list(state.isr),
                                                leader_epoch=state.leader_epoch, zk_version=state.zk_version,
                                                leader_end_offset=log.log_end_offset, now_ms=now)
        else:
            leader_state = LeaderState(
                leader_id=self.node_id, assigned=list(state.replicas), isr=list(state.isr),
                leader_epoch=state.leader_epoch, zk_version=state.zk_version,
                leader_end_offset=log.log_end_offset, high_watermark=log.high_watermark, now_ms=now,
                lag_time_max_ms=self.replica_lag_time_max_ms)
            replica = Replica(state.topic, state.partition, log, LEADER, self.node_id, state.leader_epoch,
                              list(state.replicas), leader_state)
            self._install(replica, old)
        # A shrunk ISR may let the high watermark pass what waited for the dropped followers.
        self._set_high_watermark(replica, replica.leader_state.leader_appended(log.log_end_offset))
        logger.info("%s-%d: leader at epoch %d from offset %d, ISR %s, high watermark %d",
                    state.topic, state.partition, state.leader_epoch, log.log_end_offset,
                    list(state.isr), log.high_watermark)

    def _make_follower(self, state, log: Log, old: Replica | None, leader: BrokerEndpoint | None) -> None:
        following = old.leader_id if old is not None and old.role == FOLLOWER else None
        following_epoch = old.leader_epoch if old is not None else -1
        if not truncates_on_leader_and_isr(following, following_epoch, state.leader, state.leader_epoch):
            # The next epoch of the leader this replica follows: its log is still a prefix of the
            # leader's, so it keeps it and its fetcher (Kafka's makeFollower returns false for an
            # unchanged leader, and makeFollowers then neither truncates nor restarts the
            # fetcher). Only the start of the new epoch is to learn, from the leader.
            old.leader_epoch = state.leader_epoch
            old.assigned = list(state.replicas)
            old.needs_epochs = True
            if self.fetchers is not None and leader is not None:
                # Back in its fetcher if the leader's new epoch had fenced it out; a no-op if
                # it is fetching.
                self.fetchers.add(old, leader)
            old.signal()
            logger.info("%s-%d: still following broker %d, now at epoch %d", state.topic, state.partition,
                        state.leader, state.leader_epoch)
            return
        replica = Replica(state.topic, state.partition, log, FOLLOWER, state.leader, state.leader_epoch,
                          list(state.replicas), needs_truncation=True)
        self._install(replica, old)
        if self.fetchers is not None:
            self.fetchers.remove(state.topic, state.partition)
            if leader is not None:
                self.fetchers.add(replica, leader)
        logger.info("%s-%d: follower of broker %d at epoch %d", state.topic, state.partition,
                    state.leader, state.leader_epoch)

    def _install(self, replica: Replica, old: Replica | None) -> None:
        self.replicas[(replica.topic, replica.partition)] = replica
        if old is not None:
            old.signal()  # produces waiting on the old role find it gone
        self.on_readable(replica.topic, replica.partition)
        if old is None or (old.role, old.leader_id) != (replica.role, replica.leader_id):
            self._role_changed(replica.topic, replica.partition, replica)

    def _role_changed(self, topic: str, partition: int, replica: Replica | None) -> None:
        if self.on_role_change is None:
            return
        try:
            self.on_role_change(topic, partition, replica)
        except Exception:  # the listener's failure must not fail the controller's request
            logger.exception("%s-%d: role change listener failed", topic, partition)

    async def stop_replica(self, controller_epoch: int, delete: bool,
                           partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[tuple[str, int, ErrorCode]]]:
        if self.stale_controller(controller_epoch):
            return ErrorCode.STALE_CONTROLLER_EPOCH, []
        results = []
        for topic, partition in partitions:
            if self.fetchers is not None:
                self.fetchers.remove(topic, partition)
            replica = self.replicas.pop((topic, partition), None)
            if replica is not None:
                replica.signal()
                self._role_changed(topic, partition, None)
            if delete:
                try:
                    await trio.to_thread.run_sync(self.log_manager.delete_log, topic, partition)
                except OSError as exc:
                    logger.error("%s-%d: cannot delete the replica: %s", topic, partition, exc)
                    results.append((topic, partition, ErrorCode.KAFKA_STORAGE_ERROR))
                    continue
                self.on_readable(topic, partition)
            results.append((topic, partition, ErrorCode.NONE))
        return ErrorCode.NONE, results

    # ------------------------------------------------------------------ leader side

    def leader_replica(self, topic: str, partition: int) -> Replica:
        """The replica if this broker leads the partition, else NotLeader with the code a
        client acts on: NOT_LEADER_FOR_PARTITION (refresh metadata and retry elsewhere),
        LEADER_NOT_AVAILABLE (an election is due), UNKNOWN_TOPIC_OR_PARTITION."""
        replica = self.replicas.get((topic, partition))
        if replica is not None and replica.role == LEADER:
            return replica
        info = self.metadata.partition(topic, partition)
        if info is None and replica is None:
            raise NotLeader(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist")
        if info is not None and info.leader < 0:
            raise NotLeader(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
        return _raise_not_leader(topic, partition, self.node_id)

    def check_enough_replicas(self, replica: Replica, min_isr: int) -> None:
        assert replica.leader_state is not None
        if not enough_replicas(replica.leader_state.isr, min_isr):
            raise NotLeader(ErrorCode.NOT_ENOUGH_REPLICAS,
                            f"{replica.topic}-{replica.partition}: ISR {replica.leader_state.isr} is smaller "
                            f"than min.insync.replicas {min_isr}")

    def leader_appended(self, replica: Replica) -> None:
        assert replica.leader_state is not None
        self._set_high_watermark(replica, replica.leader_state.leader_appended(replica.log.log_end_offset))

    async def wait_for_high_watermark(self, replica: Replica, offset: int, min_isr: int,
                                      timeout_s: float) -> ErrorCode:
        """acks=-1: wait until the high watermark passes ``offset`` (the last offset appended).
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when it got there with an ISR below ``min_isr``,
        REQUEST_TIMED_OUT after ``timeout_s``, NOT_LEADER_FOR_PARTITION when leadership moved."""
        with trio.move_on_after(timeout_s):
            while True:
                current = self.replicas.get((replica.topic, replica.partition))
                if current is not replica or replica.role != LEADER:
                    return ErrorCode.NOT_LEADER_FOR_PARTITION
                if replica.log.high_watermark > offset:
                    assert replica.leader_state is not None
                    if not enough_replicas(replica.leader_state.isr, min_isr):
                        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                    return ErrorCode.NONE
                await replica.changed.wait()
        return ErrorCode.REQUEST_TIMED_OUT

    async def follower_fetched(self, topic: str, partition: int, replica_id: int, fetch_offset: int) -> Replica:
        """A follower's fetch at ``fetch_offset`` (its log end): move the high watermark and
        let it back into the ISR once it has caught up."""
        replica = self.leader_replica(topic, partition)
        state = replica.leader_state
        assert state is not None
        if replica_id not in replica.assigned:
            raise NotLeader(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"broker {replica_id} is not a replica of {topic}-{partition}")
        outcome = state.follower_fetched(replica_id, fetch_offset, replica.log.log_end_offset,
                                         self.clock.time_ms())
        if outcome.hw_moved:
            self._set_high_watermark(replica, outcome.high_watermark)
        if outcome.expand_isr_to is not None:
            await self._write_isr(replica, "expand",
                                  lambda state: None if replica_id in state.isr else state.isr + [replica_id])
        return replica

    def _set_high_watermark(self, replica: Replica, high_watermark: int) -> None:
        if high_watermark != replica.log.high_watermark:
            replica.log.high_watermark = high_watermark
            self.on_readable(replica.topic, replica.partition)
        replica.signal()

    async def shrink_isrs(self) -> None:
        """Drop followers that have not caught up for replica.lag.time.max.ms (Kafka runs this
        every half of that)."""
        now = self.clock.time_ms()
        for replica in list(self.replicas.values()):
            if replica.role != LEADER or replica.leader_state is None:
                continue
            if replica.leader_state.shrink_isr(now, self.replica_lag_time_max_ms) is not None:
                await self._write_isr(replica, "shrink",
                                      lambda state: state.shrink_isr(now, self.replica_lag_time_max_ms))

    async def _write_isr(self, replica: Replica, why: str, new_isr) -> None:
        """Write the ISR ``new_isr(leader state)`` gives (None: no change) to ZooKeeper with a
        conditional update; on a version conflict the controller changed the state since (a new
        epoch follows), so the change is dropped. The new ISR is decided under the lock, from
        the ISR as the previous write left it, as Kafka decides under leaderIsrUpdateLock: two
        followers catching up at once were each added to the ISR as it was before either, and
        the second write dropped the first follower."""
        state = replica.leader_state
        assert state is not None
        async with self._isr_writes:
            # Shielded: an expansion runs inside a follower's Fetch, whose connection closes
            # when that follower stops. A cancel between ZooKeeper applying the write and this
            # state recording its version left the leader with a stale version, every later
            # ISR change refused (a restarted follower never back in the ISR). Each ZooKeeper
            # request is bounded by its own timeout.
            with trio.CancelScope(shield=True):
                if self.replicas.get((replica.topic, replica.partition)) is not replica or replica.leader_state is not state:
                    return
                isr = new_isr(state)
                if isr is None:
                    return
                new = LeaderIsr(leader=self.node_id, leader_epoch=state.leader_epoch, isr=list(isr),
                                controller_epoch=self.controller_epoch)
                try:
                    version = await self.zk.update_partition_state(replica.topic, replica.partition, new,
                                                                   state.zk_version)
                except BadVersion:
                    logger.info("%s-%d: ISR %s not written: the partition state changed in ZooKeeper",
                                replica.topic, replica.partition, isr)
                    return
                except ZooKeeperError as exc:
                    logger.warning("%s-%d: ISR %s not written: %s", replica.topic, replica.partition, isr, exc)
                    return
                old_isr = list(state.isr)
                self._set_high_watermark(replica, state.isr_written(list(isr), version))
                logger.info("%s-%d: ISR %s %s to %s", replica.topic, replica.partition, old_isr,
                            "expanded" if why == "expand" else "shrunk", list(isr))
                info = self.metadata.partition(replica.topic, replica.partition)
                if info is not None:
                    self.metadata.update_partition(replica.topic, replica.partition, PartitionInfo(
                        info.leader, info.leader_epoch, tuple(isr), info.replicas, version, info.controller_epoch))
                try:
                    await self.zk.notify_isr_change([(replica.topic, replica.partition)])
                except ZooKeeperError as exc:
                    logger.warning("ISR change notification not written: %s", exc)

    # ------------------------------------------------------------------ follower side

    def follower_appended(self, replica: Replica, leader_high_watermark: int) -> None:
        """After a fetched set was appended: record leader epochs the log end has reached and
        take the leader's high watermark (never above our own log end)."""
        log = replica.log
        end = log.log_end_offset
        if replica.pending_epochs:
            due, replica.pending_epochs = epochs_reached(replica.pending_epochs, end)
            for epoch, start in due:
                log.leader_epoch_cache.assign(epoch, start)
        high_watermark = min(leader_high_watermark, end)
        if high_watermark > log.high_watermark:
            log.high_watermark = high_watermark

    def partitions_led_by(self, node_id: int) -> list[tuple[str, int]]:
        return [key for key, r in self.replicas.items() if r.role == LEADER and r.leader_id == node_id]


def _partition_info(state) -> PartitionInfo:
    return PartitionInfo(state.leader, state.leader_epoch, tuple(state.isr), tuple(state.replicas),
                         state.zk_version, state.controller_epoch)


def _raise_not_leader(topic: str, partition: int, node_id: int):
    raise NotLeader(ErrorCode.NOT_LEADER_FOR_PARTITION,
                    f"broker {node_id} is not the leader of {topic}-{partition}")
