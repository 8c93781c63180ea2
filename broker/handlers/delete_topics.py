"""DeleteTopics (key 20), v0: remove topics and their data from disk.

Per topic: UNKNOWN_TOPIC_OR_PARTITION if it does not exist, INVALID_TOPIC_EXCEPTION for an
internal topic; committed consumer group offsets are not touched (Kafka keeps them until
they expire). On a single broker deletion is synchronous, so ``timeout_ms`` never runs out;
in a cluster the controller must be asked (NOT_CONTROLLER elsewhere), and the answer waits
until every replica is gone, or REQUEST_TIMED_OUT (the deletion goes on).
"""

from __future__ import annotations

from minikafka.broker.server import TopicError
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
            await broker.delete_topic(name, request.body.timeout_ms)
        except TopicError as exc:
            responses.append({"name": name, "error_code": exc.code})
        else:
            responses.append({"name": name, "error_code": ErrorCode.NONE})
    return {"responses": responses}
