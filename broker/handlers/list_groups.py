"""ListGroups (key 16), v0-v4: every group this broker coordinates, with its protocol type
(empty for groups that only hold offsets committed outside group management); v4 also with
its state, and only those in the states asked for (none asked: all; KIP-518). States match
regardless of case, as in Kafka 3.x's coordinator (2.8 compared exactly; clients send Kafka's
spelling, which matches either way)."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.LIST_GROUPS


async def handle(broker, request) -> dict:
    if not broker.authorize(request, "Describe", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "groups": []}
    wanted = {state.lower() for state in request.body.states_filter}
    error, groups = (await broker.groups()).list_groups()
    return {"error_code": error,
            "groups": [{"group_id": group_id, "protocol_type": protocol_type, "group_state": state}
                       for group_id, protocol_type, state in groups
                       if not wanted or state.lower() in wanted]}
