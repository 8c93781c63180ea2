"""Produce (key 0), v0-v8: append producers' message sets.

acks 1 is answered once the set is appended. acks -1 is too on a single broker (the leader
is the whole ISR); in a cluster it waits until the high watermark passes the set (every ISR
member has it), REQUEST_TIMED_OUT after the request's timeout, and it is refused before
anything is written while the ISR is below ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS;
NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank while waiting). acks 0 gets no response, and a failed acks=0 request closes the connection, the only
way Kafka has to tell such a producer. Any other acks value fails every partition with
INVALID_REQUIRED_ACKS. Errors are per partition, with Kafka's codes: a refused set
(CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, ...) writes nothing. An unknown topic
answers UNKNOWN_TOPIC_OR_PARTITION (Metadata auto-creates topics, Produce never does); internal
topics refuse client writes with INVALID_TOPIC_EXCEPTION. A disk error fails the partition with
KAFKA_STORAGE_ERROR. v2 reports the log append time (-1 under CreateTime).

v3 is served so that librdkafka (it needs Produce v3 and Fetch v4 before it sends record
batches) sends magic 2 batches. A topic of magic 2 (``message.format.version`` 0.11.0 or later,
the default) stores them as they are, headers, producer ids and all; one of magic 0/1 converts
them to magic 1 as a Kafka 0.11 broker whose ``log.message.format.version`` is 0.10.2 does
(``protocol.record_batch``), and refuses what magic 1 cannot hold. Unlike Kafka a version does
not restrict the magic it carries: kafka-python, which sees an 0.10.2 broker (no Metadata v4)
and so builds magic 1 sets, sends them in the highest Produce version offered; and aiokafka
sends magic 2 batches in v2. The one restriction kept is Kafka's on zstd (KIP-110): a batch
compressed with it needs v7, older versions get UNSUPPORTED_COMPRESSION_TYPE, as their
clients could not read it back. v5 reports the log start offset, v8 the records that made a
set be refused (timestamps out of range, keyless records on a compacted topic), as Kafka 2.8.
"""

from __future__ import annotations

import logging

import trio

from minikafka.broker.handlers import CloseConnection
from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.record_batch import uses_zstd

API_KEY = ApiKey.PRODUCE
VALID_ACKS = (0, 1, -1)
ZSTD_VERSION = 7
LOG_START_OFFSET_VERSION = 5

logger = logging.getLogger(__name__)


RECORD_ERRORS_VERSION = 8


def _failed(index: int, code: ErrorCode) -> dict:
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1}


def _refused(index: int, exc: RecordError, version: int) -> dict:
    """The answer to a set refused for some of its records: v8+ names them (KIP-467) and, as
    its clients know INVALID_RECORD (Kafka 2.4+), gets that code where older versions get
    CORRUPT_MESSAGE (see ``storage.log``)."""
    if version < RECORD_ERRORS_VERSION or not exc.record_errors:
        return _failed(index, exc.code)
    code = ErrorCode.INVALID_RECORD if exc.code == ErrorCode.CORRUPT_MESSAGE else exc.code
    return {**_failed(index, code), "error_message": str(exc),
            "record_errors": [{"batch_index": batch_index, "batch_index_error_message": message}
                              for batch_index, message in exc.record_errors]}


def _produce_topic(broker, name: str, partition_data, acks: int, waits: list, version: int) -> list[dict]:
    """Append each partition's set; ``waits`` gets ``(result dict, wait)`` for each set whose
    acks the ISR does not satisfy yet (``Partitions.append``)."""
    if acks not in VALID_ACKS:
        return [_failed(p.index, ErrorCode.INVALID_REQUIRED_ACKS) for p in partition_data]
    try:
        if broker.is_internal(name):
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot produce to internal topic {name!r}")
        if not broker.partitions.topic_exists(name):
            # Kafka's Produce never creates a topic (that is Metadata's, which needs Create on
            # the cluster; a client asks it first). Unlike Kafka a name that can never exist
            # says so (INVALID_TOPIC_EXCEPTION) rather than UNKNOWN_TOPIC_OR_PARTITION.
            broker.partitions.check_topic_name(name)
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    except TopicError as exc:
        return [_failed(p.index, exc.code) for p in partition_data]
    results = []
    partitions = broker.partitions
    for partition in partition_data:
        try:
            if version < ZSTD_VERSION and partition.records and uses_zstd(partition.records):
                raise RecordError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                  f"zstd needs Produce v{ZSTD_VERSION}, not v{version}")
            # The set is a view of this request's frame, which nothing else reads: offsets are
            # assigned in it where it is writable (``framing._FrameBuffer``), no copy made.
            appended, acks_wait = partitions.append(name, partition.index, partition.records, acks, in_place=True)
        except RecordError as exc:
            logger.debug("produce to %s-%d refused: %s", name, partition.index, exc)
            results.append(_refused(partition.index, exc, version))
            continue
        except TopicError as exc:
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
                        "log_append_time_ms": appended.log_append_time,
                        "log_start_offset": _log_start_offset(partitions, name, partition.index)
                        if version >= LOG_START_OFFSET_VERSION else -1})
        if acks_wait is not None:
            waits.append((results[-1], acks_wait))
    return results


def _log_start_offset(partitions, name: str, index: int) -> int:
    try:
        return partitions.leader_log(name, index).log_start_offset
    except TopicError:  # no longer its leader: the append stands, the start is unknown here
        return -1


async def _wait_for_replication(waits: list, timeout_ms: int) -> None:
    async def wait_one(result: dict, acks_wait) -> None:
        code = await acks_wait(timeout_ms)
        if code:
            result["error_code"] = code

    async with trio.open_nursery() as nursery:
        for result, acks_wait in waits:
            nursery.start_soon(wait_one, result, acks_wait)


async def handle(broker, request) -> dict | None:
    body = request.body
    # Kafka checks this for a request holding transactional batches; a producer names its
    # transactional id exactly when it sends them.
    if body.transactional_id is not None and \
            not broker.authorize(request, "Write", "TransactionalId", body.transactional_id):
        return {"responses": [{"name": topic.name, "partition_responses": [
            _failed(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for p in topic.partition_data]}
            for topic in body.topic_data], "throttle_time_ms": 0}
    waits: list = []
    responses = [
        {"name": topic.name,
         "partition_responses": _produce_topic(broker, topic.name, topic.partition_data, body.acks, waits,
                                               request.api_version)
         if broker.authorize(request, "Write", "Topic", topic.name)
         else [_failed(p.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in topic.partition_data]}
        for topic in body.topic_data
    ]
    if waits:
        await _wait_for_replication(waits, body.timeout_ms)
    if body.acks == 0:
        failures = [(t["name"], p["index"], ErrorCode(p["error_code"]).name)
                    for t in responses for p in t["partition_responses"] if p["error_code"]]
        if failures:
            raise CloseConnection(f"acks=0 produce failed: {failures}")
        return None
    return {"responses": responses, "throttle_time_ms": 0}
