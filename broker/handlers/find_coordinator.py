"""FindCoordinator (key 10), v0-v4: which broker coordinates a consumer group.

On a single broker that is always this one (``node_id``, advertised host and port), as soon
as the group coordinator is up; before that (or after shutdown began) the answer is
COORDINATOR_NOT_AVAILABLE, which clients retry. In a cluster it is the leader of the group's
``__consumer_offsets`` partition (``Partitions.find_group_coordinator``). v1+ names a key type:
1 is a transactional id (Describe on it, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED): a single
broker coordinates every one, once ``__transaction_state`` is created or loaded (the
transaction coordinator starts at this first lookup); in a cluster it is the leader of the
id's ``__transaction_state`` partition, the topic created through the controller at the
first lookup (``Partitions.find_transaction_coordinator``). Any other key type is INVALID_REQUEST,
as Kafka 2.8. v4 asks for a batch of keys, each answered on its own (KIP-699).
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.FIND_COORDINATOR
_GROUP, _TRANSACTION = 0, 1


async def handle(broker, request) -> dict:
    body = request.body
    if request.api_version >= 4:
        return {"coordinators": [await _find(broker, request, key, body.key_type) | {"key": key}
                                 for key in body.coordinator_keys]}
    return await _find(broker, request, body.key, body.key_type)


async def _find(broker, request, key: str, key_type: int) -> dict:
    if key_type == _TRANSACTION:
        return await _find_transaction(broker, request, key)
    if key_type != _GROUP:
        return _error(ErrorCode.INVALID_REQUEST)
    if not broker.authorize(request, "Describe", "Group", key):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return _answer(*await broker.partitions.find_group_coordinator(key, request.listener))


def _answer(error: ErrorCode, endpoint: tuple[int, str, int] | None) -> dict:
    if error or endpoint is None:
        return _error(error or ErrorCode.COORDINATOR_NOT_AVAILABLE)
    node_id, host, port = endpoint
    return {"error_code": ErrorCode.NONE, "node_id": node_id, "host": host, "port": port}


async def _find_transaction(broker, request, key: str) -> dict:
    if not broker.authorize(request, "Describe", "TransactionalId", key):
        return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if broker.cluster is not None:
        return _answer(*await broker.partitions.find_transaction_coordinator(key, request.listener))
    coordinator = await broker.transactions()
    if coordinator is None or coordinator.find_coordinator(key):
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return _answer(ErrorCode.NONE, (broker.node_id, *broker.advertised_endpoint(request.listener)))


def _error(error: ErrorCode) -> dict:
    return {"error_code": error, "node_id": -1, "host": "", "port": -1}
