"""ControlledShutdown (key 7), v1: a broker about to stop asks the controller to move its
leaderships to other ISR members and take it out of every ISR. The answer lists the
partitions it still leads (no other replica could take them); the asking broker retries, then
stops anyway. NOT_CONTROLLER at any other broker."""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.CONTROLLED_SHUTDOWN


async def handle(broker, request) -> dict:
    if not broker.authorize(request, "ClusterAction", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "remaining_partitions": []}
    try:
        remaining = await broker.partitions.controlled_shutdown(request.body.broker_id)
    except TopicError as exc:
        return {"error_code": exc.code, "remaining_partitions": []}
    return {"error_code": ErrorCode.NONE,
            "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}
