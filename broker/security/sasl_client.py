"""SASL client mechanisms, sans-I/O, for a broker that authenticates to other brokers on a
SASL inter-broker listener: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677).

A mechanism answers the server's tokens one at a time: ``respond(None)`` gives the first
token, ``respond(server_token)`` the next one, or None once the exchange is complete.
SCRAM checks the server's signature last, so a broker never trusts a peer that does not know
its credential. Errors name the user, never the password.
"""

from __future__ import annotations

import base64
import hmac
import secrets

from minikafka.broker.security.sasl import AuthenticationFailed, _attributes
from minikafka.broker.security.scram import HASHES, derive_keys


class PlainClient:
    def __init__(self, user: str, password: str) -> None:
        self.mechanism = "PLAIN"
        self.user = user
        self._password = password
        self._sent = False

    def respond(self, challenge: bytes | None) -> bytes | None:
        if not self._sent:
            self._sent = True
            return f"\0{self.user}\0{self._password}".encode("utf-8")
        if challenge:
            raise AuthenticationFailed("PLAIN: the server answered with a non-empty token")
        return None


def _saslname(text: str) -> str:
    # RFC 5802 5.1: '=' first, so the escapes themselves are not escaped again.
    return text.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """RFC 5802's client side: client-first, then client-final with the proof, then the check
    of the server's signature."""

    def __init__(self, mechanism: str, user: str, password: str, *, client_nonce: str | None = None) -> None:
        # client_nonce: fixed only to replay RFC 7677's example exchange in tests.
        if mechanism not in HASHES:
            raise ValueError(f"{mechanism} is not a SCRAM mechanism ({', '.join(HASHES)})")
        self.mechanism = mechanism
        self.user = user
        self._password = password
        self._hash = HASHES[mechanism]
        self._nonce = client_nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_saslname(user)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._state = "first"

    def respond(self, challenge: bytes | None) -> bytes | None:
        if self._state == "first":
            self._state = "server-first"
            return f"n,,{self._client_first_bare}".encode("utf-8")
        try:
            message = (challenge or b"").decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"{self.mechanism}: the server's message is not UTF-8") from None
        if self._state == "server-first":
            self._state = "server-final"
            return self._client_final(message)
        if self._state == "server-final":
            self._state = "done"
            self._check_server_final(message)
            return None
        raise AuthenticationFailed(f"{self.mechanism}: a server token after authentication")

    def _client_final(self, server_first: str) -> bytes:
        fields = dict(_attributes(server_first))
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or salt is None \
                or not iterations.isdigit():
            raise AuthenticationFailed(f"{self.mechanism}: malformed server-first message")
        try:
            salt_bytes = base64.b64decode(salt, validate=True)
        except ValueError:
            raise AuthenticationFailed(f"{self.mechanism}: malformed salt") from None
        client_key, stored_key, server_key = derive_keys(self.mechanism, self._password, salt_bytes, int(iterations))
        without_proof = f"c={base64.b64encode(b'n,,').decode('ascii')},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode("utf-8")
        signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("utf-8")

    def _check_server_final(self, server_final: str) -> None:
        fields = dict(_attributes(server_final))
        if "e" in fields:
            raise AuthenticationFailed(f"{self.mechanism}: the server refused user {self.user!r}: {fields['e']}")
        try:
            verifier = base64.b64decode(fields.get("v", ""), validate=True)
        except ValueError:
            raise AuthenticationFailed(f"{self.mechanism}: malformed server signature") from None
        if not hmac.compare_digest(verifier, self._server_signature or b""):
            raise AuthenticationFailed(f"{self.mechanism}: the server's signature is wrong (it does not "
                                       f"hold user {self.user!r}'s credential)")


def client_mechanism(mechanism: str, user: str, password: str):
    """A fresh client mechanism (one per connection: SCRAM's nonce must not repeat)."""
    if mechanism == "PLAIN":
        return PlainClient(user, password)
    return ScramClient(mechanism, user, password)
