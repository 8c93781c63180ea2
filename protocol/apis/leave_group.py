"""LeaveGroup (key 13), v0-v4. v1 adds throttle time; v3 makes it a batch of members, each by
member id or ``group_instance_id`` with its own error (KIP-345); v4 is flexible."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

LEAVE_GROUP = Api(
    ApiKey.LEAVE_GROUP,
    "LeaveGroup",
    versions=(0, 4),
    flexible="4+",
    request=(
        Field("group_id", STRING),
        Field("member_id", STRING, "0-2"),
        Field("members", Array(
            Field("member_id", STRING),
            Field("group_instance_id", STRING, nullable="3+", default=None),
        ), "3+"),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16),
        Field("members", Array(
            Field("member_id", STRING),
            Field("group_instance_id", STRING, nullable="3+", default=None),
            Field("error_code", INT16),
        ), "3+"),
    ),
)
