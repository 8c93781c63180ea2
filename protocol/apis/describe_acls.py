"""DescribeAcls (key 29), v0-v1. v1 adds the resource pattern type (KIP-290; v0 means LITERAL).

v2 (flexible) and v3 are not served: kafka-python 3 takes a broker serving DescribeAcls v3 for
Kafka 3.3, whose Fetch (v13, topic ids) and ListOffsets (v7) this broker does not serve; with
Produce v9 it takes it for 2.8."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT8, INT16, INT32, STRING

# Which ACLs a request names: DescribeAcls' request, each of DeleteAcls' filters.
ACL_FILTER = (
    Field("resource_type_filter", INT8),
    Field("resource_name_filter", STRING, nullable="0+"),
    Field("pattern_type_filter", INT8, "1+", default=3),
    Field("principal_filter", STRING, nullable="0+"),
    Field("host_filter", STRING, nullable="0+"),
    Field("operation", INT8),
    Field("permission_type", INT8),
)

DESCRIBE_ACLS = Api(
    ApiKey.DESCRIBE_ACLS,
    "DescribeAcls",
    versions=(0, 1),
    request=ACL_FILTER,
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+", default=None),
        Field("resources", Array(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("pattern_type", INT8, "1+", default=3),
            Field("acls", Array(
                Field("principal", STRING),
                Field("host", STRING),
                Field("operation", INT8),
                Field("permission_type", INT8),
            )),
        ), default=()),
    ),
)
