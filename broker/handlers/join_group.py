"""JoinGroup (key 11), v0-v7: join a group or rejoin it for a rebalance.

The answer waits until the rebalance completes (see ``broker.groups.coordinator``). v0 has
no rebalance timeout; the session timeout stands in for it, as in Kafka. From v4 a dynamic
member joining without a member id is given one with MEMBER_ID_REQUIRED and joins again with
it (KIP-394); from v5 a ``group_instance_id`` makes the member static (KIP-345, see
``broker.groups.membership``).
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.JOIN_GROUP


async def handle(broker, request) -> dict:
    body = request.body
    if not broker.authorize(request, "Read", "Group", body.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "generation_id": -1,
                "protocol_name": "", "leader": "", "member_id": body.member_id, "members": []}
    rebalance_timeout_ms = body.session_timeout_ms if request.api_version == 0 else body.rebalance_timeout_ms
    result = await (await broker.groups()).join_group(
        body.group_id, body.member_id, request.client_id or "", client_host(request),
        rebalance_timeout_ms, body.session_timeout_ms, body.protocol_type,
        [(protocol.name, bytes(protocol.metadata)) for protocol in body.protocols],
        group_instance_id=body.group_instance_id,
        require_known_member_id=request.api_version >= 4 and body.group_instance_id is None)
    return {"error_code": result.error, "generation_id": result.generation_id,
            "protocol_type": result.protocol_type, "protocol_name": result.protocol,
            "leader": result.leader_id, "member_id": result.member_id,
            "members": [{"member_id": member_id, "group_instance_id": instance_id, "metadata": metadata}
                        for member_id, instance_id, metadata in result.members]}


def client_host(request) -> str:
    """The member's address as Kafka shows it (``/127.0.0.1``); empty when unknown."""
    return f"/{request.client_host}" if request.client_host else ""
