"""Heartbeat (key 12), v0-v4. v1 adds throttle time; v3 ``group_instance_id`` (KIP-345); v4 is
flexible."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Field
from minikafka.protocol.types import INT16, INT32, STRING

HEARTBEAT = Api(
    ApiKey.HEARTBEAT,
    "Heartbeat",
    versions=(0, 4),
    flexible="4+",
    request=(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
        Field("group_instance_id", STRING, "3+", nullable="3+", default=None),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16),
    ),
)
