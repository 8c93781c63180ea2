"""SaslHandshake (key 17), v0-v1 (KIP-43, KIP-152): the client names a SASL mechanism; the
broker answers with the mechanisms it has enabled. The version says how the tokens travel
next: after v0 as bare size-prefixed frames without request or response headers (Kafka
0.10.2), after v1 inside SaslAuthenticate requests (Kafka 1.0), whose response can carry an
error message to a refused client. The layout is the same in both versions."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, STRING

SASL_HANDSHAKE = Api(
    ApiKey.SASL_HANDSHAKE,
    "SaslHandshake",
    versions=(0, 1),
    request=(
        Field("mechanism", STRING),
    ),
    response=(
        Field("error_code", INT16),
        Field("mechanisms", Array(STRING)),
    ),
)
