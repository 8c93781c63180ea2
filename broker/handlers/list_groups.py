"""ListGroups (key 16), v0: every group this broker coordinates, with its protocol type
(empty for groups that only hold offsets committed outside group management)."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.LIST_GROUPS


async def handle(broker, request) -> dict:
    if not broker.authorize(request, "Describe", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "groups": []}
    error, groups = (await broker.groups()).list_groups()
    return {"error_code": error,
            "groups": [{"group_id": group_id, "protocol_type": protocol_type}
                       for group_id, protocol_type in groups]}
