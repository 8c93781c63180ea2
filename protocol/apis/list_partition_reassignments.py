"""ListPartitionReassignments (key 46), v0 (flexible): the partition moves in progress, with
each one's replicas and the replicas it is adding and removing (KIP-455, Kafka 2.4+)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

LIST_PARTITION_REASSIGNMENTS = Api(
    ApiKey.LIST_PARTITION_REASSIGNMENTS,
    "ListPartitionReassignments",
    versions=(0, 0),
    flexible="0+",
    request=(
        Field("timeout_ms", INT32, default=60000),
        Field("topics", Array(
            Field("name", STRING),
            Field("partition_indexes", Array(INT32)),
        ), nullable="0+", default=None),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16, default=0),
        Field("error_message", STRING, nullable="0+", default=None),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("replicas", Array(INT32)),
                Field("adding_replicas", Array(INT32)),
                Field("removing_replicas", Array(INT32)),
            )),
        ), default=()),
    ),
)
