"""ElectLeaders (key 43), v0-v2: preferred (election type 0) or unclean (1) leader elections,
run by a cluster's controller (Partitions.elect_leaders); a single broker's only replica leads
already (ELECTION_NOT_NEEDED).

As Kafka 2.8's KafkaApis: ALTER on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED on every
partition, and at the top from v1); an unknown election type is INVALID_REQUEST; an error of the
whole request (NOT_CONTROLLER) goes at the top from v1, on every partition before."""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.ELECT_LEADERS


async def handle(broker, request) -> dict:
    body = request.body
    asked = None if body.topic_partitions is None else [
        (entry.topic, partition) for entry in body.topic_partitions for partition in entry.partitions]
    error = ErrorCode.NONE
    if not broker.authorize(request, "Alter", "Cluster"):
        error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    elif body.election_type not in (0, 1):
        error = ErrorCode.INVALID_REQUEST
    else:
        try:
            results = await broker.partitions.elect_leaders(asked, body.election_type == 1, body.timeout_ms)
        except TopicError as exc:
            error = exc.code
    if error:
        results = {key: error for key in asked or ()}
    topics: dict[str, list[dict]] = {}
    for (topic, partition), code in results.items():
        topics.setdefault(topic, []).append({"partition_id": partition, "error_code": code})
    return {"error_code": error, "replica_election_results": [
        {"topic": topic, "partition_result": partitions} for topic, partitions in topics.items()]}
