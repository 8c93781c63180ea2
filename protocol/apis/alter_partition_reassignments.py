"""AlterPartitionReassignments (key 45), v0 (flexible): move partitions to other replicas, or
(replicas null) cancel a move in progress (KIP-455, Kafka 2.4+). v1 (Kafka 4.1's
allow_replication_factor_change) is not served."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

ALTER_PARTITION_REASSIGNMENTS = Api(
    ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    "AlterPartitionReassignments",
    versions=(0, 0),
    flexible="0+",
    request=(
        Field("timeout_ms", INT32, default=60000),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("replicas", Array(INT32), nullable="0+", default=None),
            )),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16, default=0),
        Field("error_message", STRING, nullable="0+", default=None),
        Field("responses", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+", default=None),
            )),
        ), default=()),
    ),
)
