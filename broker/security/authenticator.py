"""A SASL listener's side of authentication (Kafka's SaslServerAuthenticator): which frames a
connection may send before it is authenticated, and what a refused client is told.

Before authentication only ApiVersions and SaslHandshake are answered; any other request
closes the connection. The handshake's version says how the mechanism's tokens travel next
(KIP-152):

* **v0** (Kafka 0.10.2): as bare size-prefixed frames. The protocol has no room for an error
  there, so a failed authentication can only close the connection, and kafka-python and
  aiokafka report a dropped connection.
* **v1** (Kafka 1.0): inside SaslAuthenticate requests. A failure is answered with
  SASL_AUTHENTICATION_FAILED and Kafka's message before the connection closes, which every
  client reports as an authentication error.

Advertising SaslHandshake v1 and SaslAuthenticate v0 leaves the table a 0.10.2 broker's for
the clients' version inference: kafka-python infers from Metadata, OffsetFetch, Fetch, Produce
and the like, never the SASL keys, and librdkafka only turns on its SaslAuthenticate feature.

The client is told Kafka's words, which do not say whether a user exists; the log line (the
:class:`Refused` message) names the user, never a password.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from minikafka.broker.config import Listener
from minikafka.broker.security.sasl import AuthenticationFailed, PlainServer, ScramServer
from minikafka.broker.security.scram import CredentialError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode, ProtocolError
from minikafka.protocol.framing import Request, encode_frame, encode_response, parse_request


class Refused(Exception):
    """Authentication ended unsuccessfully. ``reply`` (bytes, or None) goes to the client
    before the connection closes; the message is the log line."""

    def __init__(self, message: str, reply: bytes | None = None) -> None:
        super().__init__(message)
        self.reply = reply


class SaslAuthenticator:
    """One connection's authentication: ``await receive(frame)`` for each frame the client
    sends returns the bytes to answer with, or raises :class:`Refused`; ``user`` is set once
    the client is authenticated (the frames after that are ordinary requests).

    ``dispatch(request)`` answers ApiVersions as the connection answers any request.
    """

    def __init__(self, broker, listener: Listener, client_host: str,
                 dispatch: Callable[[Request], Awaitable[dict]]) -> None:
        self._broker = broker
        self._listener = listener
        self._client_host = client_host
        self._dispatch = dispatch
        self._enabled = broker.config.listener_setting(listener, "sasl.enabled.mechanisms")
        self._mechanism: PlainServer | ScramServer | None = None
        self._handshake_version: int | None = None
        self._scram_users: dict = {}  # the one user a SCRAM exchange names, and its credential
        self.user: str | None = None

    async def receive(self, frame: bytes) -> bytes:
        if self._handshake_version == 0:
            return encode_frame(await self._step(frame))
        try:
            request = parse_request(frame)
        except ProtocolError as exc:
            raise Refused(f"bad bytes before authentication: {exc}") from None
        request.client_host, request.listener = self._client_host, self._listener.name
        if self._handshake_version == 1:
            return await self._authenticate(request)
        if request.api_key == ApiKey.API_VERSIONS:
            return self._encode(request, await self._dispatch(request))
        if request.api_key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(request)
        raise Refused(f"api key {request.api_key} before authentication")

    def _handshake(self, request: Request) -> bytes:
        wanted = request.body.mechanism
        if wanted not in self._enabled:
            reply = self._encode(request, {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                           "mechanisms": list(self._enabled)})
            raise Refused(f"SASL mechanism {wanted!r} is not enabled", reply)
        if wanted == "PLAIN":
            self._mechanism = PlainServer(self._broker.plain_users.get(self._listener.name, {}))
        else:
            self._mechanism = ScramServer(wanted, self._scram_users.get)
        self._handshake_version = request.api_version
        return self._encode(request, {"error_code": ErrorCode.NONE, "mechanisms": list(self._enabled)})

    async def _authenticate(self, request: Request) -> bytes:
        if request.api_key != ApiKey.SASL_AUTHENTICATE:
            raise Refused(f"api key {request.api_key} during SASL authentication")
        try:
            token = await self._step(request.body.auth_bytes)
        except Refused as refused:
            cause = refused.__cause__
            message = getattr(cause, "client_message", None) or (
                f"Authentication failed due to invalid credentials with SASL mechanism {self._mechanism.mechanism}")
            refused.reply = self._encode(request, {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                   "error_message": message})
            raise
        return self._encode(request, {"error_code": ErrorCode.NONE, "auth_bytes": token})

    async def _step(self, token: bytes) -> bytes:
        """The mechanism's answer to one client token."""
        mechanism = self._mechanism
        try:
            if isinstance(mechanism, ScramServer) and not self._scram_users:
                user = ScramServer.user_of(token)
                self._scram_users[user] = await self._broker.scram_credential(user, mechanism.mechanism)
            reply = mechanism.step(token)
        except (AuthenticationFailed, CredentialError) as exc:
            raise Refused(f"authentication failed: {exc}") from exc
        self.user = mechanism.user
        return reply

    @staticmethod
    def _encode(request: Request, body: dict) -> bytes:
        return b"".join(encode_response(request, body))
