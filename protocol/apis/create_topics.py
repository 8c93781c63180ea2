"""CreateTopics (key 19), v0-v4. v1 adds ``validate_only`` and per-topic error messages; v2
throttle time; v4 lets the broker default partitions and replication factor (-1, KIP-464),
which this broker does at every version. v5 is flexible and answers the created topic's
partition count, replication factor and configs (as DescribeConfigs would describe them, or
``topic_config_error_code`` when the client may not see them); v6 is v5 (KIP-599's quota
errors); v7 answers the topic's id (KIP-516)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT8, INT16, INT32, STRING, UUID

CREATE_TOPICS = Api(
    ApiKey.CREATE_TOPICS,
    "CreateTopics",
    versions=(0, 7),
    flexible="5+",
    request=(
        Field("topics", Array(
            Field("name", STRING),
            Field("num_partitions", INT32),
            Field("replication_factor", INT16),
            Field("assignments", Array(
                Field("partition_index", INT32),
                Field("broker_ids", Array(INT32)),
            )),
            Field("configs", Array(
                Field("name", STRING),
                Field("value", STRING, nullable="0+"),
            )),
        )),
        Field("timeout_ms", INT32, default=60000),
        Field("validate_only", BOOLEAN, "1+", default=False),
    ),
    response=(
        Field("throttle_time_ms", INT32, "2+"),
        Field("topics", Array(
            Field("name", STRING),
            Field("topic_id", UUID, "7+"),
            Field("error_code", INT16),
            Field("error_message", STRING, "1+", nullable="0+", default=None),
            Field("topic_config_error_code", INT16, "5+", default=0, tag=0),
            Field("num_partitions", INT32, "5+", default=-1),
            Field("replication_factor", INT16, "5+", default=-1),
            Field("configs", Array(
                Field("name", STRING),
                Field("value", STRING, nullable="5+"),
                Field("read_only", BOOLEAN),
                Field("config_source", INT8, default=-1),
                Field("is_sensitive", BOOLEAN),
            ), "5+", nullable="5+"),
        )),
    ),
)
