"""SyncGroup (key 14), v0-v5: the leader hands in the assignment, every member gets its part.

A follower's answer waits for the leader's SyncGroup of the same generation. v3 names the
static member (a fenced one gets FENCED_INSTANCE_ID); v5 checks the protocol type and name the
member was given and answers with the group's.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.SYNC_GROUP


async def handle(broker, request) -> dict:
    body = request.body
    if not broker.authorize(request, "Read", "Group", body.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "assignment": b""}
    assignments = {entry.member_id: bytes(entry.assignment) for entry in body.assignments}
    result = await (await broker.groups()).sync_group(
        body.group_id, body.generation_id, body.member_id, assignments,
        group_instance_id=body.group_instance_id, protocol_type=body.protocol_type,
        protocol=body.protocol_name)
    return {"error_code": result.error, "assignment": result.assignment,
            "protocol_type": result.protocol_type, "protocol_name": result.protocol}
