"""AlterPartitionReassignments (key 45), v0: partitions moved to other replicas, or their
moves cancelled (replicas null), by a cluster's controller (Partitions.alter_reassignments);
a single broker accepts only itself.

As Kafka 2.8's KafkaApis: ALTER on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED at the
top and on every partition); an error of the whole request (NOT_CONTROLLER) goes at the top;
each partition has its own error and message otherwise."""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS


async def handle(broker, request) -> dict:
    body = request.body
    asked = {(topic.name, entry.partition_index): None if entry.replicas is None else list(entry.replicas)
             for topic in body.topics for entry in topic.partitions}
    if not broker.authorize(request, "Alter", "Cluster"):
        # Kafka's getErrorResponse: the error at the top and on every partition asked.
        message = "Cluster authorization failed."
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": message,
                "responses": _by_topic({key: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, message) for key in asked})}
    try:
        results = await broker.partitions.alter_reassignments(asked, body.timeout_ms)
    except TopicError as exc:
        return {"error_code": exc.code, "error_message": str(exc)}
    return {"responses": _by_topic(results)}


def _by_topic(results: dict[tuple[str, int], tuple[ErrorCode, str | None]]) -> list[dict]:
    topics: dict[str, list[dict]] = {}
    for (topic, partition), (code, message) in results.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code,
                                             "error_message": message})
    return [{"name": topic, "partitions": partitions} for topic, partitions in topics.items()]
