"""OffsetForLeaderEpoch (key 23), v0 (KIP-101): a follower asks the leader for the end offset of
a leader epoch, to truncate its log to the point where the two agree."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

OFFSET_FOR_LEADER_EPOCH = Api(
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    "OffsetForLeaderEpoch",
    versions=(0, 0),
    request=(
        Field("topics", Array(
            Field("topic", STRING),
            Field("partitions", Array(
                Field("partition", INT32),
                Field("leader_epoch", INT32),
            )),
        )),
    ),
    response=(
        Field("topics", Array(
            Field("topic", STRING),
            Field("partitions", Array(
                Field("error_code", INT16),
                Field("partition", INT32),
                Field("end_offset", INT64, default=-1),
            )),
        )),
    ),
)
