"""EndTxn (key 26), v0-v3: commit or abort a producer's transaction.

As Kafka 2.8's ``handleEndTxnRequest``: Write on the TransactionalId
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); answered once PrepareCommit/PrepareAbort is in
``__transaction_state``, the markers follow (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2).
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.END_TXN
FENCED_VERSION = 2


async def handle(broker, request) -> dict:
    from minikafka.broker.transactions.coordinator import fenced_error

    body = request.body
    if not broker.authorize(request, "Write", "TransactionalId", body.transactional_id):
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    coordinator = await broker.transactions()
    if coordinator is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    error = await coordinator.end_txn(body.transactional_id, body.producer_id, body.producer_epoch, body.committed)
    return {"error_code": fenced_error(error, request.api_version, FENCED_VERSION)}
