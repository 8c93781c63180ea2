"""WriteTxnMarkers (key 27), v0-v1: a transaction coordinator has this broker write COMMIT or
ABORT markers to partitions it leads.

As Kafka 2.8's ``handleWriteTxnMarkersRequest``: ClusterAction on the cluster, else every
partition CLUSTER_AUTHORIZATION_FAILED; each marker written as an acks=all append
(``broker.transactions.markers.write_markers``), a ``__consumer_offsets`` partition's then
completing the producer's transactional offset commits there. The writes outlive the request
(``Broker.outlive_request``): a coordinator whose connection closes meanwhile (its broker
killed, its request timed out) must not leave a marker in the log whose offsets were never
completed, as Kafka's append callback completes them whatever became of the request.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.WRITE_TXN_MARKERS


def _answer(producer_id: int, errors: dict[tuple[str, int], ErrorCode]) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return {"producer_id": producer_id,
            "topics": [{"name": topic, "partitions": results} for topic, results in by_topic.items()]}


async def handle(broker, request) -> dict:
    from minikafka.broker.transactions.markers import write_markers

    answers = []
    allowed = broker.authorize(request, "ClusterAction", "Cluster")
    for marker in request.body.markers:
        partitions = [(topic.name, index) for topic in marker.topics for index in topic.partition_indexes]
        if not allowed:
            errors = dict.fromkeys(partitions, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        else:
            errors = await broker.outlive_request(
                lambda marker=marker, partitions=partitions: write_markers(
                    broker, producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                    coordinator_epoch=marker.coordinator_epoch, commit=marker.transaction_result,
                    partitions=partitions),
                stopped=dict.fromkeys(partitions, ErrorCode.NOT_LEADER_OR_FOLLOWER))
        answers.append(_answer(marker.producer_id, errors))
    return {"markers": answers}
