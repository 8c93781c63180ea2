"""DeleteGroups (key 42), v0-v2 (v1 changes nothing on the wire, v2 is flexible): remove empty consumer groups
and their committed offsets."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

DELETE_GROUPS = Api(
    ApiKey.DELETE_GROUPS,
    "DeleteGroups",
    versions=(0, 2),
    flexible="2+",
    request=(
        Field("groups_names", Array(STRING)),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("results", Array(
            Field("group_id", STRING),
            Field("error_code", INT16),
        )),
    ),
)
