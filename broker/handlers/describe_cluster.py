"""DescribeCluster (key 60), v0-v1: the cluster's id, controller and live brokers (their
addresses on the listener the request came in on), as Kafka 3.7's AuthHelper
computeDescribeClusterResponse: the cluster's authorized operations when asked (0 for a
principal that may not Describe the cluster); v1 asking for a controller endpoint (KRaft's)
is MISMATCHED_ENDPOINT_TYPE, an unknown endpoint type UNSUPPORTED_ENDPOINT_TYPE."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.apis.describe_cluster import BROKER_ENDPOINT
from minikafka.protocol.apis.metadata import AUTHORIZED_OPERATIONS_OMITTED
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DESCRIBE_CLUSTER

_CONTROLLER_ENDPOINT = 2


async def handle(broker, request) -> dict:
    body = request.body
    if body.endpoint_type != BROKER_ENDPOINT:
        known = body.endpoint_type == _CONTROLLER_ENDPOINT
        return {"error_code": ErrorCode.MISMATCHED_ENDPOINT_TYPE if known else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                "error_message": "The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
                                 "of type CONTROLLER" if known else f"Unsupported endpoint type {body.endpoint_type}",
                "cluster_id": ""}
    await broker.partitions.cluster_view()
    brokers, controller_id = broker.partitions.brokers(request.listener)
    operations = AUTHORIZED_OPERATIONS_OMITTED
    if body.include_cluster_authorized_operations:
        operations = broker.authorized_operations(request, "Cluster") if broker.authorize(
            request, "Describe", "Cluster") else 0
    return {"error_code": ErrorCode.NONE, "cluster_id": broker.cluster_id, "controller_id": controller_id,
            "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                        for b in brokers],
            "cluster_authorized_operations": operations}
