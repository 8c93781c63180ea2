"""DescribeGroups (key 15), v0-v5: state, protocol and members of groups.

A group the broker does not know is reported as state ``Dead`` without an error, as Kafka
does. Member metadata and assignments are filled in only for a Stable group. A group the
principal may not Describe answers GROUP_AUTHORIZATION_FAILED with empty fields (Kafka's
``GroupMetadata.forError``), and is never looked up: the coordinator is not even started
for a request that describes nothing (starting it creates ``__consumer_offsets``). v3+ adds,
when asked, the operations the principal may perform on the group (KIP-430); v4+ each static
member's ``group_instance_id``.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DESCRIBE_GROUPS
# The operations Kafka supports on a group, with their AclOperation codes (bits of the answer).
_GROUP_OPERATIONS = {"Read": 3, "Delete": 6, "Describe": 8}
_NOT_ASKED = -(2**31)   # Kafka's "authorized operations not requested"


async def handle(broker, request) -> dict:
    described = []
    for group_id in request.body.groups:
        if not broker.authorize(request, "Describe", "Group", group_id):
            described.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": group_id,
                              "group_state": "", "protocol_type": "", "protocol_data": "", "members": []})
            continue
        summary = (await broker.groups()).describe_group(group_id)
        operations = _NOT_ASKED
        if request.body.include_authorized_operations:
            operations = sum(1 << code for name, code in _GROUP_OPERATIONS.items()
                             if broker.authorize(request, name, "Group", group_id))
        described.append({
            "error_code": summary.error, "group_id": group_id, "group_state": summary.state,
            "protocol_type": summary.protocol_type, "protocol_data": summary.protocol,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata, "member_assignment": m.assignment}
                        for m in summary.members],
            "authorized_operations": operations})
    return {"groups": described}
