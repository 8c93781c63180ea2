"""SaslAuthenticate (key 36), v0-v2 (KIP-152): one SASL token each way, after a SaslHandshake v1.
A failed authentication is answered with SASL_AUTHENTICATION_FAILED and a message before the
broker closes the connection, which is what lets a client report it as an authentication error
rather than a dropped connection. v1 adds the session lifetime (KIP-368; 0: the broker does
not expire sessions, as Kafka with ``connections.max.reauth.ms`` unset); v2 is flexible."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Field
from minikafka.protocol.types import BYTES, INT16, INT64, STRING

SASL_AUTHENTICATE = Api(
    ApiKey.SASL_AUTHENTICATE,
    "SaslAuthenticate",
    versions=(0, 2),
    flexible="2+",
    request=(
        Field("auth_bytes", BYTES),
    ),
    response=(
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+", default=None),
        Field("auth_bytes", BYTES, default=b""),
        Field("session_lifetime_ms", INT64, "1+", default=0),
    ),
)
