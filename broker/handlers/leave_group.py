"""LeaveGroup (key 13), v0: a member leaves at once; the others rebalance without waiting
for its session to time out."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.LEAVE_GROUP


async def handle(broker, request) -> dict:
    body = request.body
    if not broker.authorize(request, "Read", "Group", body.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    return {"error_code": (await broker.groups()).leave_group(body.group_id, body.member_id)}
