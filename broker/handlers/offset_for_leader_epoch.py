"""OffsetForLeaderEpoch (key 23), v0-v3 (KIP-101, KIP-320): the end offset of a leader epoch.

Answered by the partition's leader from its leader epoch cache (Kafka 2.8's
Partition.lastOffsetForLeaderEpoch): the start offset of the next higher epoch, or the log end
offset for the latest epoch, with (v1+) the largest known epoch at or below the one asked;
-1/-1 for an epoch above all it knows. v2's ``current_leader_epoch`` is checked first
(FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH, ``Partitions.leader_log``).

Followers hold ClusterAction; since KIP-320 consumers ask too, so without it Describe on the
topic suffices (TOPIC_AUTHORIZATION_FAILED otherwise), as Kafka 2.1+ for every version.
"""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH


def _answer(broker, topic: str, entry) -> dict:
    try:  # only the leader knows where its epochs end
        log = broker.partitions.leader_log(topic, entry.partition, entry.current_leader_epoch)
    except TopicError as exc:
        return {"error_code": exc.code, "partition": entry.partition}
    epoch, end_offset = log.leader_epoch_cache.end_offset_for(entry.leader_epoch)
    return {"error_code": ErrorCode.NONE, "partition": entry.partition, "leader_epoch": epoch,
            "end_offset": end_offset}


async def handle(broker, request) -> dict:
    cluster_action = broker.authorize(request, "ClusterAction", "Cluster")
    topics = []
    for topic in request.body.topics:
        if cluster_action or broker.authorize(request, "Describe", "Topic", topic.topic):
            partitions = [_answer(broker, topic.topic, entry) for entry in topic.partitions]
        else:
            partitions = [{"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "partition": entry.partition}
                          for entry in topic.partitions]
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
