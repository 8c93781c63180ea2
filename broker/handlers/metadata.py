"""Metadata (key 3), v0-v2: this broker, the controller (itself) and topic/partition leaders.

Follows Kafka 0.10.2: v0 asks for every topic with an empty list, v1+ with null (an empty
list then means none). Requested topics that do not exist are created when
``auto.create.topics.enable`` is on (the ``allow_auto_topic_creation`` flag only arrives in
v4); otherwise they answer UNKNOWN_TOPIC_OR_PARTITION, and names Kafka would refuse answer
INVALID_TOPIC_EXCEPTION. An all-topics request lists internal topics (``__consumer_offsets``)
too, with ``is_internal`` set from v1 on, as Kafka 0.10.2's ``metadataCache.getAllTopics`` does
for every version: clients hide them themselves (``exclude.internal.topics``). On a single
broker every partition is led by it with itself as the only replica and ISR; in a cluster the
answer is the controller's last UpdateMetadata: every live broker, the controller, and each
partition's leader (-1 with LEADER_NOT_AVAILABLE while it has none), replicas and ISR. A
cluster broker that has not had that first UpdateMetadata yet (it has just started listening)
holds the request until it has (``ClusterMember.cluster_view``).
"""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.METADATA


def _topic_metadata(broker, name: str, partitions: int) -> dict:
    return {
        "error_code": ErrorCode.NONE,
        "name": name,
        "is_internal": broker.is_internal(name),
        "partitions": broker.partitions.partition_metadata(name, partitions),
    }


async def handle(broker, request) -> dict:
    await broker.partitions.cluster_view()
    requested = request.body.topics
    if requested is None or (request.api_version == 0 and not requested):
        # Topics the principal may not describe are left out, as if they did not exist.
        topics = [_topic_metadata(broker, name, count) for name, count in sorted(broker.partitions.topics().items())
                  if broker.authorize(request, "Describe", "Topic", name)]
    else:
        topics = []
        seen = set()
        for entry in requested:
            name = entry.name
            if name in seen:
                continue
            seen.add(name)
            if not broker.authorize(request, "Describe", "Topic", name) or (
                    not broker.partitions.topic_exists(name) and not broker.authorize(request, "Create", "Cluster")):
                topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []})
                continue
            try:
                await broker.partitions.ensure_topic(name)
            except TopicError as exc:
                topics.append({"error_code": exc.code, "name": name, "partitions": []})
                continue
            count = broker.partitions.partition_count(name)
            if count is None:  # deleted by another request meanwhile
                topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                               "partitions": []})
                continue
            topics.append(_topic_metadata(broker, name, count))
    brokers, controller_id = broker.partitions.brokers(request.listener)
    return {"brokers": brokers, "cluster_id": broker.cluster_id, "controller_id": controller_id,
            "topics": topics}
