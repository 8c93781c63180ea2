"""FindCoordinator (key 10), v0: which broker coordinates a consumer group.

On a single broker that is always this one (``node_id``, advertised host and port), as soon
as the group coordinator is up; before that (or after shutdown began) the answer is
COORDINATOR_NOT_AVAILABLE, which clients retry. In a cluster it is the leader of the group's
``__consumer_offsets`` partition (``Partitions.find_group_coordinator``).
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.FIND_COORDINATOR


async def handle(broker, request) -> dict:
    if not broker.authorize(request, "Describe", "Group", request.body.key):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "node_id": -1, "host": "", "port": -1}
    error, endpoint = await broker.partitions.find_group_coordinator(request.body.key, request.listener)
    if error or endpoint is None:
        return {"error_code": error or ErrorCode.COORDINATOR_NOT_AVAILABLE, "node_id": -1, "host": "", "port": -1}
    node_id, host, port = endpoint
    return {"error_code": ErrorCode.NONE, "node_id": node_id, "host": host, "port": port}
