"""OffsetFetch (key 9), v0-v2. v2 accepts null topics (all committed partitions) and adds a
top-level error code."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

OFFSET_FETCH = Api(
    ApiKey.OFFSET_FETCH,
    "OffsetFetch",
    versions=(0, 2),
    request=(
        Field("group_id", STRING),
        Field("topics", Array(
            Field("name", STRING),
            Field("partition_indexes", Array(INT32)),
        ), nullable="2+"),
    ),
    response=(
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("committed_offset", INT64),
                Field("metadata", STRING, nullable="0+"),
                Field("error_code", INT16),
            )),
        )),
        Field("error_code", INT16, "2+"),
    ),
)
