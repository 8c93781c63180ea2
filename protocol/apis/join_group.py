"""JoinGroup (key 11), v0-v7. v1 adds the rebalance timeout (KIP-62); v2 throttle time; v4
answers a new dynamic member MEMBER_ID_REQUIRED with its id, to join again with it (KIP-394);
v5 adds ``group_instance_id``, static membership (KIP-345); v6 is flexible; v7 names the
protocol type in the answer (KIP-559)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BYTES, INT16, INT32, STRING

JOIN_GROUP = Api(
    ApiKey.JOIN_GROUP,
    "JoinGroup",
    versions=(0, 7),
    flexible="6+",
    request=(
        Field("group_id", STRING),
        Field("session_timeout_ms", INT32),
        Field("rebalance_timeout_ms", INT32, "1+", default=-1),
        Field("member_id", STRING),
        Field("group_instance_id", STRING, "5+", nullable="5+", default=None),
        Field("protocol_type", STRING),
        Field("protocols", Array(
            Field("name", STRING),
            Field("metadata", BYTES),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, "2+"),
        Field("error_code", INT16),
        Field("generation_id", INT32, default=-1),
        Field("protocol_type", STRING, "7+", nullable="7+", default=None),
        Field("protocol_name", STRING, nullable="7+"),
        Field("leader", STRING),
        Field("member_id", STRING),
        Field("members", Array(
            Field("member_id", STRING),
            Field("group_instance_id", STRING, "5+", nullable="5+", default=None),
            Field("metadata", BYTES),
        )),
    ),
)
