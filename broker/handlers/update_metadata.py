"""UpdateMetadata (key 6), v0: the controller's view of live brokers and partition states,
which this broker answers Metadata from. STALE_CONTROLLER_EPOCH from an older controller, or
on a single broker."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.UPDATE_METADATA
# The leader of a partition whose topic is being deleted (Kafka's LeaderDuringDelete).
LEADER_DURING_DELETE = -2


def _endpoint(entry, version: int):
    from minikafka.replication.metadata_cache import BrokerEndpoint

    if version == 0:
        return BrokerEndpoint(entry.id, entry.v0_host, entry.v0_port)
    plaintext = next((e for e in entry.endpoints if e.security_protocol == 0), entry.endpoints[0])
    return BrokerEndpoint(entry.id, plaintext.host, plaintext.port, getattr(entry, "rack", None))


async def handle(broker, request) -> dict:
    body = request.body
    cluster = broker.cluster
    if cluster is None or cluster.replicas.stale_controller(body.controller_epoch):
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH}
    from minikafka.replication.metadata_cache import PartitionInfo

    partitions = {}
    for state in body.ungrouped_partition_states:
        partitions[(state.topic_name, state.partition_index)] = None if state.leader == LEADER_DURING_DELETE else PartitionInfo(
            state.leader, state.leader_epoch, tuple(state.isr), tuple(state.replicas), state.zk_version,
            state.controller_epoch)
    cluster.metadata.update(body.controller_id, body.controller_epoch,
                            [_endpoint(b, request.api_version) for b in body.live_brokers], partitions)
    for topic, partition in partitions:
        broker.append_waiters.notify(topic, partition)
    return {"error_code": ErrorCode.NONE}
