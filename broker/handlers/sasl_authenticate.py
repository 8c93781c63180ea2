"""SaslAuthenticate (key 36) once the connection is past authentication.

The SaslAuthenticate requests of an authentication in progress are answered by
broker.security.authenticator, before the connection's request pipeline starts. One arriving
here came on a listener without SASL or after authentication: Kafka answers ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.SASL_AUTHENTICATE


async def handle(broker, request) -> dict:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful authentication"}
