"""Metadata (key 3), v0-v8: this broker, the controller (itself) and topic/partition leaders.

Follows Kafka 0.10.2, and Kafka 2.8 for what later versions add: v0 asks for every topic with
an empty list, v1+ with null (an empty list then means none). Requested topics that do not
exist are created when ``auto.create.topics.enable`` is on and, from v4, the request's
``allow_auto_topic_creation`` too; otherwise they answer UNKNOWN_TOPIC_OR_PARTITION, and names
Kafka would refuse answer INVALID_TOPIC_EXCEPTION. v8's authorized operations are computed
only when asked for (KIP-430), over the operations the authorizer knows. An all-topics request lists internal topics (``__consumer_offsets``)
too, with ``is_internal`` set from v1 on, as Kafka 0.10.2's ``metadataCache.getAllTopics`` does
for every version: clients hide them themselves (``exclude.internal.topics``). On a single
broker every partition is led by it with itself as the only replica and ISR; in a cluster the
answer is the controller's last UpdateMetadata: every live broker, the controller, and each
partition's leader (-1 with LEADER_NOT_AVAILABLE while it has none), replicas and ISR. A
cluster broker that has not had that first UpdateMetadata yet (it has just started listening)
holds the request until it has (``ClusterMember.cluster_view``).

v10+ answer each topic's id (KIP-516), the same from every broker of a cluster; v12 may ask
for topics by id alone, as Kafka 3.x: an id no topic has answers UNKNOWN_TOPIC_ID with a null
name, and ids (or null names) in a v10-v11 request make it INVALID_REQUEST on every topic.
"""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.apis.metadata import AUTHORIZED_OPERATIONS_OMITTED
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.types import ZERO_UUID

API_KEY = ApiKey.METADATA

def _topic_metadata(broker, request, name: str, partitions: int) -> dict:
    return {
        "error_code": ErrorCode.NONE,
        "name": name,
        "is_internal": broker.is_internal(name),
        "partitions": broker.partitions.partition_metadata(name, partitions),
        "topic_authorized_operations": broker.authorized_operations(request, "Topic", name)
        if request.body.include_topic_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED,
    }


async def handle(broker, request) -> dict:
    await broker.partitions.cluster_view()
    topics = await _topics(broker, request)
    if request.api_version >= 10:
        ids = await broker.partitions.topic_ids([t["name"] for t in topics if t["name"] is not None])
        for topic in topics:
            topic.setdefault("topic_id", ids.get(topic["name"], ZERO_UUID))
    brokers, controller_id = broker.partitions.brokers(request.listener)
    return {"brokers": brokers, "cluster_id": broker.cluster_id, "controller_id": controller_id,
            "topics": topics,
            "cluster_authorized_operations": broker.authorized_operations(request, "Cluster")
            if request.body.include_cluster_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED}


async def _topics(broker, request) -> list[dict]:
    requested = request.body.topics
    may_create = request.body.allow_auto_topic_creation
    if requested and request.api_version >= 10:
        by_id = [entry for entry in requested if entry.topic_id != ZERO_UUID or entry.name is None]
        if by_id and request.api_version < 12:
            # Kafka's getErrorResponse for its InvalidRequestException: every topic, one error
            # (a null name, not nullable before v12, answered empty).
            return [{"error_code": ErrorCode.INVALID_REQUEST, "name": entry.name or "", "topic_id": entry.topic_id,
                     "partitions": []} for entry in requested]
        if by_id:
            return await _topics_by_id(broker, request, requested)
    if requested is None or (request.api_version == 0 and not requested):
        # Topics the principal may not describe are left out, as if they did not exist.
        topics = [_topic_metadata(broker, request, name, count)
                  for name, count in sorted(broker.partitions.topics().items())
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
                    not broker.partitions.topic_exists(name) and may_create
                    and not broker.authorize(request, "Create", "Cluster")):
                topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []})
                continue
            try:
                await broker.partitions.ensure_topic(name, may_create=may_create)
            except TopicError as exc:
                topics.append({"error_code": exc.code, "name": name, "partitions": []})
                continue
            count = broker.partitions.partition_count(name)
            if count is None:  # deleted by another request meanwhile
                topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                               "partitions": []})
                continue
            topics.append(_topic_metadata(broker, request, name, count))
    return topics


async def _topics_by_id(broker, request, requested) -> list[dict]:
    """Kafka 3.7's Metadata by topic id: never creates a topic; an id that is unknown, or
    whose topic the principal may not describe, is UNKNOWN_TOPIC_ID (as Kafka, so as not to
    tell which ids exist)."""
    names = await broker.partitions.topic_names_by_id()
    topics = []
    for entry in requested:
        name = names.get(entry.topic_id)
        count = None if name is None else broker.partitions.partition_count(name)
        if count is None or not broker.authorize(request, "Describe", "Topic", name):
            topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": entry.topic_id,
                           "partitions": []})
        else:
            topics.append(_topic_metadata(broker, request, name, count))
    return topics
