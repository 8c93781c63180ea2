"""SyncGroup (key 14), v0: the leader hands out assignments, everyone receives theirs."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BYTES, INT16, INT32, STRING

SYNC_GROUP = Api(
    ApiKey.SYNC_GROUP,
    "SyncGroup",
    versions=(0, 0),
    request=(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
        Field("assignments", Array(
            Field("member_id", STRING),
            Field("assignment", BYTES),
        )),
    ),
    response=(
        Field("error_code", INT16),
        Field("assignment", BYTES),
    ),
)
