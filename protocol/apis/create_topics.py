"""CreateTopics (key 19), v0-v4. v1 adds ``validate_only`` and per-topic error messages; v2
throttle time; v4 lets the broker default partitions and replication factor (-1, KIP-464),
which this broker does at every version. v5+ (flexible; the created topic's configs and, from
v7, its topic id in the answer) is not served yet: the configs want the effective-config
description DescribeConfigs gives, and topic ids are not yet one per topic across a cluster."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, STRING

CREATE_TOPICS = Api(
    ApiKey.CREATE_TOPICS,
    "CreateTopics",
    versions=(0, 4),
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
            Field("error_code", INT16),
            Field("error_message", STRING, "1+", nullable="0+", default=None),
        )),
    ),
)
