"""ListOffsets (key 2), v0-v7. v0 returns up to ``max_num_offsets`` segment-boundary offsets
("old style"); v1 returns exactly one (timestamp, offset) per partition (KIP-79); v2 adds the
isolation level and the throttle time; v3 is v2; v4 (KIP-320) the requester's
``current_leader_epoch`` (fencing, -1 unchecked) and the leader epoch of the offset found; v5
is v4 that may answer OFFSET_NOT_AVAILABLE; v6 is v5, flexible; v7 (KIP-734) is v6 that may ask for
timestamp -3. Timestamps -1 and -2 mean latest and earliest, -3 the largest timestamp."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT8, INT16, INT32, INT64, STRING

LIST_OFFSETS = Api(
    ApiKey.LIST_OFFSETS,
    "ListOffsets",
    versions=(0, 7),
    flexible="6+",
    request=(
        Field("replica_id", INT32, default=-1),
        Field("isolation_level", INT8, "2+", default=0),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("current_leader_epoch", INT32, "4+", default=-1),
                Field("timestamp", INT64),
                Field("max_num_offsets", INT32, "0", default=1),
            )),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, "2+", default=0),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("old_style_offsets", Array(INT64), "0"),
                Field("timestamp", INT64, "1+", default=-1),
                Field("offset", INT64, "1+", default=-1),
                Field("leader_epoch", INT32, "4+", default=-1),
            )),
        )),
    ),
)
