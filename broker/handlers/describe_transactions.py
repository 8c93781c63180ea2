"""DescribeTransactions (key 65), v0: each transactional id's state (Kafka 3.0's
``handleDescribeTransactionsRequest``): Describe on the TransactionalId, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an id the coordinator does not hold is
TRANSACTIONAL_ID_NOT_FOUND."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS


async def handle(broker, request) -> dict:
    coordinator = await broker.transactions()
    states = []
    for transactional_id in request.body.transactional_ids:
        if not broker.authorize(request, "Describe", "TransactionalId", transactional_id):
            error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            error, described = ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            if coordinator is not None:
                error, described = coordinator.describe(transactional_id)
        states.append({"error_code": error, "transactional_id": transactional_id} if error else
                      {"error_code": ErrorCode.NONE, "transactional_id": transactional_id, **described})
    return {"transaction_states": states}
