"""UpdateMetadata (key 6), v0-v3: the controller's view of live brokers and partition states,
which this broker answers Metadata from; replicas held here of partitions it no longer names this
broker among are deleted. STALE_CONTROLLER_EPOCH from an older controller, or on a single broker."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.UPDATE_METADATA


async def handle(broker, request) -> dict:
    if not broker.authorize(request, "ClusterAction", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    return {"error_code": await broker.partitions.update_metadata(request.body, request.api_version)}
