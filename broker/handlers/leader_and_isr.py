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
    error, results = await broker.partitions.become_leader_or_follower(body)
    return {"error_code": error, "partition_errors": [
        {"topic_name": t, "partition_index": p, "error_code": code} for t, p, code in results]}
