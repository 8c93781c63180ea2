"""InitProducerId (key 22), v0-v1: a new producer id, epoch 0, for an idempotent producer.

As Kafka 2.8's ``handleInitProducerIdRequest`` without a transactional id: the principal
needs IdempotentWrite on the cluster or Write on some topic (KIP-679), else
CLUSTER_AUTHORIZATION_FAILED; the id comes from ``broker.producer_ids`` (blocks of 1,000
claimed durably, so never handed out twice). An id that cannot be claimed now (ZooKeeper or
the disk away) answers COORDINATOR_NOT_AVAILABLE, which producers retry.

A transactional id is refused with COORDINATOR_NOT_AVAILABLE: this broker has no transaction
coordinator yet (issue 26), and that is what a Kafka broker answers while none is available
(its ``__transaction_state`` cannot be created or loaded). Producers retry it until their
``max.block.ms`` / ``transaction.timeout``, so ``init_transactions`` fails by timing out rather
than with an error a client would take for a refused authorization.
"""

from __future__ import annotations

import logging

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.zookeeper import ZooKeeperError

API_KEY = ApiKey.INIT_PRODUCER_ID

logger = logging.getLogger(__name__)


async def handle(broker, request) -> dict:
    if request.body.transactional_id is not None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    if not broker.authorize(request, "IdempotentWrite", "Cluster") and \
            not broker.authorize_any(request, "Write", "Topic"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    try:
        producer_id = await broker.producer_ids.next_id()
    except (OSError, ZooKeeperError) as exc:
        logger.error("cannot claim a block of producer ids: %s", exc)
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}
