"""AddPartitionsToTxn (key 24), v0-v3: partitions join a producer's transaction.

As Kafka 2.8's ``handleAddPartitionToTxnRequest``: Write on the TransactionalId, else every
partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED; then Write on each topic
(TOPIC_AUTHORIZATION_FAILED) and each partition known (UNKNOWN_TOPIC_OR_PARTITION), the others
OPERATION_NOT_ATTEMPTED when one fails; else the coordinator's answer for all of them
(PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2).
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
FENCED_VERSION = 2


def _answer(errors: dict[tuple[str, int], ErrorCode]) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": error})
    return {"results_by_topic_v3_and_below": [{"name": topic, "results_by_partition": results}
                                              for topic, results in by_topic.items()]}


async def handle(broker, request) -> dict:
    from minikafka.broker.transactions.coordinator import fenced_error

    body = request.body
    transactional_id = body.v3_and_below_transactional_id
    partitions = [(topic.name, partition) for topic in body.v3_and_below_topics for partition in topic.partitions]
    if not broker.authorize(request, "Write", "TransactionalId", transactional_id):
        return _answer(dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    failed: dict[tuple[str, int], ErrorCode] = {}
    topics = broker.partitions.topics()
    for topic, partition in partitions:
        if not broker.authorize(request, "Write", "Topic", topic):
            failed[(topic, partition)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not 0 <= partition < topics.get(topic, 0):
            failed[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        return _answer({tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions})
    coordinator = await broker.transactions()
    if coordinator is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        error = await coordinator.add_partitions(transactional_id, body.v3_and_below_producer_id,
                                                 body.v3_and_below_producer_epoch, set(partitions))
    return _answer(dict.fromkeys(partitions, fenced_error(error, request.api_version, FENCED_VERSION)))
