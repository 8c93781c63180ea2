"""OffsetFetch (key 9), v0-v8. v2 accepts null topics (all committed partitions) and adds a
top-level error code; v3 throttle time; v5 the committed leader epoch (KIP-320); v6 is
flexible; v7 ``require_stable`` (KIP-447); v8 asks for several groups at once (KIP-709),
each answered with its own topics and error code."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, INT64, STRING

OFFSET_FETCH = Api(
    ApiKey.OFFSET_FETCH,
    "OffsetFetch",
    versions=(0, 8),
    flexible="6+",
    request=(
        Field("group_id", STRING, "0-7"),
        Field("topics", Array(
            Field("name", STRING),
            Field("partition_indexes", Array(INT32)),
        ), "0-7", nullable="2-7"),
        Field("groups", Array(
            Field("group_id", STRING),
            Field("topics", Array(
                Field("name", STRING),
                Field("partition_indexes", Array(INT32)),
            ), nullable="8+"),
        ), "8+"),
        Field("require_stable", BOOLEAN, "7+", default=False),
    ),
    response=(
        Field("throttle_time_ms", INT32, "3+"),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("committed_offset", INT64),
                Field("committed_leader_epoch", INT32, "5-7", default=-1),
                Field("metadata", STRING, nullable="0-7"),
                Field("error_code", INT16),
            )),
        ), "0-7"),
        Field("error_code", INT16, "2-7"),
        Field("groups", Array(
            Field("group_id", STRING),
            Field("topics", Array(
                Field("name", STRING),
                Field("partitions", Array(
                    Field("partition_index", INT32),
                    Field("committed_offset", INT64),
                    Field("committed_leader_epoch", INT32, default=-1),
                    Field("metadata", STRING, nullable="8+"),
                    Field("error_code", INT16),
                )),
            )),
            Field("error_code", INT16),
        ), "8+"),
    ),
)
