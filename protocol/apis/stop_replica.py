"""StopReplica (key 5), v0: the controller tells a broker to stop fetching (and, with
``delete_partitions``, to delete) its replicas of the listed partitions: on reassignment away
from it, on topic deletion, and on a controlled shutdown of a follower.

Field names are Kafka's JSON schema names (0.10.2's guide calls the partitions array
``partitions`` [topic, partition])."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, STRING

STOP_REPLICA = Api(
    ApiKey.STOP_REPLICA,
    "StopReplica",
    versions=(0, 0),
    request=(
        Field("controller_id", INT32),
        Field("controller_epoch", INT32),
        Field("delete_partitions", BOOLEAN),
        Field("ungrouped_partitions", Array(
            Field("topic_name", STRING),
            Field("partition_index", INT32),
        )),
    ),
    response=(
        Field("error_code", INT16),
        Field("partition_errors", Array(
            Field("topic_name", STRING),
            Field("partition_index", INT32),
            Field("error_code", INT16),
        )),
    ),
)
