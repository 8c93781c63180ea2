"""DescribeGroups (key 15), v0-v5. v1 adds throttle time; v3 the operations the principal may
perform on each group, when asked (KIP-430); v4 each member's ``group_instance_id``; v5 is
flexible."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, BYTES, INT16, INT32, STRING

DESCRIBE_GROUPS = Api(
    ApiKey.DESCRIBE_GROUPS,
    "DescribeGroups",
    versions=(0, 5),
    flexible="5+",
    request=(
        Field("groups", Array(STRING)),
        Field("include_authorized_operations", BOOLEAN, "3+", default=False),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
        Field("groups", Array(
            Field("error_code", INT16),
            Field("group_id", STRING),
            Field("group_state", STRING),
            Field("protocol_type", STRING),
            Field("protocol_data", STRING),
            Field("members", Array(
                Field("member_id", STRING),
                Field("group_instance_id", STRING, "4+", nullable="4+", default=None),
                Field("client_id", STRING),
                Field("client_host", STRING),
                Field("member_metadata", BYTES),
                Field("member_assignment", BYTES),
            )),
            Field("authorized_operations", INT32, "3+", default=-2147483648),
        )),
    ),
)
