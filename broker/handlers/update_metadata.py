"""UpdateMetadata (key 6), v0-v3: the controller's view of live brokers and partition states,
which this broker answers Metadata from. STALE_CONTROLLER_EPOCH from an older controller, or
on a single broker."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.UPDATE_METADATA
# The leader of a partition whose topic is being deleted (Kafka's LeaderDuringDelete).
LEADER_DURING_DELETE = -2


_PROTOCOL_NAMES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


def _endpoint(entry, version: int, inter_broker_listener: str):
    """A live broker; its main address is the inter-broker listener's (what fetchers and
    controlled shutdown use), else its PLAINTEXT one."""
    from minikafka.replication.metadata_cache import BrokerEndpoint

    if version == 0:
        return BrokerEndpoint(entry.id, entry.v0_host, entry.v0_port)
    # Before v3 an endpoint is named by its security protocol, as Kafka 0.10.1 did.
    listeners = {(e.listener or _PROTOCOL_NAMES.get(e.security_protocol, str(e.security_protocol))): (e.host, e.port)
                 for e in entry.endpoints}
    plaintext = next(((e.host, e.port) for e in entry.endpoints if e.security_protocol == 0),
                     (entry.endpoints[0].host, entry.endpoints[0].port) if entry.endpoints else ("", -1))
    host, port = listeners.get(inter_broker_listener, plaintext)
    return BrokerEndpoint(entry.id, host, port, getattr(entry, "rack", None), listeners)


async def handle(broker, request) -> dict:
    body = request.body
    if not broker.authorize(request, "ClusterAction", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    cluster = broker.cluster
    if cluster is None or cluster.replicas.stale_controller(body.controller_epoch):
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH}
    from minikafka.replication.metadata_cache import PartitionInfo

    partitions = {}
    for state in body.ungrouped_partition_states:
        partitions[(state.topic_name, state.partition_index)] = None if state.leader == LEADER_DURING_DELETE else PartitionInfo(
            state.leader, state.leader_epoch, tuple(state.isr), tuple(state.replicas), state.zk_version,
            state.controller_epoch)
    cluster.update_metadata(body.controller_id, body.controller_epoch,
                            [_endpoint(b, request.api_version, broker.config.inter_broker_listener().name)
                             for b in body.live_brokers], partitions)
    for topic, partition in partitions:
        broker.append_waiters.notify(topic, partition)
    deleted = {key for key, info in partitions.items() if info is None}
    if deleted:
        # Kafka 0.10.2's handleUpdateMetadataRequest: offsets of deleted partitions go from
        # the groups this broker coordinates.
        broker.group_coordinator.remove_deleted_partitions(deleted)
    return {"error_code": ErrorCode.NONE}
