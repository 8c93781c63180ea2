"""CreatePartitions (key 37), v0-v1: grow topics, with assignments or placed as Kafka would.

Per topic, as Kafka 2.8's KafkaApis: a topic named twice is INVALID_REQUEST, one without
ALTER on it TOPIC_AUTHORIZATION_FAILED; then Partitions.create_partitions decides
(INVALID_PARTITIONS for no more than it has, INVALID_REPLICA_ASSIGNMENT for assignments that
do not fit, NOT_CONTROLLER at a cluster's other brokers). ``validate_only`` adds nothing.
"""

from __future__ import annotations

from collections import Counter

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.CREATE_PARTITIONS


async def handle(broker, request) -> dict:
    body = request.body
    counts = Counter(topic.name for topic in body.topics)
    results = []
    for topic in body.topics:
        if counts[topic.name] > 1:
            if topic.name not in {r["name"] for r in results}:
                results.append({"name": topic.name, "error_code": ErrorCode.INVALID_REQUEST,
                                "error_message": "Duplicate topic in request."})
            continue
        if not broker.authorize(request, "Alter", "Topic", topic.name):
            results.append({"name": topic.name, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": None})
            continue
        assignments = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
        try:
            await broker.partitions.create_partitions(topic.name, topic.count, assignments,
                                                      validate_only=body.validate_only, timeout_ms=body.timeout_ms)
        except TopicError as exc:
            results.append({"name": topic.name, "error_code": exc.code, "error_message": str(exc)})
        else:
            results.append({"name": topic.name, "error_code": ErrorCode.NONE, "error_message": None})
    return {"results": results}
