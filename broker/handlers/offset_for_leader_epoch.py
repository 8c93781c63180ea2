"""OffsetForLeaderEpoch (key 23), v0 (KIP-101): the end offset of a leader epoch.

A follower asks where the leader's log for ``leader_epoch`` ends, to truncate its own log to
the point both agree on. On a single broker the answer comes straight from the partition's
leader epoch cache: the start offset of the next higher epoch, or the log end offset for the
latest epoch, or -1 (UNDEFINED_EPOCH_OFFSET) for an epoch older than any the cache holds.
"""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH


async def handle(broker, request) -> dict:
    topics = []
    allowed = broker.authorize(request, "ClusterAction", "Cluster")
    for topic in request.body.topics:
        partitions = []
        for entry in topic.partitions:
            if not allowed:
                partitions.append({"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "partition": entry.partition})
                continue
            try:  # only the leader knows where its epochs end
                log = broker.partitions.leader_log(topic.topic, entry.partition)
            except TopicError as exc:
                partitions.append({"error_code": exc.code, "partition": entry.partition, "end_offset": -1})
                continue
            _epoch, end_offset = log.leader_epoch_cache.end_offset_for(entry.leader_epoch)
            partitions.append({"error_code": ErrorCode.NONE, "partition": entry.partition,
                               "end_offset": end_offset})
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"topics": topics}
