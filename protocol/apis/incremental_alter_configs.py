"""IncrementalAlterConfigs (key 44), v0 (KIP-339): set, delete, append to or subtract from
single configs of a resource, leaving the others as they are."""

from minikafka.protocol.apis.alter_configs import ALTER_CONFIGS_RESPONSE
from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT8, STRING

INCREMENTAL_ALTER_CONFIGS = Api(
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    "IncrementalAlterConfigs",
    versions=(0, 0),
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
