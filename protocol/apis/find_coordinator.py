"""FindCoordinator (key 10, "GroupCoordinator" in 0.10), v0-v4: the coordinator of a group. v1
adds the key type (0 group, 1 transaction), throttle time and an error message; v3 is
flexible; v4 asks for several keys at once (KIP-699), each answered on its own."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT8, INT16, INT32, STRING

FIND_COORDINATOR = Api(
    ApiKey.FIND_COORDINATOR,
    "FindCoordinator",
    versions=(0, 4),
    flexible="3+",
    request=(
        Field("key", STRING, "0-3"),
        Field("key_type", INT8, "1+", default=0),
        Field("coordinator_keys", Array(STRING), "4+"),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16, "0-3"),
        Field("error_message", STRING, "1-3", nullable="1-3", default=None),
        Field("node_id", INT32, "0-3"),
        Field("host", STRING, "0-3"),
        Field("port", INT32, "0-3"),
        Field("coordinators", Array(
            Field("key", STRING),
            Field("node_id", INT32),
            Field("host", STRING),
            Field("port", INT32),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="4+", default=None),
        ), "4+"),
    ),
)
