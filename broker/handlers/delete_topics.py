"""DeleteTopics (key 20), v0-v5: remove topics and their data from disk (v5: with a message
beside each error).

Per topic: UNKNOWN_TOPIC_OR_PARTITION if it does not exist, INVALID_TOPIC_EXCEPTION for an
internal topic. Committed consumer group offsets of the topic are removed with it, as Kafka
0.10.2's coordinator does (``handleDeletedPartitions``), so a re-created topic is not
consumed from the old one's offsets: here on a single broker, in a cluster by every
coordinator when the controller's UpdateMetadata drops the partitions (update_metadata.py).
On a single broker deletion is synchronous, so ``timeout_ms`` never runs out; in a cluster
the controller must be asked (NOT_CONTROLLER elsewhere), and the answer waits until every
replica is gone, or REQUEST_TIMED_OUT (the deletion goes on).
"""

from __future__ import annotations

from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DELETE_TOPICS


async def handle(broker, request) -> dict:
    responses = []
    seen = set()
    for name in request.body.topic_names:
        if name in seen:
            continue
        seen.add(name)
        if not broker.authorize(request, "Delete", "Topic", name):
            responses.append({"name": name, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
            continue
        try:
            await broker.partitions.delete_topic(name, request.body.timeout_ms)
        except TopicError as exc:
            responses.append({"name": name, "error_code": exc.code, "error_message": str(exc)})
            continue
        responses.append({"name": name, "error_code": ErrorCode.NONE})
    return {"responses": responses}

