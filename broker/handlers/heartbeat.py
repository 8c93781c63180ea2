"""Heartbeat (key 12), v0-v4: keep a member's session; REBALANCE_IN_PROGRESS tells it to
rejoin, FENCED_INSTANCE_ID (v3+) that its static instance joined again elsewhere."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.HEARTBEAT


async def handle(broker, request) -> dict:
    body = request.body
    if not broker.authorize(request, "Read", "Group", body.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    return {"error_code": (await broker.groups()).heartbeat(body.group_id, body.member_id,
                                                             body.generation_id, body.group_instance_id)}
