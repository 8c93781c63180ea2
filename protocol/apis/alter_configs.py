"""AlterConfigs (key 33), v0-v2 (v1 changes nothing on the wire, v2 is flexible): replace a
resource's whole set of dynamic configs."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT8, INT16, INT32, STRING

# The response IncrementalAlterConfigs shares: one error per resource.
ALTER_CONFIGS_RESPONSE = (
    Field("throttle_time_ms", INT32, default=0),
    Field("responses", Array(
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+", default=None),
        Field("resource_type", INT8),
        Field("resource_name", STRING),
    )),
)

ALTER_CONFIGS = Api(
    ApiKey.ALTER_CONFIGS,
    "AlterConfigs",
    versions=(0, 2),
    flexible="2+",
    request=(
        Field("resources", Array(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("configs", Array(
                Field("name", STRING),
                Field("value", STRING, nullable="0+"),
            )),
        )),
        Field("validate_only", BOOLEAN),
    ),
    response=ALTER_CONFIGS_RESPONSE,
)
