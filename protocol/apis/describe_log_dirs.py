"""DescribeLogDirs (key 35), v0-v4: the partitions in each of a broker's log dirs and their
sizes. v2 is flexible, v3 adds a top-level error, v4 each dir's total and usable bytes.

v5 is not served: kafka-python 3 reads a broker serving it as Kafka 4.3."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, INT64, STRING

DESCRIBE_LOG_DIRS = Api(
    ApiKey.DESCRIBE_LOG_DIRS,
    "DescribeLogDirs",
    versions=(0, 4),
    flexible="2+",
    request=(
        Field("topics", Array(
            Field("topic", STRING),
            Field("partitions", Array(INT32)),
        ), nullable="0+"),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16, "3+", default=0),
        Field("results", Array(
            Field("error_code", INT16),
            Field("log_dir", STRING),
            Field("topics", Array(
                Field("name", STRING),
                Field("partitions", Array(
                    Field("partition_index", INT32),
                    Field("partition_size", INT64),
                    Field("offset_lag", INT64),
                    Field("is_future_key", BOOLEAN, default=False),
                )),
            )),
            Field("total_bytes", INT64, "4+", default=-1),
            Field("usable_bytes", INT64, "4+", default=-1),
        ), default=()),
    ),
)
