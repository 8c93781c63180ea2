"""OffsetDelete (key 47), v0: remove a group's committed offsets of some partitions.

As Kafka 2.8's KafkaApis and GroupCoordinator: DELETE on the group is needed (the top-level
GROUP_AUTHORIZATION_FAILED), READ on each topic (TOPIC_AUTHORIZATION_FAILED on its partitions),
a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION; the offsets of topics the
group's members consume stay (GROUP_SUBSCRIBED_TO_TOPIC). The group-level errors are
GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP and the coordinator's."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.OFFSET_DELETE


async def handle(broker, request) -> dict:
    body = request.body
    if not broker.authorize(request, "Delete", "Group", body.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    errors: dict[tuple[str, int], ErrorCode] = {}
    asked = []
    for topic in body.topics:
        readable = broker.authorize(request, "Read", "Topic", topic.name)
        count = broker.partitions.partition_count(topic.name)
        for entry in topic.partitions:
            key = (topic.name, entry.partition_index)
            if not readable:
                errors[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif count is None or not 0 <= entry.partition_index < count:
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                asked.append(key)
    error, deleted = (await broker.groups()).delete_offsets(body.group_id, asked)
    if error:
        return {"error_code": error}
    errors.update(deleted)
    topics: dict[str, list[dict]] = {}
    for (name, index), code in errors.items():
        topics.setdefault(name, []).append({"partition_index": index, "error_code": code})
    return {"error_code": ErrorCode.NONE,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]}
