"""CreateAcls (key 30), v0-v3. v1 adds the resource pattern type (KIP-290; v0 means LITERAL),
v2 is flexible, v3 allows the USER resource type (refused here, broker.security.acl_admin)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT8, INT16, INT32, STRING

CREATE_ACLS = Api(
    ApiKey.CREATE_ACLS,
    "CreateAcls",
    versions=(0, 3),
    flexible="2+",
    request=(
        Field("creations", Array(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("resource_pattern_type", INT8, "1+", default=3),
            Field("principal", STRING),
            Field("host", STRING),
            Field("operation", INT8),
            Field("permission_type", INT8),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("results", Array(
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+", default=None),
        )),
    ),
)
