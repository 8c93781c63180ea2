"""DeleteGroups (key 42), v0-v1: remove empty groups and their committed offsets.

Per group, as Kafka 2.8's KafkaApis and GroupCoordinator: DELETE on the group is needed
(GROUP_AUTHORIZATION_FAILED); then GROUP_ID_NOT_FOUND for a group the coordinator does not
have, NON_EMPTY_GROUP while it has members, or the coordinator's error (NOT_COORDINATOR in a
cluster at a broker that does not coordinate it)."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DELETE_GROUPS


async def handle(broker, request) -> dict:
    results = []
    for group_id in dict.fromkeys(request.body.groups_names):
        if not broker.authorize(request, "Delete", "Group", group_id):
            error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            error = (await broker.groups()).delete_group(group_id)
        results.append({"group_id": group_id, "error_code": error})
    return {"results": results}
