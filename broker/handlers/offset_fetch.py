"""OffsetFetch (key 9), v0-v8: a group's committed offsets.

A partition without a commit answers offset -1 with empty metadata and no error. v2 may ask
for every committed partition (``topics`` null) and carries a top-level error code; v0-v1
report a coordinator error on every requested partition instead. v8 asks for several groups
at once (KIP-709), each answered as a v7 request for it alone. v5+ answer each offset's
committed leader epoch (-1 when its commit named none). ``require_stable`` (v7+, KIP-447): a
partition whose commit is still pending (waiting for replication, or in an open transaction)
answers UNSTABLE_OFFSET_COMMIT instead of an offset that is about to change; the consumer retries.

As Kafka 0.10.2's handleOffsetFetchRequest: the group needs Read (GROUP_AUTHORIZATION_FAILED),
and offsets are shown only for topics the principal may Describe: a named partition of any
other topic answers offset -1 with UNKNOWN_TOPIC_OR_PARTITION (Kafka's ``UNKNOWN_PARTITION``;
later Kafka versions say TOPIC_AUTHORIZATION_FAILED), and the every-partition form leaves
them out.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.OFFSET_FETCH


async def handle(broker, request) -> dict:
    body = request.body
    if request.api_version < 8:
        error, topics = await _fetch(broker, request, body.group_id, body.topics)
        return {"topics": topics, "error_code": error}
    groups = []
    for group in body.groups:
        error, topics = await _fetch(broker, request, group.group_id, group.topics)
        groups.append({"group_id": group.group_id, "topics": topics, "error_code": error})
    return {"groups": groups}


async def _fetch(broker, request, group_id: str, requested) -> tuple[ErrorCode, list[dict]]:
    """The group's error and its answer's topics for ``requested`` (None: every partition)."""
    wanted = None
    if requested is not None:
        wanted = [(topic.name, index) for topic in requested for index in topic.partition_indexes]
    describable: dict[str, bool] = {}

    def may_describe(topic: str) -> bool:
        if topic not in describable:
            describable[topic] = broker.authorize(request, "Describe", "Topic", topic)
        return describable[topic]

    hidden: list[tuple[str, int]] = []
    if not broker.authorize(request, "Read", "Group", group_id):
        error, fetched = ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    else:
        shown = None
        if wanted is not None:
            shown = [(name, index) for name, index in wanted if may_describe(name)]
            hidden = [(name, index) for name, index in wanted if not may_describe(name)]
        error, fetched = (await broker.groups()).fetch_offsets(group_id, shown, request.body.require_stable)
    if error:
        # Kafka's getErrorResponse: the error on every requested partition.
        answers = [(name, index, -1, -1, "", error) for name, index in wanted or []]
    else:
        answers = [(entry.topic, entry.partition, entry.offset, entry.leader_epoch, entry.metadata, entry.error)
                   for entry in fetched if may_describe(entry.topic)]
        answers += [(name, index, -1, -1, "", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for name, index in hidden]
    topics: dict[str, list[dict]] = {}
    for name, index, offset, leader_epoch, metadata, code in answers:
        topics.setdefault(name, []).append(
            {"partition_index": index, "committed_offset": offset, "committed_leader_epoch": leader_epoch,
             "metadata": metadata, "error_code": code})
    return error, [{"name": name, "partitions": partitions} for name, partitions in topics.items()]
