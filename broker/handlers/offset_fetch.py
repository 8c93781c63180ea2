"""OffsetFetch (key 9), v0-v2: a group's committed offsets.

A partition without a commit answers offset -1 with empty metadata and no error. v2 may ask
for every committed partition (``topics`` null) and carries a top-level error code; v0-v1
report a coordinator error on every requested partition instead.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.OFFSET_FETCH


async def handle(broker, request) -> dict:
    body = request.body
    requested = None   # v2's null: every partition the group committed
    if body.topics is not None:
        requested = [(topic.name, index) for topic in body.topics for index in topic.partition_indexes]
    if broker.authorize(request, "Read", "Group", body.group_id):
        error, fetched = (await broker.groups()).fetch_offsets(body.group_id, requested)
    else:
        error, fetched = ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    topics: dict[str, list[dict]] = {}
    if error and requested:
        for name, index in requested:
            topics.setdefault(name, []).append(
                {"partition_index": index, "committed_offset": -1, "metadata": "", "error_code": error})
    for entry in fetched:
        topics.setdefault(entry.topic, []).append(
            {"partition_index": entry.partition, "committed_offset": entry.offset,
             "metadata": entry.metadata, "error_code": entry.error})
    return {"topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()],
            "error_code": error}
