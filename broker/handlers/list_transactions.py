"""ListTransactions (key 66), v0: the transactional ids this coordinator holds, filtered by
state name and producer id (Kafka 3.0's ``handleListTransactionsRequest``): only those the
principal may Describe are listed; filter names that are no state come back as unknown."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.LIST_TRANSACTIONS


async def handle(broker, request) -> dict:
    body = request.body
    coordinator = await broker.transactions()
    if coordinator is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    error, unknown, listed = coordinator.list_transactions(set(body.state_filters), set(body.producer_id_filters))
    return {"error_code": error, "unknown_state_filters": unknown,
            "transaction_states": [
                {"transactional_id": transactional_id, "producer_id": producer_id, "transaction_state": state}
                for transactional_id, producer_id, state in listed
                if broker.authorize(request, "Describe", "TransactionalId", transactional_id)]}
