"""LeaveGroup (key 13), v0: a member leaves at once; the others rebalance without waiting
for its session to time out."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey

API_KEY = ApiKey.LEAVE_GROUP


async def handle(broker, request) -> dict:
    body = request.body
    return {"error_code": broker.group_coordinator.leave_group(body.group_id, body.member_id)}
