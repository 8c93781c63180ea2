"""ElectLeaders (key 43), v0-v2: move partitions' leadership to their preferred replica, or
(v1+, election type 1) give a leaderless partition any live replica (KIP-460). v1 adds the
top-level error, v2 is flexible."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT8, INT16, INT32, STRING

ELECT_LEADERS = Api(
    ApiKey.ELECT_LEADERS,
    "ElectLeaders",
    versions=(0, 2),
    flexible="2+",
    request=(
        Field("election_type", INT8, "1+", default=0),
        Field("topic_partitions", Array(
            Field("topic", STRING),
            Field("partitions", Array(INT32)),
        ), nullable="0+"),
        Field("timeout_ms", INT32, default=60000),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16, "1+", default=0),
        Field("replica_election_results", Array(
            Field("topic", STRING),
            Field("partition_result", Array(
                Field("partition_id", INT32),
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+", default=None),
            )),
        ), default=()),
    ),
)
