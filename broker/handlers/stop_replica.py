"""StopReplica (key 5), v0: the controller stops this broker's replicas of partitions (a
controlled shutdown takes it out of their ISR) and deletes them when a topic is deleted.
STALE_CONTROLLER_EPOCH from an older controller, or on a single broker."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.STOP_REPLICA


async def handle(broker, request) -> dict:
    body = request.body
    if not broker.authorize(request, "ClusterAction", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "partition_errors": []}
    error, results = await broker.partitions.stop_replicas(body)
    return {"error_code": error, "partition_errors": [
        {"topic_name": t, "partition_index": p, "error_code": code} for t, p, code in results]}
