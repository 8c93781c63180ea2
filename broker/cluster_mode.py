"""The broker's topic and partition operations in cluster mode (``zookeeper.connect`` set).

``Broker`` delegates here when it is part of a cluster, so the handlers stay the same for both
modes: topics are created and deleted through ZooKeeper and the controller (as Kafka 0.10.2's
AdminUtils and KafkaApis did), produce and fetch go through the partition's leader replica,
and Metadata answers from the controller's UpdateMetadata. Imported only in cluster mode.
"""

from __future__ import annotations

import logging

import trio

from minikafka.broker.groups.coordinator import GROUP_METADATA_TOPIC
from minikafka.broker.security.acl import AclError
from minikafka.broker.security.inter_broker import channel_security
from minikafka.broker.server import TopicError
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.replication.assignment import InvalidReplicationFactor, assign_replicas
from minikafka.replication.cluster import ClusterMember, ClusterSettings
from minikafka.replication.controller import ControllerError
from minikafka.replication.fetcher import FetcherSettings
from minikafka.replication.kafka_zk import ACL_CHANGE_PREFIX, ACL_CHANGES_PATH
from minikafka.replication.notifications import NotificationListener
from minikafka.replication.replica_manager import LEADER, NotLeader, Replica
from minikafka.replication.zookeeper import NodeExists, ZooKeeperError
from minikafka.storage.config import AppendResult

logger = logging.getLogger(__name__)

# How often a CreateTopics or DeleteTopics waits for this broker's metadata to show the result.
_METADATA_POLL_S = 0.02


def cluster_member(broker) -> ClusterMember:
    config = broker.config
    session_timeout = config.get("zookeeper.session.timeout.ms")
    listener = config.inter_broker_listener()
    security = channel_security(config)
    settings = ClusterSettings(
        zookeeper_connect=config.zookeeper_connect,
        session_timeout_ms=session_timeout,
        connection_timeout_ms=config.get("zookeeper.connection.timeout.ms") or session_timeout,
        replica_lag_time_max_ms=config.get("replica.lag.time.max.ms"),
        min_insync_replicas=config.get("min.insync.replicas"),
        unclean_leader_election=config.get("unclean.leader.election.enable"),
        fetcher=FetcherSettings(
            wait_max_ms=config.get("replica.fetch.wait.max.ms"), min_bytes=config.get("replica.fetch.min.bytes"),
            max_bytes=config.get("replica.fetch.max.bytes"),
            response_max_bytes=config.get("replica.fetch.response.max.bytes"),
            backoff_ms=config.get("replica.fetch.backoff.ms"),
            socket_timeout_ms=config.get("controller.socket.timeout.ms"), dial=config.test_broker_dial,
            security=security),
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
                         on_role_change=lambda topic, partition, replica: _role_changed(broker, topic, partition,
                                                                                        replica))


async def follow_acls(broker) -> None:
    """A cluster's ACLs: all of ``/kafka-acl`` now, then each resource a ``/kafka-acl-changes``
    notification names (Kafka's SimpleAclAuthorizer), re-read by this broker's event task."""
    cluster, store = broker.cluster, broker.authorizer.store
    try:
        store.replace(await cluster.zk.acls())
    except (ZooKeeperError, AclError) as exc:
        logger.warning("cannot read the ACLs from ZooKeeper: %s (re-read as changes are notified)", exc)

    async def changed(data: bytes) -> None:
        resource = data.decode("utf-8", "replace")
        try:
            store.update(resource, await cluster.zk.acl(resource))
        except AclError as exc:
            logger.warning("ACLs of %s not applied: %s", resource, exc)
        else:
            logger.info("ACLs of %s re-read after a change notification", resource)

    listener = NotificationListener(cluster.zk_client, ACL_CHANGES_PATH, ACL_CHANGE_PREFIX, changed)
    await cluster.watch_children(ACL_CHANGES_PATH, listener.on_children)


def export_view(broker):
    """What the export hand-off of a cluster broker needs (``export.cluster_handoff``): it
    exports the partitions led here, and reads and writes progress in ZooKeeper."""
    from minikafka.export.cluster_handoff import ClusterView

    replicas = broker.cluster.replicas
    return ClusterView(zk_client=broker.cluster.zk_client, log_manager=broker.log_manager,
                       leader_logs=lambda: [r.log for r in list(replicas.replicas.values()) if r.role == LEADER])


# ---------------------------------------------------------------------- topics


def topics(broker) -> dict[str, int]:
    return broker.cluster.metadata.topics()


async def ensure_topic(broker, topic: str) -> None:
    """Kafka 0.10.2's auto-creation: a broker that is asked for an unknown topic writes its
    replica assignment to ZooKeeper and answers LEADER_NOT_AVAILABLE; the client retries once
    the controller has elected leaders."""
    cluster = broker.cluster
    if cluster.metadata.has_topic(topic):
        return
    broker.check_topic_name(topic)
    if not broker.config.auto_create_topics or broker.is_internal(topic):
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
    replication_factor = broker.config.get("default.replication.factor")
    try:
        await _write_topic(broker, topic, broker.config.num_partitions, replication_factor, {}, {})
    except TopicError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    else:
        logger.info("auto-created topic %r with %d partition(s), replication factor %d", topic,
                    broker.config.num_partitions, replication_factor)
    raise TopicError(ErrorCode.LEADER_NOT_AVAILABLE, f"topic {topic!r} is being created")


async def create_topic(broker, topic: str, num_partitions: int, replication_factor: int,
                       assignments: dict[int, list[int]], configs: dict[str, str | None], *,
                       validate_only: bool, timeout_ms: int) -> None:
    cluster = broker.cluster
    if cluster.controller is None:
        raise TopicError(ErrorCode.NOT_CONTROLLER, f"broker {broker.node_id} is not the controller")
    broker.check_topic_name(topic)
    if broker.is_internal(topic):
        if cluster.metadata.has_topic(topic):  # as a single broker, and Kafka, answer
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
        raise TopicError(ErrorCode.INVALID_REQUEST, f"Topic '{topic}' is internal to the broker.")
    live = sorted(cluster.controller.live)
    if assignments:
        if num_partitions != -1 or replication_factor != -1:
            raise TopicError(ErrorCode.INVALID_REQUEST, "Both numPartitions and replicationFactor must "
                                                        "be -1 when replica assignments are given.")
        if sorted(assignments) != list(range(len(assignments))):
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "Partitions must be numbered 0 to n-1 without gaps.")
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
    else:
        if num_partitions == -1:
            num_partitions = broker.config.num_partitions
        if replication_factor == -1:
            replication_factor = broker.config.get("default.replication.factor")
        if num_partitions <= 0:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"Number of partitions must be larger than 0, got {num_partitions}.")
        if replication_factor <= 0:
            raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor must be larger than 0, got {replication_factor}.")
    overrides = broker.checked_topic_overrides(configs)
    if cluster.metadata.has_topic(topic) or await cluster.zk.topic_assignment(topic):
        raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
    if validate_only:
        if not assignments:
            _assign(num_partitions, replication_factor, live)
        return
    await _write_topic(broker, topic, num_partitions, replication_factor, overrides, assignments)
    logger.info("created topic %r (%s)", topic, f"{len(assignments)} partition(s) as assigned" if assignments
                else f"{num_partitions} partition(s), replication factor {replication_factor}")
    count = len(assignments) if assignments else num_partitions
    if not await _wait_for_metadata(timeout_ms, lambda: _all_led(cluster, topic, count)):
        raise TopicError(ErrorCode.REQUEST_TIMED_OUT,
                         f"Topic '{topic}' was created but its partitions have no leader yet.")


def _assign(num_partitions: int, replication_factor: int, live: list[int]) -> dict[int, list[int]]:
    try:
        return assign_replicas(num_partitions, replication_factor, live)
    except InvalidReplicationFactor as exc:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None


async def _write_topic(broker, topic: str, num_partitions: int, replication_factor: int,
                       overrides: dict[str, str], assignments: dict[int, list[int]]) -> None:
    cluster = broker.cluster
    if not assignments:
        live = sorted((await cluster.zk.live_brokers()))
        assignments = _assign(num_partitions, replication_factor, live)
    try:
        await cluster.zk.create_topic(topic, assignments, overrides)
    except NodeExists:
        raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.") from None
    except ZooKeeperError as exc:
        raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"Topic '{topic}' not created: {exc}") from None


def _all_led(cluster, topic: str, count: int) -> bool:
    partitions = cluster.metadata.partitions(topic)
    return partitions is not None and len(partitions) == count and all(p.leader >= 0 for p in partitions.values())


async def _wait_for_metadata(timeout_ms: int, done) -> bool:
    with trio.move_on_after(max(timeout_ms, 0) / 1000):
        while not done():
            await trio.sleep(_METADATA_POLL_S)
        return True
    return done()


async def delete_topic(broker, topic: str, timeout_ms: int) -> None:
    cluster = broker.cluster
    if cluster.controller is None:
        raise TopicError(ErrorCode.NOT_CONTROLLER, f"broker {broker.node_id} is not the controller")
    if broker.is_internal(topic):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic {topic!r} is internal")
    if not await cluster.zk.topic_assignment(topic):
        broker.check_topic_name(topic)
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
    try:
        await cluster.zk.request_topic_deletion(topic)
    except NodeExists:
        pass  # already marked: wait for the same deletion
    if not await _wait_for_metadata(timeout_ms, lambda: not cluster.metadata.has_topic(topic)):
        raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"Topic '{topic}' is marked for deletion.")
    logger.info("deleted topic %r", topic)


# ---------------------------------------------------------------------- partitions


def leader_replica(broker, topic: str, partition: int) -> Replica:
    try:
        return broker.cluster.replicas.leader_replica(topic, partition)
    except NotLeader as exc:
        raise TopicError(exc.code, str(exc)) from None


def min_insync_replicas(broker, topic: str) -> int:
    try:
        value = broker.log_manager.topic_overrides(topic).get("min.insync.replicas")
    except Exception:  # the topic vanished meanwhile: the broker default
        value = None
    return int(value) if value is not None else broker.config.get("min.insync.replicas")


def append(broker, topic: str, partition: int, records: bytes, acks: int) -> tuple[AppendResult, Replica]:
    """Append as the partition's leader at its leader epoch. With acks=-1 the ISR must hold
    ``min.insync.replicas`` first (NOT_ENOUGH_REPLICAS, nothing written)."""
    replica = leader_replica(broker, topic, partition)
    if records is None:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE, "null message set")
    replicas = broker.cluster.replicas
    if acks == -1:
        try:
            replicas.check_enough_replicas(replica, min_insync_replicas(broker, topic))
        except NotLeader as exc:
            raise TopicError(exc.code, str(exc)) from None
    # No bytes() copy of the request's view: validation copies the set into the buffer it
    # writes anyway, and a copy of a large set costs a fresh allocation per produce.
    result = replica.log.append_as_leader(records, replica.leader_epoch)
    replicas.leader_appended(replica)
    broker.append_waiters.notify(topic, partition)
    return result, replica


async def wait_for_acks(broker, replica: Replica, last_offset: int, timeout_ms: int) -> ErrorCode:
    return await broker.cluster.replicas.wait_for_high_watermark(
        replica, last_offset, min_insync_replicas(broker, replica.topic), max(timeout_ms, 0) / 1000)


async def controller_event(broker, kind: str, timeout_s: float, **args):
    try:
        return await broker.cluster.controller_request(kind, timeout_s, **args)
    except ControllerError as exc:
        raise TopicError(exc.code, str(exc)) from None


# ---------------------------------------------------------------------- consumer groups


async def group_coordinator(broker, group_id: str,
                            listener_name: str = "") -> tuple[ErrorCode, tuple[int, str, int] | None]:
    """FindCoordinator in a cluster: the leader of the group's ``__consumer_offsets``
    partition (Kafka's ``abs(groupId.hashCode) % offsets.topic.num.partitions``). The first
    request creates the topic (through ZooKeeper and the controller, as Kafka 0.10.2's
    KafkaApis did) once ``offsets.topic.replication.factor`` brokers are live; until it has
    leaders the answer is COORDINATOR_NOT_AVAILABLE, which clients retry. Held, like Metadata,
    until the controller's first UpdateMetadata has arrived."""
    metadata = broker.cluster.metadata
    coordinator = broker.group_coordinator
    if not await broker.cluster.cluster_view():
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    if not metadata.has_topic(GROUP_METADATA_TOPIC):
        await _create_offsets_topic(broker)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    if coordinator.topic_partitions is None:
        try:
            coordinator.topic_partitions = await _offsets_topic_partitions(broker)
        except ZooKeeperError as exc:
            logger.warning("%s: partition count not read: %s", GROUP_METADATA_TOPIC, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    endpoint = metadata.leader_endpoint(GROUP_METADATA_TOPIC, coordinator.partition_for(group_id))
    address = None if endpoint is None else endpoint.address(listener_name)
    if address is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    return ErrorCode.NONE, (endpoint.node_id, *address)


async def _offsets_topic_partitions(broker) -> int:
    """The partition count of ``__consumer_offsets`` as ZooKeeper holds it (the metadata
    cache may know only some of its partitions yet)."""
    assignment = await broker.cluster.zk.topic_assignment(GROUP_METADATA_TOPIC)
    if not assignment:
        raise ZooKeeperError(f"{GROUP_METADATA_TOPIC} has no replica assignment")
    return len(assignment)


async def _create_offsets_topic(broker) -> None:
    coordinator = broker.group_coordinator
    config = coordinator.config
    live = len(broker.cluster.metadata.brokers)
    if live < config.offsets_topic_replication_factor:
        logger.info("%s not created yet: offsets.topic.replication.factor is %d, %d broker(s) live",
                    GROUP_METADATA_TOPIC, config.offsets_topic_replication_factor, live)
        return
    try:
        await _write_topic(broker, GROUP_METADATA_TOPIC, config.offsets_topic_num_partitions,
                           config.offsets_topic_replication_factor, coordinator.offsets_topic_configs(), {})
    except TopicError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            logger.warning("%s not created: %s", GROUP_METADATA_TOPIC, exc)
        return
    logger.info("created %s with %d partition(s), replication factor %d", GROUP_METADATA_TOPIC,
                config.offsets_topic_num_partitions, config.offsets_topic_replication_factor)


def resign_moved_groups(broker) -> None:
    """After a controlled shutdown: the controller sent the moved partitions' new state to
    this broker too (as Kafka 0.10.2's controlled-shutdown selector does), so the role-change
    hook has normally resigned their groups already. Any offsets partition still served here
    but led elsewhere by the metadata (its LeaderAndIsr was lost, its UpdateMetadata was not)
    is given up now; its members find the new coordinator instead of waiting for this
    process to exit."""
    coordinator = broker.group_coordinator
    for index in coordinator.served_partitions():
        info = broker.cluster.metadata.partition(GROUP_METADATA_TOPIC, index)
        if info is not None and info.leader != broker.node_id:
            coordinator.resigned(index, broker.get_log(GROUP_METADATA_TOPIC, index))


def offsets_trim_bound(broker, index: int, log) -> int:
    """The offset below which a follower of ``__consumer_offsets-index`` may delete segments
    its snapshots cover: its high watermark while the partition's ISR (as the controller
    last said) is every assigned replica, else none. Each replica then holds the log up to
    there, and truncation never goes below it, so none ever has to fetch what was deleted."""
    info = broker.cluster.metadata.partition(GROUP_METADATA_TOPIC, index)
    if info is None or sorted(info.isr) != sorted(info.replicas):
        return 0
    return log.high_watermark


def _role_changed(broker, topic: str, partition: int, replica: Replica | None) -> None:
    """The replica manager's leadership hook: the group coordinator serves the
    ``__consumer_offsets`` partitions this broker leads."""
    if topic != GROUP_METADATA_TOPIC:
        return
    coordinator = broker.group_coordinator
    if replica is not None and replica.role == LEADER:
        coordinator.became_leader(partition, replica.log, OffsetsWriter(broker, partition))
    else:
        coordinator.resigned(partition, replica.log if replica is not None else broker.get_log(topic, partition))


class OffsetsWriter:
    """The group coordinator's appends to a ``__consumer_offsets`` partition this broker
    leads: through the leader replica at its leader epoch, as a produce with
    ``offsets.commit.required.acks`` (followers fetch them like any message), and committed
    once the high watermark passes them (``offsets.commit.timeout.ms``). Same interface as
    ``broker.groups.store.LocalWriter``."""

    def __init__(self, broker, partition: int) -> None:
        self.broker = broker
        self.partition = partition
        config = broker.group_coordinator.config
        self.required_acks = config.offsets_commit_required_acks
        self.commits_on_append = self.required_acks != -1
        self.timeout_s = config.offsets_commit_timeout_ms / 1000

    async def topic_partitions(self) -> int:
        return await _offsets_topic_partitions(self.broker)

    def trim_bound(self) -> int:
        """As :func:`offsets_trim_bound`, from the leader's own ISR."""
        try:
            replica = leader_replica(self.broker, GROUP_METADATA_TOPIC, self.partition)
        except TopicError:
            return 0
        state = replica.leader_state
        if sorted(state.isr) != sorted(state.assigned):
            return 0
        return replica.log.high_watermark

    def append(self, message_set: bytes) -> int:
        try:
            result, _ = append(self.broker, GROUP_METADATA_TOPIC, self.partition, message_set, self.required_acks)
        except TopicError as exc:
            raise RecordError(exc.code, str(exc)) from None
        return result.last_offset

    async def committed(self, last_offset: int) -> ErrorCode:
        if self.required_acks != -1:
            return ErrorCode.NONE
        deadline = trio.current_time() + self.timeout_s
        while True:
            try:
                replica = leader_replica(self.broker, GROUP_METADATA_TOPIC, self.partition)
            except TopicError as exc:
                return exc.code
            remaining_ms = int((deadline - trio.current_time()) * 1000)
            if remaining_ms <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            code = await wait_for_acks(self.broker, replica, last_offset, remaining_ms)
            # A new leader epoch of this broker's leadership replaces the replica: wait on
            # (the coordinator then checks that its leadership never lapsed).
            if code != ErrorCode.NOT_LEADER_FOR_PARTITION:
                return code
