"""DescribeGroups (key 15), v0: state, protocol and members of groups.

A group the broker does not know is reported as state ``Dead`` without an error, as Kafka
does. Member metadata and assignments are filled in only for a Stable group. A group the
principal may not Describe answers GROUP_AUTHORIZATION_FAILED with empty fields (Kafka's
``GroupMetadata.forError``), and is never looked up: the coordinator is not even started
for a request that describes nothing (starting it creates ``__consumer_offsets``).
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DESCRIBE_GROUPS


async def handle(broker, request) -> dict:
    described = []
    for group_id in request.body.groups:
        if not broker.authorize(request, "Describe", "Group", group_id):
            described.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": group_id,
                              "group_state": "", "protocol_type": "", "protocol_data": "", "members": []})
            continue
        summary = (await broker.groups()).describe_group(group_id)
        described.append({
            "error_code": summary.error, "group_id": group_id, "group_state": summary.state,
            "protocol_type": summary.protocol_type, "protocol_data": summary.protocol,
            "members": [{"member_id": m.member_id, "client_id": m.client_id,
                         "client_host": m.client_host, "member_metadata": m.metadata,
                         "member_assignment": m.assignment} for m in summary.members]})
    return {"groups": described}
