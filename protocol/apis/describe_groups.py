"""DescribeGroups (key 15), v0."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BYTES, INT16, STRING

DESCRIBE_GROUPS = Api(
    ApiKey.DESCRIBE_GROUPS,
    "DescribeGroups",
    versions=(0, 0),
    request=(
        Field("groups", Array(STRING)),
    ),
    response=(
        Field("groups", Array(
            Field("error_code", INT16),
            Field("group_id", STRING),
            Field("group_state", STRING),
            Field("protocol_type", STRING),
            Field("protocol_data", STRING),
            Field("members", Array(
                Field("member_id", STRING),
                Field("client_id", STRING),
                Field("client_host", STRING),
                Field("member_metadata", BYTES),
                Field("member_assignment", BYTES),
            )),
        )),
    ),
)
