"""TxnOffsetCommit (key 28), v0-v3: a transactional producer's consumed offsets, committed
with its transaction (KIP-98). v2 adds the committed leader epoch (KIP-320); v3 is flexible
and carries the consumer's generation, member id and group instance id, which the group
coordinator checks as OffsetCommit does (KIP-447)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

TXN_OFFSET_COMMIT = Api(
    ApiKey.TXN_OFFSET_COMMIT,
    "TxnOffsetCommit",
    versions=(0, 3),
    flexible="3+",
    request=(
        Field("transactional_id", STRING),
        Field("group_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
        Field("generation_id", INT32, "3+", default=-1),
        Field("member_id", STRING, "3+", default=""),
        Field("group_instance_id", STRING, "3+", nullable="3+", default=None),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("committed_offset", INT64),
                Field("committed_leader_epoch", INT32, "2+", default=-1),
                Field("committed_metadata", STRING, nullable="0+"),
            )),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("error_code", INT16),
            )),
        )),
    ),
)
