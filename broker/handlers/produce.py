"""Produce (key 0), v0-v2: append producers' message sets.

acks 1 and -1 are answered once the set is appended (on one broker the leader is the whole
ISR); acks 0 gets no response, and a failed acks=0 request closes the connection, the only
way Kafka has to tell such a producer. Any other acks value fails every partition with
INVALID_REQUIRED_ACKS. Errors are per partition, with Kafka's codes: a refused set
(CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, ...) writes nothing. Unknown topics
are created when ``auto.create.topics.enable`` is on; internal topics refuse client writes
with INVALID_TOPIC_EXCEPTION. A disk error fails the partition with KAFKA_STORAGE_ERROR.
v2 reports the log append time (-1 under CreateTime).
"""

from __future__ import annotations

import logging

from minikafka.broker.handlers import CloseConnection
from minikafka.broker.server import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode, RecordError

API_KEY = ApiKey.PRODUCE
VALID_ACKS = (0, 1, -1)

logger = logging.getLogger(__name__)


def _failed(index: int, code: ErrorCode) -> dict:
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1}


async def _produce_topic(broker, name: str, partition_data, acks: int) -> list[dict]:
    if acks not in VALID_ACKS:
        return [_failed(p.index, ErrorCode.INVALID_REQUIRED_ACKS) for p in partition_data]
    try:
        if broker.is_internal(name):
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot produce to internal topic {name!r}")
        await broker.ensure_topic(name)
    except TopicError as exc:
        return [_failed(p.index, exc.code) for p in partition_data]
    results = []
    for partition in partition_data:
        try:
            appended = broker.append(name, partition.index, partition.records)
        except (RecordError, TopicError) as exc:
            logger.debug("produce to %s-%d refused: %s", name, partition.index, exc)
            results.append(_failed(partition.index, exc.code))
            continue
        except OSError as exc:  # the disk, not the request: the partition fails, the connection stays
            # Nothing of the set was kept (storage cuts a failed append back); one line, as a
            # full disk fails every append until space is freed.
            logger.error("append to %s-%d failed: %s", name, partition.index, exc)
            results.append(_failed(partition.index, ErrorCode.KAFKA_STORAGE_ERROR))
            continue
        results.append({"index": partition.index, "error_code": ErrorCode.NONE,
                        "base_offset": appended.first_offset,
                        "log_append_time_ms": appended.log_append_time})
    return results


async def handle(broker, request) -> dict | None:
    body = request.body
    responses = [
        {"name": topic.name,
         "partition_responses": await _produce_topic(broker, topic.name, topic.partition_data, body.acks)}
        for topic in body.topic_data
    ]
    if body.acks == 0:
        failures = [(t["name"], p["index"], ErrorCode(p["error_code"]).name)
                    for t in responses for p in t["partition_responses"] if p["error_code"]]
        if failures:
            raise CloseConnection(f"acks=0 produce failed: {failures}")
        return None
    return {"responses": responses, "throttle_time_ms": 0}
