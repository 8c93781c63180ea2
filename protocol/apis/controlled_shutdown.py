"""ControlledShutdown (key 7), v0-v1: a broker about to stop asks the controller to move
leadership off it first; the answer lists the partitions it still leads (empty when done).

v1 is v0 with the standard request header: v0 is the one request whose header has no
``client_id`` (see ``protocol.framing``). Kafka 0.10.2 served both but advertised only v1 in
ApiVersions; the table derived from this declaration says v0-v1, as Kafka 1.0+ does."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

CONTROLLED_SHUTDOWN = Api(
    ApiKey.CONTROLLED_SHUTDOWN,
    "ControlledShutdown",
    versions=(0, 1),
    request=(
        Field("broker_id", INT32),
    ),
    response=(
        Field("error_code", INT16),
        Field("remaining_partitions", Array(
            Field("topic_name", STRING),
            Field("partition_index", INT32),
        )),
    ),
)
