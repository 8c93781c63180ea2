"""SaslHandshake (key 17), v0 (KIP-43): the client names a SASL mechanism; the broker answers
with the mechanisms it has enabled. After a successful v0 handshake the SASL tokens travel as
bare size-prefixed frames, without request or response headers (v1 and SaslAuthenticate,
KIP-152, came with Kafka 1.0 and are not served: advertising them would make clients infer a
newer broker)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, STRING

SASL_HANDSHAKE = Api(
    ApiKey.SASL_HANDSHAKE,
    "SaslHandshake",
    versions=(0, 0),
    request=(
        Field("mechanism", STRING),
    ),
    response=(
        Field("error_code", INT16),
        Field("mechanisms", Array(STRING)),
    ),
)
