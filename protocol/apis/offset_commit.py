"""OffsetCommit (key 8), v0-v8. v0 commits without a generation (stored in ZooKeeper by old
brokers, in Kafka here); v1 adds generation, member and a per-partition commit timestamp;
v2 replaces the timestamp with a request-wide retention time (-1 = broker default), which v5
drops again (KIP-211: the broker's retention applies); v3 adds throttle time; v6 the leader
epoch of the committed offset (KIP-320); v7 ``group_instance_id`` (KIP-345); v8 is flexible."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

OFFSET_COMMIT = Api(
    ApiKey.OFFSET_COMMIT,
    "OffsetCommit",
    versions=(0, 8),
    flexible="8+",
    request=(
        Field("group_id", STRING),
        Field("generation_id_or_member_epoch", INT32, "1+", default=-1),
        Field("member_id", STRING, "1+"),
        Field("group_instance_id", STRING, "7+", nullable="7+", default=None),
        Field("retention_time_ms", INT64, "2-4", default=-1),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("committed_offset", INT64),
                Field("committed_leader_epoch", INT32, "6+", default=-1),
                Field("commit_timestamp", INT64, "1", default=-1),
                Field("committed_metadata", STRING, nullable="0+"),
            )),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, "3+"),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("error_code", INT16),
            )),
        )),
    ),
)
