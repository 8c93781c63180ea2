"""JoinGroup (key 11), v0-v1. v1 adds the rebalance timeout (KIP-62)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BYTES, INT16, INT32, STRING

JOIN_GROUP = Api(
    ApiKey.JOIN_GROUP,
    "JoinGroup",
    versions=(0, 1),
    request=(
        Field("group_id", STRING),
        Field("session_timeout_ms", INT32),
        Field("rebalance_timeout_ms", INT32, "1+", default=-1),
        Field("member_id", STRING),
        Field("protocol_type", STRING),
        Field("protocols", Array(
            Field("name", STRING),
            Field("metadata", BYTES),
        )),
    ),
    response=(
        Field("error_code", INT16),
        Field("generation_id", INT32, default=-1),
        Field("protocol_name", STRING),
        Field("leader", STRING),
        Field("member_id", STRING),
        Field("members", Array(
            Field("member_id", STRING),
            Field("metadata", BYTES),
        )),
    ),
)
