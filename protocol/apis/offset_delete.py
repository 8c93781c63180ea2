"""OffsetDelete (key 47), v0 (KIP-496): remove a group's committed offsets of some partitions."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

OFFSET_DELETE = Api(
    ApiKey.OFFSET_DELETE,
    "OffsetDelete",
    versions=(0, 0),
    request=(
        Field("group_id", STRING),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
            )),
        )),
    ),
    response=(
        Field("error_code", INT16),
        Field("throttle_time_ms", INT32, default=0),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("error_code", INT16),
            )),
        ), default=()),
    ),
)
