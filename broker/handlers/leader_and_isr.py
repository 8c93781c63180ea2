"""LeaderAndIsr (key 4), v0: the controller makes this broker leader or follower of partitions.

Refused as a whole with STALE_CONTROLLER_EPOCH when it comes from an older controller than
the last one heard from; a partition state whose leader epoch is not newer than the one this
broker has is refused alone (STALE_CONTROLLER_EPOCH, as Kafka answers). A single broker (no
``zookeeper.connect``) has no controller: every LeaderAndIsr is stale to it.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.LEADER_AND_ISR


async def handle(broker, request) -> dict:
    body = request.body
    if not broker.authorize(request, "ClusterAction", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "partition_errors": []}
    if broker.cluster is None:
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH, "partition_errors": []}
    from minikafka.replication.metadata_cache import BrokerEndpoint
    from minikafka.replication.replica_manager import PartitionStateUpdate

    leaders = [BrokerEndpoint(e.broker_id, e.host_name, e.port) for e in body.live_leaders]
    states = [PartitionStateUpdate(s.topic_name, s.partition_index, s.controller_epoch, s.leader, s.leader_epoch,
                                   list(s.isr), s.zk_version, list(s.replicas))
              for s in body.ungrouped_partition_states]
    error, results = await broker.cluster.replicas.become_leader_or_follower(body.controller_epoch, states, leaders)
    return {"error_code": error, "partition_errors": [
        {"topic_name": t, "partition_index": p, "error_code": code} for t, p, code in results]}
