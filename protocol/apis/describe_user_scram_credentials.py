"""DescribeUserScramCredentials (key 50), v0, flexible (KIP-554): which SCRAM mechanisms each
user has credentials for, and their iterations (never the credentials)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT8, INT16, INT32, STRING

DESCRIBE_USER_SCRAM_CREDENTIALS = Api(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    "DescribeUserScramCredentials",
    versions=(0, 0),
    flexible="0+",
    request=(
        Field("users", Array(
            Field("name", STRING),
        ), nullable="0+"),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+", default=None),
        Field("results", Array(
            Field("user", STRING),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+", default=None),
            Field("credential_infos", Array(
                Field("mechanism", INT8),
                Field("iterations", INT32),
            ), default=()),
        ), default=()),
    ),
)
