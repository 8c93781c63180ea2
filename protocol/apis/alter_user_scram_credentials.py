"""AlterUserScramCredentials (key 51), v0, flexible (KIP-554): add, replace or delete users'
SCRAM credentials; the client sends the salted password, never the password."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BYTES, INT8, INT16, INT32, STRING

ALTER_USER_SCRAM_CREDENTIALS = Api(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    "AlterUserScramCredentials",
    versions=(0, 0),
    flexible="0+",
    request=(
        Field("deletions", Array(
            Field("name", STRING),
            Field("mechanism", INT8),
        )),
        Field("upsertions", Array(
            Field("name", STRING),
            Field("mechanism", INT8),
            Field("iterations", INT32),
            Field("salt", BYTES),
            Field("salted_password", BYTES),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("results", Array(
            Field("user", STRING),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+", default=None),
        )),
    ),
)
