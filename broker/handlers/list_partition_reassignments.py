"""ListPartitionReassignments (key 46), v0: the partition moves in progress (of the topics and
partitions asked; topics null: all), with each one's replicas, adding and removing replicas;
answered by a cluster's controller, a single broker has none.

As Kafka 2.8's KafkaApis: DESCRIBE on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED at
the top); partitions asked for that are not being moved, or do not exist, are left out."""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS


async def handle(broker, request) -> dict:
    body = request.body
    if not broker.authorize(request, "Describe", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
    keys = None if body.topics is None else [
        (topic.name, partition) for topic in body.topics for partition in topic.partition_indexes]
    try:
        moving = await broker.partitions.list_reassignments(keys)
    except TopicError as exc:
        return {"error_code": exc.code, "error_message": str(exc)}
    topics: dict[str, list[dict]] = {}
    for (topic, partition), (replicas, adding, removing) in sorted(moving.items()):
        topics.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas,
                                             "adding_replicas": adding, "removing_replicas": removing})
    return {"topics": [{"name": topic, "partitions": partitions} for topic, partitions in topics.items()]}
