"""Metadata (key 3), v0-v2: this broker, the controller (itself) and topic/partition leaders.

Follows Kafka 0.10.2: v0 asks for every topic with an empty list, v1+ with null (an empty
list then means none). Requested topics that do not exist are created when
``auto.create.topics.enable`` is on (the ``allow_auto_topic_creation`` flag only arrives in
v4); otherwise they answer UNKNOWN_TOPIC_OR_PARTITION, and names Kafka would refuse answer
INVALID_TOPIC_EXCEPTION. An all-topics request lists internal topics (``__consumer_offsets``)
too, with ``is_internal`` set from v1 on, as Kafka 0.10.2's ``metadataCache.getAllTopics`` does
for every version: clients hide them themselves (``exclude.internal.topics``). Every partition is led by this broker with itself as the only replica and ISR.
"""

from __future__ import annotations

from minikafka.broker.server import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.METADATA


def _topic_metadata(broker, name: str, partitions: int) -> dict:
    node = broker.node_id
    return {
        "error_code": ErrorCode.NONE,
        "name": name,
        "is_internal": broker.is_internal(name),
        "partitions": [
            {"error_code": ErrorCode.NONE, "partition_index": index, "leader_id": node,
             "replica_nodes": [node], "isr_nodes": [node]}
            for index in range(partitions)
        ],
    }


async def handle(broker, request) -> dict:
    requested = request.body.topics
    if requested is None or (request.api_version == 0 and not requested):
        topics = [_topic_metadata(broker, name, count) for name, count in sorted(broker.topics().items())]
    else:
        topics = []
        seen = set()
        for entry in requested:
            name = entry.name
            if name in seen:
                continue
            seen.add(name)
            try:
                await broker.ensure_topic(name)
            except TopicError as exc:
                topics.append({"error_code": exc.code, "name": name, "partitions": []})
                continue
            count = broker.partition_count(name)
            if count is None:  # deleted by another request meanwhile
                topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                               "partitions": []})
                continue
            topics.append(_topic_metadata(broker, name, count))
    return {
        "brokers": [{"node_id": broker.node_id, "host": broker.advertised_host,
                     "port": broker.advertised_port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
    }
