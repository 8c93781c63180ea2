"""SyncGroup (key 14), v0-v5: the leader hands out assignments, everyone receives theirs. v1
adds throttle time; v3 ``group_instance_id`` (KIP-345); v4 is flexible; v5 carries the
protocol type and name both ways (KIP-559)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BYTES, INT16, INT32, STRING

SYNC_GROUP = Api(
    ApiKey.SYNC_GROUP,
    "SyncGroup",
    versions=(0, 5),
    flexible="4+",
    request=(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
        Field("group_instance_id", STRING, "3+", nullable="3+", default=None),
        Field("protocol_type", STRING, "5+", nullable="5+", default=None),
        Field("protocol_name", STRING, "5+", nullable="5+", default=None),
        Field("assignments", Array(
            Field("member_id", STRING),
            Field("assignment", BYTES),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16),
        Field("protocol_type", STRING, "5+", nullable="5+", default=None),
        Field("protocol_name", STRING, "5+", nullable="5+", default=None),
        Field("assignment", BYTES),
    ),
)
