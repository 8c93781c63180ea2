"""FindCoordinator (key 10), v0: which broker coordinates a consumer group.

On a single broker that is always this one (``node_id``, advertised host and port), as soon
as the group coordinator is up; before that (or after shutdown began) the answer is
COORDINATOR_NOT_AVAILABLE, which clients retry.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.FIND_COORDINATOR


async def handle(broker, request) -> dict:
    error = broker.group_coordinator.find_coordinator(request.body.key)
    if error:
        return {"error_code": error, "node_id": -1, "host": "", "port": -1}
    return {"error_code": ErrorCode.NONE, "node_id": broker.node_id,
            "host": broker.advertised_host, "port": broker.advertised_port}
