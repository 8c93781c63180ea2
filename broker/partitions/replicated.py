"""The partitions of a cluster member (``zookeeper.connect`` set): led where the controller says.

Reads and appends go through this broker's leader replica of the partition (Kafka's
ReplicaManager, ``replication.replica_manager``); a partition led elsewhere answers the error
that sends the client to its leader. Topics are created and deleted through ZooKeeper and the
controller (as Kafka 0.10.2's AdminUtils and KafkaApis did), Metadata answers from the
controller's UpdateMetadata, and the group coordinator serves the ``__consumer_offsets``
partitions led here. Imported only in a cluster, so a single broker never loads the
replication layer (nor kazoo).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable

import trio

from minikafka.broker.config import ConfigError
from minikafka.broker.dynamic_configs import DEFAULT_ENTITY
from minikafka.broker.groups.coordinator import GROUP_METADATA_TOPIC
from minikafka.broker.transactions.coordinator import TRANSACTION_STATE_TOPIC, state_topic_configs
from minikafka.broker.partitions import NO_EPOCH, AcksWait, Partitions, TopicError, leader_epoch_error
from minikafka.broker.security.acl import AclError, keyed, pattern_key
from minikafka.broker.security.inter_broker import channel_security
from minikafka.broker.server import INTERNAL_TOPICS
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.replication.assignment import InvalidReplicationFactor, assign_replicas
from minikafka.replication.cluster import ClusterMember, ClusterSettings
from minikafka.replication.controller import ControllerError
from minikafka.replication.fetcher import FetcherSettings
from minikafka.replication.kafka_zk import (ACL_CHANGE_PREFIX, ACL_CHANGES_PATH, CONFIG_CHANGE_PREFIX,
                                           CONFIG_CHANGES_PATH, EXTENDED_ACL_CHANGES_PATH, MalformedZnode,
                                           decode_config_change, delete_topic_path, extended_acl_change,
                                           literal_acl_change)
from minikafka.replication.metadata_cache import BrokerEndpoint, PartitionInfo
from minikafka.replication.notifications import NotificationListener
from minikafka.replication.quota import ReplicationQuota, is_throttled
from minikafka.replication.replica_manager import LEADER, NotLeader, PartitionStateUpdate, Replica
from minikafka.replication.zookeeper import NodeExists, ZooKeeperError
from minikafka.storage.config import AppendResult
from minikafka.storage.log import Log
from minikafka.storage.partition_metadata import new_topic_id
from minikafka.storage.producer_state import AppendOrigin
from minikafka.storage.types import UnknownTopic

logger = logging.getLogger(__name__)

# How often a CreateTopics or DeleteTopics waits for this broker's metadata to show the result.
_METADATA_POLL_S = 0.02
# Moving many leaderships means a ZooKeeper write and a LeaderAndIsr round per partition.
_CONTROLLED_SHUTDOWN_TIMEOUT_S = 30.0
# The leader of a partition whose topic is being deleted, in UpdateMetadata (Kafka's
# LeaderDuringDelete).
_LEADER_DURING_DELETE = -2
# Before UpdateMetadata v3 an endpoint is named by its security protocol, as Kafka 0.10.1 did.
_PROTOCOL_NAMES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


class ReplicatedPartitions(Partitions):
    """This broker's replicas of a cluster's partitions; the leader's log serves clients."""

    def __init__(self, broker) -> None:
        super().__init__(broker)
        self.default_replication_factor = broker.config.get("default.replication.factor")
        # Both read the broker's rate at each check: a dynamic config (KIP-73).
        def now_s() -> float:
            return self.broker.clock.time_ms() / 1000

        self.leader_quota = ReplicationQuota(lambda: self.broker.config.leader_replication_throttled_rate, now_s)
        self.follower_quota = ReplicationQuota(lambda: self.broker.config.follower_replication_throttled_rate, now_s)

    @property
    def cluster(self) -> ClusterMember:
        # The broker's, read at each use: the simulator replaces it after construction.
        return self.broker.cluster

    def cluster_member(self) -> ClusterMember:
        """This broker's membership of the cluster, as its settings describe it."""
        broker = self.broker
        config = broker.config
        session_timeout = config.get("zookeeper.session.timeout.ms")
        listener = config.inter_broker_listener()
        security = channel_security(config)
        settings = ClusterSettings(
            zookeeper_connect=config.zookeeper_connect,
            session_timeout_ms=session_timeout,
            connection_timeout_ms=config.get("zookeeper.connection.timeout.ms") or session_timeout,
            replica_lag_time_max_ms=config.get("replica.lag.time.max.ms"),
            unclean_leader_election=config.get("unclean.leader.election.enable"),
            fetcher=FetcherSettings(
                wait_max_ms=config.get("replica.fetch.wait.max.ms"), min_bytes=config.get("replica.fetch.min.bytes"),
                max_bytes=config.get("replica.fetch.max.bytes"),
                response_max_bytes=config.get("replica.fetch.response.max.bytes"),
                backoff_ms=config.get("replica.fetch.backoff.ms"),
                socket_timeout_ms=config.get("controller.socket.timeout.ms"), dial=config.test_broker_dial,
                security=security, snapshot_trimmed_topics=INTERNAL_TOPICS, quota=self.follower_quota),
            controller_socket_timeout_ms=config.get("controller.socket.timeout.ms"),
            hw_checkpoint_interval_ms=config.get("replica.high.watermark.checkpoint.interval.ms"),
            controlled_shutdown_enable=config.get("controlled.shutdown.enable"),
            controlled_shutdown_max_retries=config.get("controlled.shutdown.max.retries"),
            controlled_shutdown_retry_backoff_ms=config.get("controlled.shutdown.retry.backoff.ms"),
            dial=config.test_broker_dial,
            inter_broker_listener=listener.name,
            security=security,
        )
        return ClusterMember(node_id=broker.node_id, settings=settings, log_manager=broker.log_manager,
                             clock=broker.clock, on_readable=broker.append_waiters.notify,
                             on_role_change=self._role_changed)

    async def follow_acls(self) -> None:
        """A cluster's ACLs: all of ``/kafka-acl`` and ``/kafka-acl-extended`` now, then each
        resource a ``/kafka-acl-changes`` notification (a literal pattern, ``<Type>:<name>``) or a
        ``/kafka-acl-extended-changes`` one (a prefixed pattern, Kafka 2.x's JSON event) names
        (Kafka's AclAuthorizer), re-read by this broker's event task."""
        cluster, store = self.cluster, self.broker.authorizer.store
        try:
            store.replace(keyed(await cluster.zk.acls()))
        except (ZooKeeperError, AclError) as exc:
            logger.warning("cannot read the ACLs from ZooKeeper: %s (re-read as changes are notified)", exc)

        async def reread(prefixed: bool, resource_type: str, name: str) -> None:
            resource = pattern_key(prefixed, resource_type, name)
            try:
                store.update(resource, await cluster.zk.acl(resource_type, name, prefixed=prefixed))
            except AclError as exc:
                logger.warning("ACLs of %s not applied: %s", resource, exc)
            else:
                logger.info("ACLs of %s re-read after a change notification", resource)

        async def literal_changed(data: bytes) -> None:
            await reread(False, *literal_acl_change(data))

        async def extended_changed(data: bytes) -> None:
            try:
                resource_type, name = extended_acl_change(data)
            except MalformedZnode as exc:
                logger.warning("%s (ignored)", exc)
                return
            await reread(True, resource_type, name)

        for path, changed in ((ACL_CHANGES_PATH, literal_changed), (EXTENDED_ACL_CHANGES_PATH, extended_changed)):
            listener = NotificationListener(cluster.zk_client, path, ACL_CHANGE_PREFIX, changed)
            await cluster.watch_children(path, listener.on_children)

    async def follow_topic_configs(self) -> None:
        """Topic overrides and dynamic broker configs as ZooKeeper holds them: this broker's and
        the cluster default's (``/config/brokers``) and those of every local topic now (altered
        while this broker was away), then each entity a ``/config/changes`` notification names
        (Kafka's DynamicConfigManager), re-read and applied."""
        cluster = self.cluster

        async def apply(topic: str) -> None:
            try:
                overrides = await cluster.zk.topic_config(topic)
            except ZooKeeperError as exc:
                logger.warning("configs of topic %r not read: %s", topic, exc)
                return
            if cluster.controller is not None:  # its elections read unclean.leader.election.enable
                cluster.controller.topic_configs[topic] = overrides
            if not self.log_manager.has_topic(topic) or self.log_manager.topic_overrides(topic) == overrides:
                return
            try:
                await trio.to_thread.run_sync(self.log_manager.set_topic_overrides, topic, overrides)
            except ValueError as exc:
                logger.warning("configs of topic %r not applied: %s", topic, exc)
            else:
                logger.info("topic %r now has configs %s", topic, overrides)

        own = (DEFAULT_ENTITY, str(self.broker.node_id))

        async def apply_broker_configs() -> None:
            """Kafka's DynamicBrokerConfig from /config/brokers: the cluster default, this broker's own."""
            try:
                dynamic = {entity: await cluster.zk.broker_config(entity) for entity in own}
                await self.broker.apply_dynamic_configs(dynamic)
            except (ZooKeeperError, ConfigError) as exc:
                logger.warning("dynamic broker configs not applied: %s", exc)

        async def changed(data: bytes) -> None:
            try:
                entity_type, name = decode_config_change(data)
            except MalformedZnode as exc:
                logger.warning("ignoring a config change notification: %s", exc)
                return
            if entity_type == "topics":
                await apply(name)
            elif entity_type == "brokers" and name in own:
                await apply_broker_configs()

        await apply_broker_configs()
        for topic in sorted(self.log_manager.topics()):
            await apply(topic)
        listener = NotificationListener(cluster.zk_client, CONFIG_CHANGES_PATH, CONFIG_CHANGE_PREFIX, changed)
        await cluster.watch_children(CONFIG_CHANGES_PATH, listener.on_children)

    def export_view(self):
        """What the export hand-off of a cluster broker needs (``export.cluster_handoff``): it
        exports the partitions led here, and reads and writes progress in ZooKeeper."""
        from minikafka.export.cluster_handoff import ClusterView

        replicas = self.cluster.replicas
        return ClusterView(zk_client=self.cluster.zk_client, log_manager=self.log_manager,
                           leader_logs=lambda: [r.log for r in list(replicas.replicas.values()) if r.role == LEADER])

    # ------------------------------------------------------------------ reads

    def leader_replica(self, topic: str, partition: int, current_leader_epoch: int = NO_EPOCH) -> Replica:
        if current_leader_epoch != NO_EPOCH:
            # A follower's epoch fences too (Kafka's getLocalLog): a client a LeaderAndIsr ahead
            # of this broker hears UNKNOWN_LEADER_EPOCH, not NOT_LEADER, and waits for it here.
            epoch = self.leader_epoch(topic, partition)
            error = leader_epoch_error(epoch, current_leader_epoch) if epoch != NO_EPOCH else ErrorCode.NONE
            if error:
                raise TopicError(error, f"{topic}-{partition} is at leader epoch {epoch} on broker "
                                        f"{self.broker.node_id}, not {current_leader_epoch}")
        try:
            return self.cluster.replicas.leader_replica(topic, partition)
        except NotLeader as exc:
            raise TopicError(exc.code, str(exc)) from None

    def leader_log(self, topic: str, partition: int, current_leader_epoch: int = NO_EPOCH) -> Log:
        return self.leader_replica(topic, partition, current_leader_epoch).log

    def leader_epoch(self, topic: str, partition: int) -> int:
        replica = self.cluster.replicas.replicas.get((topic, partition))
        return NO_EPOCH if replica is None else replica.leader_epoch

    def high_watermark(self, log: Log) -> int:
        return log.high_watermark

    def last_stable_offset(self, log: Log) -> int:
        return log.last_stable_offset

    def leader_throttled(self, topics: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        # Nothing to look up while this broker has no rate (the default): every follower's
        # fetch asks. Unlike Kafka's, no bytes are counted meanwhile, so a rate set after the
        # lists starts from an empty window.
        if not self.leader_quota.limited():
            return set()
        throttled = set()
        for topic, partition in topics:
            try:
                listed = self.log_manager.topic_overrides(topic).get("leader.replication.throttled.replicas")
            except UnknownTopic:
                continue
            if is_throttled(listed, partition, self.broker.node_id):
                throttled.add((topic, partition))
        return throttled

    def held_back_from(self, replica_id: int, throttled: set[tuple[str, int]]) -> set[tuple[str, int]]:
        # Kafka's ReplicaManager.shouldLeaderThrottle: the quota checked before the read and
        # recorded after the answer, so one answer may overrun it (by its size, at most).
        if not throttled or not self.leader_quota.exceeded():
            return set()
        replicas = self.cluster.replicas.replicas
        held = set()
        for key in throttled:
            replica = replicas.get(key)
            state = replica.leader_state if replica is not None else None
            if state is not None and replica_id not in state.isr:
                held.add(key)
        return held

    def record_leader_throttled(self, nbytes: int) -> None:
        self.leader_quota.record(nbytes)

    async def follower_fetched(self, topic: str, partition: int, replica_id: int, fetch_offset: int,
                               current_leader_epoch: int = NO_EPOCH) -> None:
        """The leader's high watermark and ISR move as its followers catch up. Not a fenced
        follower's (Kafka updates a follower's state only after a read its epoch allowed): one
        that missed a leader change may hold a log this leader's history diverges from, and
        its log end would count towards the high watermark."""
        if leader_epoch_error(self.leader_epoch(topic, partition), current_leader_epoch):
            return
        try:
            await self.cluster.replicas.follower_fetched(topic, partition, replica_id, fetch_offset)
        except NotLeader:
            pass

    # ------------------------------------------------------------------ appends

    def min_insync_replicas(self, topic: str) -> int:
        try:
            value = self.log_manager.topic_overrides(topic).get("min.insync.replicas")
        except Exception:  # the topic vanished meanwhile: the broker default
            value = None
        return int(value) if value is not None else self.broker.config.get("min.insync.replicas")

    def _append_as_leader(self, topic: str, partition: int, write: Callable[[Log, int], AppendResult],
                          acks: int) -> tuple[AppendResult, AcksWait | None]:
        """At the partition's leader epoch. With acks=-1 the ISR must hold
        ``min.insync.replicas`` first (NOT_ENOUGH_REPLICAS, nothing written), and the answer
        waits for the high watermark to pass what was written."""
        replica = self.leader_replica(topic, partition)
        replicas = self.cluster.replicas
        if acks == -1:
            try:
                replicas.check_enough_replicas(replica, self.min_insync_replicas(topic))
            except NotLeader as exc:
                raise TopicError(exc.code, str(exc)) from None
        result = write(replica.log, replica.leader_epoch)
        replicas.leader_appended(replica)
        self.broker.append_waiters.notify(topic, partition)
        if acks != -1 or not result.record_count:
            return result, None
        return result, functools.partial(self.wait_for_acks, replica, result.last_offset)

    async def wait_for_acks(self, replica: Replica, last_offset: int, timeout_ms: int) -> ErrorCode:
        """Until the high watermark passes ``last_offset`` of ``replica`` (the leader replica
        that appended it): NONE, or why not (``ReplicaManager.wait_for_high_watermark``)."""
        return await self.cluster.replicas.wait_for_high_watermark(
            replica, last_offset, self.min_insync_replicas(replica.topic), max(timeout_ms, 0) / 1000)

    # ------------------------------------------------------------------ topics

    def topics(self) -> dict[str, int]:
        """The topics the controller last described (this broker may hold none of their replicas)."""
        return self.cluster.metadata.topics()

    def topic_exists(self, topic: str) -> bool:
        return self.cluster.metadata.has_topic(topic)

    async def _auto_create(self, topic: str) -> None:
        """Kafka 0.10.2's auto-creation: a broker that is asked for an unknown topic writes its
        replica assignment to ZooKeeper and answers LEADER_NOT_AVAILABLE; the client retries
        once the controller has elected leaders."""
        num_partitions = self.broker.config.num_partitions
        try:
            await self._write_topic(topic, num_partitions, self.default_replication_factor, {}, {})
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        else:
            logger.info("auto-created topic %r with %d partition(s), replication factor %d", topic,
                        num_partitions, self.default_replication_factor)
        raise TopicError(ErrorCode.LEADER_NOT_AVAILABLE, f"topic {topic!r} is being created")

    async def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """From the topic znodes, where the controller put them (UpdateMetadata v0-v3 carries
        none), each read once while its topic lives; a topic not given one yet has none."""
        metadata, zk = self.cluster.metadata, self.cluster.zk
        for topic in topics:
            if topic not in metadata.topic_ids and metadata.has_topic(topic):
                try:
                    topic_id = await zk.topic_id(topic)
                except ZooKeeperError as exc:
                    logger.warning("topic id of %r not read: %s", topic, exc)
                    continue
                if topic_id is not None and metadata.has_topic(topic):
                    metadata.topic_ids[topic] = topic_id
        return {topic: metadata.topic_ids[topic] for topic in topics if topic in metadata.topic_ids}

    def _require_controller(self) -> None:
        """As Kafka 0.10.2, only the controller creates and deletes topics."""
        if self.cluster.controller is None:
            raise TopicError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker.node_id} is not the controller")

    async def create_topic(self, topic: str, num_partitions: int, replication_factor: int,
                           assignments: dict[int, list[int]], configs: dict[str, str | None],
                           *, validate_only: bool = False, timeout_ms: int = 60000) -> tuple[int, int]:
        """NOT_CONTROLLER at any broker but the controller; REQUEST_TIMED_OUT when the new
        topic's partitions have no leader after ``timeout_ms`` (it is created all the same)."""
        self._require_controller()
        return await super().create_topic(topic, num_partitions, replication_factor, assignments, configs,
                                   validate_only=validate_only, timeout_ms=timeout_ms)

    def _check_assignments(self, assignments: dict[int, list[int]]) -> None:
        live = sorted(self.cluster.controller.live)
        sizes = {len(r) for r in assignments.values()}
        for partition, replicas in sorted(assignments.items()):
            if len(set(replicas)) != len(replicas) or not replicas or len(sizes) != 1:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Partition {partition}: replicas {list(replicas)} must be distinct, and "
                                 f"every partition must have as many.")
            unknown = sorted(set(replicas) - set(live))
            if unknown:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Partition {partition} assigned to unknown broker(s) {unknown}; live "
                                 f"brokers are {live}.")

    def _check_replication_factor(self, replication_factor: int) -> None:
        """Checked as the replicas are placed on the brokers live then (_assign)."""

    async def _create(self, topic: str, num_partitions: int, replication_factor: int,
                      assignments: dict[int, list[int]], overrides: dict[str, str], *,
                      validate_only: bool, timeout_ms: int) -> None:
        cluster = self.cluster
        if cluster.metadata.has_topic(topic) or await cluster.zk.topic_assignment(topic):
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
        if validate_only:
            if not assignments:
                _assign(num_partitions, replication_factor, sorted(cluster.controller.live))
            return
        await self._write_topic(topic, num_partitions, replication_factor, overrides, assignments)
        logger.info("created topic %r (%s)", topic, f"{len(assignments)} partition(s) as assigned" if assignments
                    else f"{num_partitions} partition(s), replication factor {replication_factor}")
        count = len(assignments) if assignments else num_partitions
        if not await _wait_for_metadata(timeout_ms, lambda: self._all_led(topic, count)):
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT,
                             f"Topic '{topic}' was created but its partitions have no leader yet.")

    async def _write_topic(self, topic: str, num_partitions: int, replication_factor: int,
                           overrides: dict[str, str], assignments: dict[int, list[int]]) -> None:
        zk = self.cluster.zk
        if not assignments:
            assignments = _assign(num_partitions, replication_factor, sorted(await zk.live_brokers()))
        try:
            await zk.create_topic(topic, assignments, overrides, new_topic_id())
        except NodeExists:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.") from None
        except ZooKeeperError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"Topic '{topic}' not created: {exc}") from None

    def _all_led(self, topic: str, count: int) -> bool:
        partitions = self.cluster.metadata.partitions(topic)
        return partitions is not None and len(partitions) == count and all(p.leader >= 0 for p in partitions.values())

    async def create_partitions(self, topic: str, count: int, assignments: list[list[int]] | None, *,
                                validate_only: bool = False, timeout_ms: int = 60000) -> None:
        """NOT_CONTROLLER at any broker but the controller (as Kafka 2.8's KafkaApis);
        REQUEST_TIMED_OUT when the new partitions have no leader after ``timeout_ms`` (they
        are added all the same)."""
        self._require_controller()
        await super().create_partitions(topic, count, assignments, validate_only=validate_only, timeout_ms=timeout_ms)

    async def _replica_assignment(self, topic: str) -> dict[int, list[int]] | None:
        zk = self.cluster.zk
        if await zk.zk.exists(delete_topic_path(topic)) is not None:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
        if any(await zk.topic_reassignment(topic)):
            # Kafka 2.8's AdminZkClient.createPartitions refuses too: the partitions being moved
            # have replicas of other sizes until the move completes.
            raise TopicError(ErrorCode.REASSIGNMENT_IN_PROGRESS, f"A partition of '{topic}' is being reassigned.")
        return await zk.topic_assignment(topic) or None

    def _place_new_partitions(self, current: dict[int, list[int]], added: int) -> dict[int, list[int]]:
        """AdminUtils.addPartitions: as many replicas as partition 0 has, placed from where
        partition 0's preferred leader stands among the live brokers."""
        live = sorted(self.cluster.controller.live)
        first = current[0][0]
        start = next((i for i, broker_id in enumerate(live) if broker_id >= first), 0)
        try:
            return assign_replicas(added, len(current[0]), live, fixed_start_index=start,
                                   start_partition_id=len(current))
        except InvalidReplicationFactor as exc:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(exc)) from None

    async def _add_partitions(self, topic: str, current: dict[int, list[int]], added: dict[int, list[int]], *,
                              validate_only: bool, timeout_ms: int) -> None:
        if validate_only:
            return
        try:
            await self.cluster.zk.set_topic_assignment(topic, {**current, **added})
            await self.cluster.controller_request("partitions_added", timeout_ms / 1000, topic=topic)
        except ControllerError as exc:
            raise TopicError(exc.code, str(exc)) from None
        except ZooKeeperError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"Partitions of '{topic}' not added: {exc}") from None
        count = len(current) + len(added)
        logger.info("topic %r now has %d partition(s)", topic, count)
        if not await _wait_for_metadata(timeout_ms, lambda: self._all_led(topic, count)):
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT,
                             f"Partitions of '{topic}' were added but have no leader yet.")

    async def topic_overrides(self, topic: str) -> dict[str, str]:
        """From ZooKeeper, where every broker takes them from."""
        zk = self.cluster.zk
        try:
            if not await zk.topic_assignment(topic):
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
            return await zk.topic_config(topic)
        except ZooKeeperError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"configs of topic {topic!r} not read: {exc}") from None

    async def alter_topic_configs(self, topic: str, overrides: dict[str, str]) -> None:
        """Written to ``/config/topics/<topic>`` with a change notification, as Kafka 0.10.2's
        AdminUtils: every broker applies them to its replicas when it sees the notification
        (follow_topic_configs), this one included, so the answer may come a moment before."""
        zk = self.cluster.zk
        try:
            if not await zk.topic_assignment(topic):
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
            await zk.set_topic_config(topic, overrides)
        except ZooKeeperError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"configs of topic {topic!r} not written: {exc}") from None
        logger.info("topic %r now has configs %s", topic, overrides)

    async def delete_topic(self, topic: str, timeout_ms: int = 60000) -> None:
        """Through the controller (NOT_CONTROLLER elsewhere); the answer waits until every
        replica is gone, or REQUEST_TIMED_OUT (the deletion goes on). Each group coordinator
        removes the topic's offsets when UpdateMetadata drops its partitions."""
        self._require_controller()
        cluster = self.cluster
        if self.broker.is_internal(topic):
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic {topic!r} is internal")
        if not await cluster.zk.topic_assignment(topic):
            self.check_topic_name(topic)
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
        try:
            await cluster.zk.request_topic_deletion(topic)
        except NodeExists:
            pass  # already marked: wait for the same deletion
        if not await _wait_for_metadata(timeout_ms, lambda: not cluster.metadata.has_topic(topic)):
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"Topic '{topic}' is marked for deletion.")
        logger.info("deleted topic %r", topic)

    async def elect_leaders(self, partitions: list[tuple[str, int]] | None, unclean: bool,
                            timeout_ms: int) -> dict[tuple[str, int], ErrorCode]:
        """Run by the controller (NOT_CONTROLLER at the others), as Kafka 2.8's; answered
        once its elections are written and sent, not once every broker has them."""
        self._require_controller()
        asked = partitions if partitions is not None else list(self.cluster.controller.assignment_keys())
        try:
            results = await self.cluster.controller_request("elect_leaders", timeout_ms / 1000,
                                                            partitions=asked, unclean=unclean)
        except ControllerError as exc:
            raise TopicError(exc.code, str(exc)) from None
        if partitions is None:
            return {key: code for key, code in results.items() if code != ErrorCode.ELECTION_NOT_NEEDED}
        return results

    async def alter_reassignments(self, asked: dict[tuple[str, int], list[int] | None],
                                  timeout_ms: int) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """Run by the controller (NOT_CONTROLLER at the others), as Kafka 2.8's; answered once
        each move is under way (recorded and sent to its replicas), not once it completes."""
        self._require_controller()
        try:
            return await self.cluster.controller_request("alter_reassignments", timeout_ms / 1000, partitions=asked)
        except ControllerError as exc:
            raise TopicError(exc.code, str(exc)) from None

    async def list_reassignments(self, keys: list[tuple[str, int]] | None
                                 ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        self._require_controller()
        return {key: (r.replicas, r.adding, r.removing)
                for key, r in self.cluster.controller.reassignments_of(keys).items()}

    # ------------------------------------------------------------------ metadata

    async def cluster_view(self) -> None:
        """Not before the controller's first UpdateMetadata: no brokers and no controller would
        leave a client nowhere to send CreateTopics until its next refresh."""
        await self.cluster.cluster_view()

    def brokers(self, listener_name: str) -> tuple[list[dict], int]:
        metadata = self.cluster.metadata
        # As Kafka: brokers without the client's listener are left out.
        return [{"node_id": b.node_id, "host": address[0], "port": address[1], "rack": b.rack}
                for b in sorted(metadata.brokers.values(), key=lambda b: b.node_id)
                for address in [b.address(listener_name)] if address is not None], metadata.controller_id

    def partition_metadata(self, topic: str, count: int) -> list[dict]:
        """As the controller last described them; -1 with LEADER_NOT_AVAILABLE while one has
        no leader. Offline replicas are those on brokers that are not live, as Kafka's
        controller reports them (no broker here loses one log dir of several, so a replica is
        offline exactly when its broker is)."""
        metadata = self.cluster.metadata
        partitions = metadata.partitions(topic) or {}
        return [{"error_code": ErrorCode.NONE if info.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                 "partition_index": index, "leader_id": info.leader, "leader_epoch": info.leader_epoch,
                 "replica_nodes": list(info.replicas), "isr_nodes": list(info.isr),
                 "offline_replicas": [r for r in info.replicas if r not in metadata.brokers]}
                for index, info in sorted(partitions.items())]

    # ------------------------------------------------------------------ controller requests

    async def become_leader_or_follower(self, body) -> tuple[ErrorCode, list[tuple[str, int, ErrorCode]]]:
        leaders = [BrokerEndpoint(e.broker_id, e.host_name, e.port) for e in body.live_leaders]
        states = [PartitionStateUpdate(s.topic_name, s.partition_index, s.controller_epoch, s.leader, s.leader_epoch,
                                       list(s.isr), s.zk_version, list(s.replicas))
                  for s in body.ungrouped_partition_states]
        return await self.cluster.replicas.become_leader_or_follower(body.controller_epoch, states, leaders)

    async def stop_replicas(self, body) -> tuple[ErrorCode, list[tuple[str, int, ErrorCode]]]:
        return await self.cluster.replicas.stop_replica(
            body.controller_epoch, body.delete_partitions,
            [(p.topic_name, p.partition_index) for p in body.ungrouped_partitions])

    async def update_metadata(self, body, version: int) -> ErrorCode:
        cluster = self.cluster
        if cluster.replicas.stale_controller(body.controller_epoch):
            return ErrorCode.STALE_CONTROLLER_EPOCH
        partitions = {}
        for state in body.ungrouped_partition_states:
            partitions[(state.topic_name, state.partition_index)] = None if state.leader == _LEADER_DURING_DELETE \
                else PartitionInfo(state.leader, state.leader_epoch, tuple(state.isr), tuple(state.replicas),
                                   state.zk_version, state.controller_epoch)
        inter_broker_listener = self.broker.config.inter_broker_listener().name
        cluster.update_metadata(body.controller_id, body.controller_epoch,
                                [_endpoint(b, version, inter_broker_listener) for b in body.live_brokers],
                                partitions)
        for topic, partition in partitions:
            self.broker.append_waiters.notify(topic, partition)
        deleted = {key for key, info in partitions.items() if info is None}
        if deleted:
            # Kafka 0.10.2's handleUpdateMetadataRequest: offsets of deleted partitions go from
            # the groups this broker coordinates.
            self.broker.group_coordinator.remove_deleted_partitions(deleted)
        strays = self._strays(partitions)
        if strays:
            logger.info("deleting replicas the controller no longer assigns here: %s",
                        ", ".join(f"{t}-{p}" for t, p in strays))
            await cluster.replicas.stop_replica(body.controller_epoch, True, strays)
        return ErrorCode.NONE

    def _strays(self, partitions: dict[tuple[str, int], PartitionInfo | None]) -> list[tuple[str, int]]:
        """The replicas held here of partitions whose replicas, as the controller now has them,
        do not include this broker: a partition moved away while this broker was down, or
        whose StopReplica was lost with the controller that queued it (it died right after
        the move). The controller of Kafka's ZooKeeper mode never tells such a broker again,
        and the copy stays, a follower fetching at an epoch its leader fences; KRaft brokers
        delete them from the metadata they replay (findStrayPartitions), as this does from
        the controller's UpdateMetadata. Safe: a replica leaves a partition only once it is
        out of the ISR, so the replicas kept hold every acknowledged write. A leader is never
        one: the controller moves the leadership first (kept, and logged, should it be)."""
        node_id, replicas = self.cluster.node_id, self.cluster.replicas
        strays = []
        for key, info in partitions.items():
            if info is None or not info.replicas or node_id in info.replicas:
                continue
            replica = replicas.replicas.get(key)
            if replica is not None and replica.role == LEADER:
                logger.warning("%s-%d: led here but not among its replicas %s; kept", *key, list(info.replicas))
                continue
            if replica is not None or replicas.log_manager.get_log(*key) is not None:
                strays.append(key)
        return strays

    async def controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        try:
            return await self.cluster.controller_request("controlled_shutdown", _CONTROLLED_SHUTDOWN_TIMEOUT_S,
                                                         broker_id=broker_id)
        except ControllerError as exc:
            raise TopicError(exc.code, str(exc)) from None

    async def prepare_shutdown(self) -> None:
        await self.cluster.controlled_shutdown()
        self.resign_moved_groups()

    # ------------------------------------------------------------------ consumer groups

    async def find_group_coordinator(self, group_id: str,
                                     listener_name: str = "") -> tuple[ErrorCode, tuple[int, str, int] | None]:
        """The leader of the group's ``__consumer_offsets`` partition (Kafka's
        ``abs(groupId.hashCode) % offsets.topic.num.partitions``). The first request creates the
        topic (through ZooKeeper and the controller, as Kafka 0.10.2's KafkaApis did) once
        ``offsets.topic.replication.factor`` brokers are live; until it has leaders the answer
        is COORDINATOR_NOT_AVAILABLE, which clients retry. Held, like Metadata, until the
        controller's first UpdateMetadata has arrived."""
        metadata = self.cluster.metadata
        coordinator = self.broker.group_coordinator
        if not await self.cluster.cluster_view():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if not metadata.has_topic(GROUP_METADATA_TOPIC):
            await self._create_offsets_topic()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if not await self.learn_partition_count(coordinator, GROUP_METADATA_TOPIC):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return self._coordinator_endpoint(GROUP_METADATA_TOPIC, coordinator.partition_for(group_id), listener_name)

    async def learn_partition_count(self, coordinator, topic: str) -> bool:
        """Whether ``coordinator`` (of groups or transactions) knows its state topic's partition
        count, read from ZooKeeper the first time (False while it cannot be read)."""
        if coordinator.topic_partitions is None:
            try:
                coordinator.topic_partitions = await self.internal_topic_partitions(topic)
            except ZooKeeperError as exc:
                logger.warning("%s: partition count not read: %s", topic, exc)
                return False
        return True

    def _coordinator_endpoint(self, topic: str, index: int,
                              listener_name: str) -> tuple[ErrorCode, tuple[int, str, int] | None]:
        """The coordinator of a key in ``topic-index``: that partition's leader, as the
        metadata cache knows it (COORDINATOR_NOT_AVAILABLE while it has none)."""
        endpoint = self.cluster.metadata.leader_endpoint(topic, index)
        address = None if endpoint is None else endpoint.address(listener_name)
        if address is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return ErrorCode.NONE, (endpoint.node_id, *address)

    async def internal_topic_partitions(self, topic: str) -> int:
        """The partition count of an internal topic as ZooKeeper holds it (the metadata cache
        may know only some of its partitions yet)."""
        assignment = await self.cluster.zk.topic_assignment(topic)
        if not assignment:
            raise ZooKeeperError(f"{topic} has no replica assignment")
        return len(assignment)

    async def _create_offsets_topic(self) -> None:
        coordinator = self.broker.group_coordinator
        config = coordinator.config
        await self._create_internal_topic(GROUP_METADATA_TOPIC, config.offsets_topic_num_partitions,
                                          "offsets.topic.replication.factor", config.offsets_topic_replication_factor,
                                          coordinator.offsets_topic_configs())

    async def _create_internal_topic(self, topic: str, num_partitions: int, factor_name: str,
                                     replication_factor: int, configs: dict[str, str]) -> None:
        """Create an internal topic through ZooKeeper and the controller once
        ``replication_factor`` brokers are live (Kafka's createInternalTopic: before that the
        coordinator is not available); a topic that another broker created meanwhile is left."""
        live = len(self.cluster.metadata.brokers)
        if live < replication_factor:
            logger.info("%s not created yet: %s is %d, %d broker(s) live", topic, factor_name, replication_factor,
                        live)
            return
        try:
            await self._write_topic(topic, num_partitions, replication_factor, configs, {})
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                logger.warning("%s not created: %s", topic, exc)
            return
        logger.info("created %s with %d partition(s), replication factor %d", topic, num_partitions,
                    replication_factor)

    # ------------------------------------------------------------------ transactions

    async def find_transaction_coordinator(self, transactional_id: str,
                                           listener_name: str = "") -> tuple[ErrorCode, tuple[int, str, int] | None]:
        """The leader of the id's ``__transaction_state`` partition. The first request creates
        the topic as :meth:`find_group_coordinator` creates ``__consumer_offsets`` (Kafka 2.8
        creates it at the first FindCoordinator for a transactional id), never a broker
        locally; COORDINATOR_NOT_AVAILABLE until it has leaders."""
        if not await self.cluster.cluster_view():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if not self.cluster.metadata.has_topic(TRANSACTION_STATE_TOPIC):
            config = self.broker.config
            # Kafka's TransactionLog properties: a state change is committed on min.isr
            # replicas, and a replica that missed one never becomes leader.
            configs = {**state_topic_configs(config),
                       "min.insync.replicas": str(config.get("transaction.state.log.min.isr")),
                       "unclean.leader.election.enable": "false"}
            await self._create_internal_topic(TRANSACTION_STATE_TOPIC, config.get("transaction.state.log.num.partitions"),
                                              "transaction.state.log.replication.factor",
                                              config.get("transaction.state.log.replication.factor"), configs)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        coordinator = self.broker.txn_coordinator
        if not await self.learn_partition_count(coordinator, TRANSACTION_STATE_TOPIC):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return self._coordinator_endpoint(TRANSACTION_STATE_TOPIC, coordinator.partition_for(transactional_id),
                                          listener_name)

    def resign_moved_groups(self) -> None:
        """After a controlled shutdown: the controller sent the moved partitions' new state to
        this broker too (as Kafka 0.10.2's controlled-shutdown selector does), so the role-change
        hook has normally resigned their groups and transactional ids already. Any coordinator
        partition still served here but led elsewhere by the metadata (its LeaderAndIsr was
        lost, its UpdateMetadata was not) is given up now; its clients find the new coordinator
        instead of waiting for this process to exit."""
        for topic, coordinator in ((GROUP_METADATA_TOPIC, self.broker.group_coordinator),
                                   (TRANSACTION_STATE_TOPIC, self.broker.txn_coordinator)):
            for index in coordinator.served_partitions():
                info = self.cluster.metadata.partition(topic, index)
                if info is not None and info.leader != self.broker.node_id:
                    coordinator.resigned(index, self.log_manager.get_log(topic, index))

    def offsets_trim_bound(self, index: int, log: Log, topic: str = GROUP_METADATA_TOPIC) -> int:
        """The offset below which a follower of a coordinator's state log (``topic-index``,
        ``__consumer_offsets`` or ``__transaction_state``) may delete segments its snapshots
        cover: its high watermark while the partition's ISR (as the controller last said) is
        every assigned replica, else none. Each replica then holds the log up to there, and
        truncation never goes below it, so none ever has to fetch what was deleted."""
        info = self.cluster.metadata.partition(topic, index)
        if info is None or sorted(info.isr) != sorted(info.replicas):
            return 0
        return log.high_watermark

    def _role_changed(self, topic: str, partition: int, replica: Replica | None) -> None:
        """The replica manager's leadership hook: the group coordinator serves the
        ``__consumer_offsets`` partitions this broker leads, the transaction coordinator the
        ``__transaction_state`` ones."""
        if topic == GROUP_METADATA_TOPIC:
            coordinator = self.broker.group_coordinator
            config = coordinator.config
            acks, timeout_ms = config.offsets_commit_required_acks, config.offsets_commit_timeout_ms
        elif topic == TRANSACTION_STATE_TOPIC:
            coordinator = self.broker.txn_coordinator
            # Kafka's TransactionLog.EnforcedRequiredAcks, within the request timeout.
            acks, timeout_ms = -1, self.broker.config.get("request.timeout.ms")
        else:
            return
        if replica is not None and replica.role == LEADER:
            coordinator.became_leader(partition, replica.log,
                                      CoordinatorLogWriter(self, topic, partition, acks, timeout_ms,
                                                           replica.leader_epoch))
        else:
            coordinator.resigned(partition, replica.log if replica is not None
                                 else self.log_manager.get_log(topic, partition))


def _assign(num_partitions: int, replication_factor: int, live: list[int]) -> dict[int, list[int]]:
    try:
        return assign_replicas(num_partitions, replication_factor, live)
    except InvalidReplicationFactor as exc:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None


async def _wait_for_metadata(timeout_ms: int, done) -> bool:
    with trio.move_on_after(max(timeout_ms, 0) / 1000):
        while not done():
            await trio.sleep(_METADATA_POLL_S)
        return True
    return done()


def _endpoint(entry, version: int, inter_broker_listener: str) -> BrokerEndpoint:
    """A live broker of UpdateMetadata; its main address is the inter-broker listener's (what
    fetchers and controlled shutdown use), else its PLAINTEXT one."""
    if version == 0:
        return BrokerEndpoint(entry.id, entry.v0_host, entry.v0_port)
    listeners = {(e.listener or _PROTOCOL_NAMES.get(e.security_protocol, str(e.security_protocol))): (e.host, e.port)
                 for e in entry.endpoints}
    plaintext = next(((e.host, e.port) for e in entry.endpoints if e.security_protocol == 0),
                     (entry.endpoints[0].host, entry.endpoints[0].port) if entry.endpoints else ("", -1))
    host, port = listeners.get(inter_broker_listener, plaintext)
    return BrokerEndpoint(entry.id, host, port, getattr(entry, "rack", None), listeners)


class CoordinatorLogWriter:
    """A coordinator's appends to its state log partition (``__consumer_offsets`` for groups,
    ``__transaction_state`` for transactions) while this broker leads it: through the leader
    replica at its leader epoch, as a produce with ``required_acks`` (followers fetch them like
    any message), and committed once the high watermark passes them (within ``timeout_ms``).
    Same interface as ``broker.groups.store.LocalWriter``; ``leader_epoch`` is the epoch of the
    leadership it was made for (a transaction coordinator's epoch, stamped in its markers)."""

    def __init__(self, partitions: ReplicatedPartitions, topic: str, partition: int, required_acks: int,
                 timeout_ms: int, leader_epoch: int) -> None:
        self.partitions = partitions
        self.leader_epoch = leader_epoch
        self.topic = topic
        self.partition = partition
        self.required_acks = required_acks
        self.commits_on_append = self.required_acks != -1
        self.timeout_s = timeout_ms / 1000

    async def topic_partitions(self) -> int:
        return await self.partitions.internal_topic_partitions(self.topic)

    def trim_bound(self) -> int:
        """As :meth:`ReplicatedPartitions.offsets_trim_bound`, from the leader's own ISR."""
        try:
            replica = self.partitions.leader_replica(self.topic, self.partition)
        except TopicError:
            return 0
        state = replica.leader_state
        if sorted(state.isr) != sorted(state.assigned):
            return 0
        return replica.log.high_watermark

    def append(self, message_set: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
        try:
            result, _ = self.partitions.append(self.topic, self.partition, message_set, self.required_acks, origin)
        except TopicError as exc:
            raise RecordError(exc.code, str(exc)) from None
        return result.last_offset

    async def committed(self, last_offset: int) -> ErrorCode:
        if self.required_acks != -1:
            return ErrorCode.NONE
        deadline = trio.current_time() + self.timeout_s
        while True:
            try:
                replica = self.partitions.leader_replica(self.topic, self.partition)
            except TopicError as exc:
                return exc.code
            remaining_ms = int((deadline - trio.current_time()) * 1000)
            if remaining_ms <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            code = await self.partitions.wait_for_acks(replica, last_offset, remaining_ms)
            # A new leader epoch of this broker's leadership replaces the replica: wait on
            # (the coordinator then checks that its leadership never lapsed).
            if code != ErrorCode.NOT_LEADER_FOR_PARTITION:
                return code
