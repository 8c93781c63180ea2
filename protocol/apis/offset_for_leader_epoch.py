"""OffsetForLeaderEpoch (key 23), v0-v3 (KIP-101, KIP-320): a follower, or since KIP-320 a
consumer checking its position after a leader change, asks the leader for the end offset of a
leader epoch, to truncate its log (or find its position) where the two histories agree.

v1 answers the epoch the end offset belongs to (the largest the leader knows at or below the
one asked); v2 adds the throttle time and ``current_leader_epoch`` (fencing, -1 unchecked);
v3 the requester's ``replica_id`` (-2, a debugging client, when not given)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

OFFSET_FOR_LEADER_EPOCH = Api(
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    "OffsetForLeaderEpoch",
    versions=(0, 3),
    request=(
        Field("replica_id", INT32, "3+", default=-2),
        Field("topics", Array(
            Field("topic", STRING),
            Field("partitions", Array(
                Field("partition", INT32),
                Field("current_leader_epoch", INT32, "2+", default=-1),
                Field("leader_epoch", INT32),
            )),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, "2+", default=0),
        Field("topics", Array(
            Field("topic", STRING),
            Field("partitions", Array(
                Field("error_code", INT16),
                Field("partition", INT32),
                Field("leader_epoch", INT32, "1+", default=-1),
                Field("end_offset", INT64, default=-1),
            )),
        )),
    ),
)
