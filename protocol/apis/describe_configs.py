"""DescribeConfigs (key 32), v0-v3. v1 adds ``include_synonyms``, each config's source and its
synonyms (and drops ``is_default``, which v0 derives from the source); v3 adds
``include_documentation`` and each config's type and documentation; v4 is flexible (KIP-482)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT8, INT16, INT32, STRING

DESCRIBE_CONFIGS = Api(
    ApiKey.DESCRIBE_CONFIGS,
    "DescribeConfigs",
    versions=(0, 4),
    flexible="4+",
    request=(
        Field("resources", Array(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("configuration_keys", Array(STRING), nullable="0+"),
        )),
        Field("include_synonyms", BOOLEAN, "1+", default=False),
        Field("include_documentation", BOOLEAN, "3+", default=False),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("results", Array(
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+", default=None),
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("configs", Array(
                Field("name", STRING),
                Field("value", STRING, nullable="0+"),
                Field("read_only", BOOLEAN),
                Field("config_source", INT8, "1+", default=-1),
                Field("is_default", BOOLEAN, "0", default=False),
                Field("is_sensitive", BOOLEAN),
                Field("synonyms", Array(
                    Field("name", STRING),
                    Field("value", STRING, nullable="0+"),
                    Field("source", INT8),
                ), "1+", default=()),
                Field("config_type", INT8, "3+", default=0),
                Field("documentation", STRING, "3+", nullable="0+", default=None),
            ), default=()),
        )),
    ),
)
