"""ListGroups (key 16), v0."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, STRING

LIST_GROUPS = Api(
    ApiKey.LIST_GROUPS,
    "ListGroups",
    versions=(0, 0),
    request=(),
    response=(
        Field("error_code", INT16),
        Field("groups", Array(
            Field("group_id", STRING),
            Field("protocol_type", STRING),
        )),
    ),
)
