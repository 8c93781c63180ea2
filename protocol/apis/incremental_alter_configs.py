"""IncrementalAlterConfigs (key 44), v0-v1 (KIP-339; v1 is flexible): set, delete, append to or subtract from
single configs of a resource, leaving the others as they are."""

from minikafka.protocol.apis.alter_configs import ALTER_CONFIGS_RESPONSE
from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT8, STRING

INCREMENTAL_ALTER_CONFIGS = Api(
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    "IncrementalAlterConfigs",
    versions=(0, 1),
    flexible="1+",
    request=(
        Field("resources", Array(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("configs", Array(
                Field("name", STRING),
                Field("config_operation", INT8),
                Field("value", STRING, nullable="0+"),
            )),
        )),
        Field("validate_only", BOOLEAN),
    ),
    response=ALTER_CONFIGS_RESPONSE,
)
