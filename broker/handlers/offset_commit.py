"""OffsetCommit (key 8), v0-v8: store a group's committed offsets.

v0 carries no generation or member (a commit outside group management, generation -1);
v1 adds them and a per-partition commit timestamp (-1: now); v2 replaces the timestamp with
a request-wide retention time (-1: ``offsets.retention.minutes``), which v5 drops again;
v6 adds the committed leader epoch (KIP-320), kept with the offset for OffsetFetch v5+;
v7 names a static member (FENCED_INSTANCE_ID for its fenced former self). Offsets of topics the
broker does not have fail with UNKNOWN_TOPIC_OR_PARTITION, as in Kafka; the rest go to the
coordinator in one append, answered once that append is committed (in a cluster: below
``__consumer_offsets``' high watermark, ``offsets.commit.required.acks``).
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.OFFSET_COMMIT


async def handle(broker, request) -> dict:
    # Imported with the coordinator, when a client first uses a group (Broker.groups).
    from minikafka.broker.groups.coordinator import PartitionCommit

    body = request.body
    version = request.api_version
    generation_id = body.generation_id_or_member_epoch if version >= 1 else -1
    member_id = body.member_id if version >= 1 else ""
    retention_ms = body.retention_time_ms if version >= 2 else -1
    topics = broker.partitions.topics()
    errors: dict[tuple[str, int], ErrorCode] = {}
    commits: list[PartitionCommit] = []
    group_allowed = broker.authorize(request, "Read", "Group", body.group_id)
    for topic in body.topics:
        count = topics.get(topic.name)
        topic_allowed = group_allowed and broker.authorize(request, "Read", "Topic", topic.name)
        for partition in topic.partitions:
            if not group_allowed:
                errors[(topic.name, partition.partition_index)] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            if not topic_allowed:
                errors[(topic.name, partition.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if count is None or not 0 <= partition.partition_index < count:
                errors[(topic.name, partition.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            commits.append(PartitionCommit(
                topic.name, partition.partition_index, partition.committed_offset,
                partition.committed_metadata,
                partition.commit_timestamp if version == 1 else -1, partition.committed_leader_epoch))
    if commits:
        results = await (await broker.groups()).commit(body.group_id, member_id, generation_id,
                                                        retention_ms, commits, body.group_instance_id)
        for commit, error in zip(commits, results):
            errors[(commit.topic, commit.partition)] = error
    return {"topics": [
        {"name": topic.name,
         "partitions": [{"partition_index": p.partition_index,
                         "error_code": errors[(topic.name, p.partition_index)]}
                        for p in topic.partitions]}
        for topic in body.topics]}
