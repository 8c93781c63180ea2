"""DescribeTopicPartitions (key 75), v0 (KIP-966): topics as Metadata describes them, paged,
as Kafka 3.7's DescribeTopicPartitionsRequestHandler.

No topic list means every topic the principal may describe (the others left out); named ones
it may not describe answer TOPIC_AUTHORIZATION_FAILED, unknown ones UNKNOWN_TOPIC_OR_PARTITION.
Topics go in name order from the cursor's topic (at its partition), with at most
``response_partition_limit`` partitions in all (capped at Kafka's
``max.request.partition.size.limit`` default, 2000); ``next_cursor`` names where the next page
starts when partitions were left. A cursor topic not in the list, or a negative cursor
partition, is INVALID_REQUEST (Kafka's InvalidRequestException, on every topic). Nothing is
ever created.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.types import ZERO_UUID

API_KEY = ApiKey.DESCRIBE_TOPIC_PARTITIONS

# Kafka's max.request.partition.size.limit default.
_PARTITION_LIMIT = 2000


async def handle(broker, request) -> dict:
    body = request.body
    cursor = body.cursor
    requested = sorted({topic.name for topic in body.topics})
    start_topic = cursor.topic_name if cursor is not None else ""
    if cursor is not None and (cursor.partition_index < 0 or (requested and start_topic not in requested)):
        return {"topics": [_failed(name, ErrorCode.INVALID_REQUEST, broker) for name in requested or [start_topic]]}
    await broker.partitions.cluster_view()
    unauthorized = []
    if requested:
        names = []
        for name in requested:
            (names if broker.authorize(request, "Describe", "Topic", name) else unauthorized).append(name)
    else:
        names = sorted(name for name in broker.partitions.topics() if broker.authorize(request, "Describe", "Topic", name))
    names = [name for name in names if name >= start_topic]
    ids = await broker.partitions.topic_ids(names)
    remaining = max(0, min(body.response_partition_limit, _PARTITION_LIMIT))
    topics, next_cursor = [], None
    for name in names:
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        count = broker.partitions.partition_count(name)
        if count is None:
            if requested:  # every topic asked for: one that is gone is answered as gone
                topics.append(_failed(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, broker))
            continue
        first = cursor.partition_index if cursor is not None and name == start_topic else 0
        partitions = [p for p in broker.partitions.partition_metadata(name, count) if p["partition_index"] >= first]
        if len(partitions) > remaining:
            next_cursor = {"topic_name": name, "partition_index": partitions[remaining]["partition_index"]}
            partitions = partitions[:remaining]
        remaining -= len(partitions)
        topics.append({"error_code": ErrorCode.NONE, "name": name, "topic_id": ids.get(name, ZERO_UUID),
                       "is_internal": broker.is_internal(name), "partitions": partitions,
                       "topic_authorized_operations": broker.authorized_operations(request, "Topic", name)})
        if next_cursor is not None:
            break
    topics += [_failed(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, broker) for name in unauthorized]
    return {"topics": topics, "next_cursor": next_cursor}


def _failed(name: str, code: ErrorCode, broker) -> dict:
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": broker.is_internal(name),
            "partitions": []}
