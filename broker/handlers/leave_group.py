"""LeaveGroup (key 13), v0-v4: members leave at once; the others rebalance without waiting
for their sessions to time out. v0-v2 name one member, whose error is the answer's; from v3 a
batch, each member by member id or by ``group_instance_id`` (KIP-345) with its own error."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.LEAVE_GROUP


async def handle(broker, request) -> dict:
    body = request.body
    if request.api_version < 3:
        leaving = [(body.member_id, None)]
    else:
        leaving = [(member.member_id, member.group_instance_id) for member in body.members]
    if not broker.authorize(request, "Read", "Group", body.group_id):
        error, errors = ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    else:
        error, errors = (await broker.groups()).leave_members(body.group_id, leaving)
    if request.api_version < 3:
        return {"error_code": error or (errors[0] if errors else ErrorCode.NONE)}
    return {"error_code": error,
            "members": [{"member_id": member_id, "group_instance_id": instance_id, "error_code": member_error}
                        for (member_id, instance_id), member_error in zip(leaving, errors)]}
