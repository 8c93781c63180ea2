"""SaslHandshake (key 17) once the connection is past authentication.

The handshake that starts authentication on a SASL listener is answered by
broker.security.authenticator before the connection's request pipeline starts, since the bare
SASL tokens that may follow it are not requests. One arriving here came on a listener without SASL or after authentication: Kafka answers
ILLEGAL_SASL_STATE with the mechanisms it has enabled.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.SASL_HANDSHAKE


async def handle(broker, request) -> dict:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "mechanisms": broker.config.get("sasl.enabled.mechanisms")}
