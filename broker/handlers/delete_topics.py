"""DeleteTopics (key 20), v0-v6: remove topics and their data from disk (v5: with a message
beside each error; v6: topics named by name or by topic id, KIP-516).

Per topic: UNKNOWN_TOPIC_OR_PARTITION if it does not exist, INVALID_TOPIC_EXCEPTION for an
internal topic. Committed consumer group offsets of the topic are removed with it, as Kafka
0.10.2's coordinator does (``handleDeletedPartitions``), so a re-created topic is not
consumed from the old one's offsets: here on a single broker, in a cluster by every
coordinator when the controller's UpdateMetadata drops the partitions (update_metadata.py).
On a single broker deletion is synchronous, so ``timeout_ms`` never runs out; in a cluster
the controller must be asked (NOT_CONTROLLER elsewhere), and the answer waits until every
replica is gone, or REQUEST_TIMED_OUT (the deletion goes on).

By id, as Kafka 2.8's handleDeleteTopicsRequest: an id no topic has is UNKNOWN_TOPIC_ID; a
topic the principal may not describe is TOPIC_AUTHORIZATION_FAILED without its name; an entry
with both a name and an id makes the request INVALID_REQUEST on every entry.
"""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.types import ZERO_UUID

API_KEY = ApiKey.DELETE_TOPICS


async def handle(broker, request) -> dict:
    if request.api_version < 6:
        entries = [(name, ZERO_UUID) for name in request.body.topic_names]
    else:
        entries = [(topic.name, topic.topic_id) for topic in request.body.topics]
        if any(name is not None and topic_id != ZERO_UUID for name, topic_id in entries):
            return {"responses": [{"name": name, "topic_id": topic_id, "error_code": ErrorCode.INVALID_REQUEST,
                                   "error_message": "Topic name and topic ID can not both be specified."}
                                  for name, topic_id in entries]}
        if any(topic_id != ZERO_UUID for _, topic_id in entries):
            names = await broker.partitions.topic_names_by_id()
            entries = [(names.get(topic_id) if topic_id != ZERO_UUID else name, topic_id)
                       for name, topic_id in entries]
    responses = []
    seen = set()
    for name, topic_id in entries:
        if (name, topic_id) in seen:
            continue
        seen.add((name, topic_id))
        response = {"name": name, "topic_id": topic_id, "error_code": ErrorCode.NONE}
        by_id = topic_id != ZERO_UUID
        if name is None:
            response["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
        elif by_id and not broker.authorize(request, "Describe", "Topic", name):
            response.update(name=None, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif not broker.authorize(request, "Delete", "Topic", name):
            response["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        else:
            try:
                await broker.partitions.delete_topic(name, request.body.timeout_ms)
            except TopicError as exc:
                response.update(error_code=exc.code, error_message=str(exc))
        responses.append(response)
    return {"responses": responses}
