"""Heartbeat (key 12), v0."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Field
from minikafka.protocol.types import INT16, INT32, STRING

HEARTBEAT = Api(
    ApiKey.HEARTBEAT,
    "Heartbeat",
    versions=(0, 0),
    request=(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
    ),
    response=(
        Field("error_code", INT16),
    ),
)
