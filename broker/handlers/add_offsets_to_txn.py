"""AddOffsetsToTxn (key 25), v0-v3: a group's offset commits join a producer's transaction.

As Kafka 2.8's ``handleAddOffsetsToTxnRequest``: Write on the TransactionalId
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), Read on the group (GROUP_AUTHORIZATION_FAILED); the
group's ``__consumer_offsets`` partition joins the transaction (PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH below v2).
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
FENCED_VERSION = 2


async def handle(broker, request) -> dict:
    from minikafka.broker.transactions.coordinator import fenced_error

    body = request.body
    if not broker.authorize(request, "Write", "TransactionalId", body.transactional_id):
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not broker.authorize(request, "Read", "Group", body.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    coordinator = await broker.transactions()
    if coordinator is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    error = await coordinator.add_offsets(body.transactional_id, body.producer_id, body.producer_epoch,
                                          body.group_id)
    return {"error_code": fenced_error(error, request.api_version, FENCED_VERSION)}
