"""LeaveGroup (key 13), v0."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Field
from minikafka.protocol.types import INT16, STRING

LEAVE_GROUP = Api(
    ApiKey.LEAVE_GROUP,
    "LeaveGroup",
    versions=(0, 0),
    request=(
        Field("group_id", STRING),
        Field("member_id", STRING),
    ),
    response=(
        Field("error_code", INT16),
    ),
)
