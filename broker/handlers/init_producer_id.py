"""InitProducerId (key 22), v0-v4: a producer id and epoch, for an idempotent producer or a
transactional one.

As Kafka 2.8's ``handleInitProducerIdRequest``. Without a transactional id: the principal
needs IdempotentWrite on the cluster or Write on some topic (KIP-679), else
CLUSTER_AUTHORIZATION_FAILED; the id comes from ``broker.producer_ids`` (blocks of 1,000
claimed durably, so never handed out twice). With one: Write on the TransactionalId, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; the transaction coordinator answers
(``TransactionCoordinator.init_producer_id``: epoch bump, fencing, KIP-360 at v3+), and a
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v4, which older clients know. An id that cannot
be claimed now (ZooKeeper or the disk away) answers COORDINATOR_NOT_AVAILABLE, which producers
retry.
"""

from __future__ import annotations

import logging

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.zookeeper import ZooKeeperError

API_KEY = ApiKey.INIT_PRODUCER_ID
FENCED_VERSION = 4

logger = logging.getLogger(__name__)


async def handle(broker, request) -> dict:
    body = request.body
    try:
        if body.transactional_id is not None:
            return await _transactional(broker, request)
        if not broker.authorize(request, "IdempotentWrite", "Cluster") and \
                not broker.authorize_any(request, "Write", "Topic"):
            return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
        producer_id = await broker.producer_ids.next_id()
    except (OSError, ZooKeeperError) as exc:
        logger.error("cannot claim a block of producer ids: %s", exc)
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}


async def _transactional(broker, request) -> dict:
    from minikafka.broker.transactions.coordinator import fenced_error

    body = request.body
    if not broker.authorize(request, "Write", "TransactionalId", body.transactional_id):
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    coordinator = await broker.transactions()
    if coordinator is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    error, producer_id, epoch = await coordinator.init_producer_id(
        body.transactional_id, body.transaction_timeout_ms, body.producer_id, body.producer_epoch)
    if error:
        return {"error_code": fenced_error(error, request.api_version, FENCED_VERSION)}
    return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": epoch}
