"""ListGroups (key 16), v0: every group this broker coordinates, with its protocol type
(empty for groups that only hold offsets committed outside group management)."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey

API_KEY = ApiKey.LIST_GROUPS


async def handle(broker, request) -> dict:
    error, groups = broker.group_coordinator.list_groups()
    return {"error_code": error,
            "groups": [{"group_id": group_id, "protocol_type": protocol_type}
                       for group_id, protocol_type in groups]}
