"""DeleteRecords (key 21), v0-v1: move each partition's log start offset up to the offset
asked (-1: the high watermark); the records below can no longer be read (Fetch below it is
OFFSET_OUT_OF_RANGE, ListOffsets' earliest is it), and retention and restarts keep it.

Per partition, as Kafka 2.8's KafkaApis and ReplicaManager: DELETE on the topic is needed
(TOPIC_AUTHORIZATION_FAILED), then Partitions.delete_records decides (the leader's errors,
OFFSET_OUT_OF_RANGE above the high watermark, POLICY_VIOLATION for a compacted topic). The low
watermark answered is the leader's new log start offset: unlike Kafka, which waits until every
replica has moved its log start, the answer does not wait for the followers, which take it from
the leader's Fetch responses (v5+) as they fetch; ``timeout_ms`` is therefore never used.
"""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DELETE_RECORDS


async def handle(broker, request) -> dict:
    topics = []
    for topic in request.body.topics:
        allowed = broker.authorize(request, "Delete", "Topic", topic.name)
        partitions = []
        for entry in topic.partitions:
            answer = {"partition_index": entry.partition_index, "low_watermark": -1,
                      "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
            if allowed:
                try:
                    answer["low_watermark"] = await broker.partitions.delete_records(
                        topic.name, entry.partition_index, entry.offset)
                    answer["error_code"] = ErrorCode.NONE
                except TopicError as exc:
                    answer["error_code"] = exc.code
            partitions.append(answer)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}
