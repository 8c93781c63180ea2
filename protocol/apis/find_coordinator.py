"""FindCoordinator (key 10, "GroupCoordinator" in 0.10), v0: the coordinator of a group."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Field
from minikafka.protocol.types import INT16, INT32, STRING

FIND_COORDINATOR = Api(
    ApiKey.FIND_COORDINATOR,
    "FindCoordinator",
    versions=(0, 0),
    request=(
        Field("key", STRING),
    ),
    response=(
        Field("error_code", INT16),
        Field("node_id", INT32),
        Field("host", STRING),
        Field("port", INT32),
    ),
)
