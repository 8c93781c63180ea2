"""ListGroups (key 16), v0-v4. v1 adds throttle time; v3 is flexible; v4 filters by group
state and names each group's state (KIP-518)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

LIST_GROUPS = Api(
    ApiKey.LIST_GROUPS,
    "ListGroups",
    versions=(0, 4),
    flexible="3+",
    request=(
        Field("states_filter", Array(STRING), "4+"),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16),
        Field("groups", Array(
            Field("group_id", STRING),
            Field("protocol_type", STRING),
            Field("group_state", STRING, "4+"),
        )),
    ),
)
