"""CreatePartitions (key 37), v0-v3 (v1 and v3 change nothing on the wire, v2 is flexible):
add partitions to topics, optionally placed on given brokers."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, STRING

CREATE_PARTITIONS = Api(
    ApiKey.CREATE_PARTITIONS,
    "CreatePartitions",
    versions=(0, 3),
    flexible="2+",
    request=(
        Field("topics", Array(
            Field("name", STRING),
            Field("count", INT32),
            Field("assignments", Array(
                Field("broker_ids", Array(INT32)),
            ), nullable="0+"),
        )),
        Field("timeout_ms", INT32),
        Field("validate_only", BOOLEAN),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("results", Array(
            Field("name", STRING),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+", default=None),
        )),
    ),
)
