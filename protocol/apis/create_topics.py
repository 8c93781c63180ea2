"""CreateTopics (key 19), v0-v1. v1 adds ``validate_only`` and per-topic error messages."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, STRING

CREATE_TOPICS = Api(
    ApiKey.CREATE_TOPICS,
    "CreateTopics",
    versions=(0, 1),
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
        Field("topics", Array(
            Field("name", STRING),
            Field("error_code", INT16),
            Field("error_message", STRING, "1+", nullable="0+", default=None),
        )),
    ),
)
