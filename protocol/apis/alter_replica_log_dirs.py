"""AlterReplicaLogDirs (key 34), v0-v2 (KIP-113): move replicas of this broker to another of
its log dirs. v1 is v0 (it only says the throttle applies before the response); v2 is flexible.
Kafka 4.0 dropped v0 (its JSON says 1-2); Kafka 1.1-2.8, and the admin clients of that era,
speak it."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

ALTER_REPLICA_LOG_DIRS = Api(
    ApiKey.ALTER_REPLICA_LOG_DIRS,
    "AlterReplicaLogDirs",
    versions=(0, 2),
    flexible="2+",
    request=(
        Field("dirs", Array(
            Field("path", STRING),
            Field("topics", Array(
                Field("name", STRING),
                Field("partitions", Array(INT32)),
            )),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("results", Array(
            Field("topic_name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("error_code", INT16),
            )),
        ), default=()),
    ),
)
