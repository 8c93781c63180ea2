"""SASL server mechanisms, sans-I/O: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677).

Each mechanism takes the client's tokens one at a time (``step(token) -> reply``) and raises
:class:`AuthenticationFailed` on anything wrong; ``user`` is set once it succeeded. How the
tokens travel and what a refused client is told is broker.security.authenticator's business.
Failure messages name the user, never a password.

PLAIN's users come from Kafka's JAAS syntax (``sasl.jaas.config`` /
``listener.name.<l>.plain.sasl.jaas.config``)::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

where every ``user_<name>="<password>"`` option is an account.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

from minikafka.broker.security.scram import HASHES, ScramCredential

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class AuthenticationFailed(Exception):
    """The client failed to authenticate; the message is safe to log. ``client_message`` is
    what the client may be told (Kafka's words for bad credentials, which do not say whether
    the user exists); None for a malformed exchange."""

    def __init__(self, message: str, client_message: str | None = None) -> None:
        super().__init__(message)
        self.client_message = client_message


# Kafka's PlainSaslServer and ScramSaslServer messages for a wrong password or unknown user.
PLAIN_BAD_CREDENTIALS = "Authentication failed: Invalid username or password"
SCRAM_BAD_CREDENTIALS = "Authentication failed: Invalid user credentials"


class JaasError(ValueError):
    pass


_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """One JAAS login module entry: ``<class> <flag> key=value ... ;`` -> (class, options)."""
    match = re.match(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if match is None:
        raise JaasError("expected '<LoginModule class> required key=\"value\" ...;'")
    options: dict[str, str] = {}
    pos = match.end()
    while True:
        option = _JAAS_OPTION.match(text, pos)
        if option is None:
            break
        quoted, bare = option.group(2), option.group(3)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        pos = option.end()
    if not re.fullmatch(r"\s*;\s*", text[pos:]):
        raise JaasError(f"cannot parse the JAAS options at {text[pos:pos + 20]!r} (a ';' ends the entry)")
    return match.group(1), options


def plain_users(jaas: str | None) -> dict[str, str]:
    """PLAIN's accounts (name -> password) from a PlainLoginModule entry."""
    if not jaas:
        return {}
    module, options = parse_jaas(jaas)
    if module != PLAIN_LOGIN_MODULE:
        raise JaasError(f"PLAIN needs {PLAIN_LOGIN_MODULE}, got {module}")
    return {name[len("user_"):]: value for name, value in options.items() if name.startswith("user_")}


class PlainServer:
    """RFC 4616: one token ``authzid NUL authcid NUL passwd``; the reply is empty."""

    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.user: str | None = None

    def step(self, token: bytes) -> bytes:
        if self.user is not None:
            raise AuthenticationFailed("PLAIN: a token after authentication")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("PLAIN: malformed token")
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN: token is not UTF-8") from None
        if authzid and authzid != user:
            raise AuthenticationFailed(f"PLAIN: user {user!r} may not act as {authzid!r}")
        expected = self._users.get(user)
        # Compare even for an unknown user, so timing does not tell which users exist.
        ok = hmac.compare_digest(password.encode(), (expected or "\0" + password).encode())
        if expected is None or not ok:
            raise AuthenticationFailed(f"PLAIN: wrong password or unknown user {user!r}", PLAIN_BAD_CREDENTIALS)
        self.user = user
        return b""


def _saslname(text: str) -> str:
    """RFC 5802 5.1: ',' and '=' in names travel as '=2C' and '=3D'."""
    if re.search(r"=(?!2C|3D)", text):
        raise AuthenticationFailed("SCRAM: malformed user name")
    return text.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> list[tuple[str, str]]:
    pairs = []
    for item in message.split(","):
        if len(item) < 2 or item[1] != "=":
            raise AuthenticationFailed("SCRAM: malformed message")
        pairs.append((item[0], item[2:]))
    return pairs


class ScramServer:
    """RFC 5802's server side: client-first -> server-first, client-final -> server-final.

    ``credentials(user) -> ScramCredential | None`` looks the user up when its name arrives.
    """

    def __init__(self, mechanism: str, credentials: Callable[[str], ScramCredential | None], *,
                 server_nonce: str | None = None) -> None:
        # server_nonce: fixed only to replay RFC 7677's example exchange in tests.
        self._server_nonce = server_nonce or secrets.token_urlsafe(24)
        self._hash = HASHES[mechanism]
        self.mechanism = mechanism
        self._credentials = credentials
        self._state = "first"
        self._credential: ScramCredential | None = None
        self.user: str | None = None

    def step(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM: message is not UTF-8") from None
        if self._state == "first":
            return self._first(message)
        if self._state == "final":
            return self._final(message)
        raise AuthenticationFailed("SCRAM: a token after authentication")

    @staticmethod
    def _parse_first(message: str) -> tuple[str, str, str, str, str]:
        """client-first -> (gs2 flag, authzid, bare message, user, client nonce)."""
        # gs2-header: no channel binding ('n' or 'y'), an optional authzid, then the bare part.
        flag, _, rest = message.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise AuthenticationFailed("SCRAM: unsupported channel binding or malformed header")
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r" or not attributes[1][1]:
            raise AuthenticationFailed("SCRAM: malformed client-first message")
        user = _saslname(attributes[0][1])
        if authzid and _saslname(authzid[2:]) != user:
            raise AuthenticationFailed(f"SCRAM: user {user!r} may not act as {authzid[2:]!r}")
        return flag, authzid, bare, user, attributes[1][1]

    @classmethod
    def user_of(cls, token: bytes) -> str:
        """The user a client-first message names, so its credential can be looked up (on
        ZooKeeper, say) before ``step`` takes the message."""
        try:
            return cls._parse_first(token.decode("utf-8"))[3]
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM: message is not UTF-8") from None

    def _first(self, message: str) -> bytes:
        flag, authzid, bare, user, client_nonce = self._parse_first(message)
        credential = self._credentials(user)
        if credential is None:
            raise AuthenticationFailed(f"{self.mechanism}: unknown user {user!r}", SCRAM_BAD_CREDENTIALS)
        self._credential = credential
        self._user_pending = user
        self._gs2_header = f"{flag},{authzid},"
        self._nonce = client_nonce + self._server_nonce
        self._client_first_bare = bare
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode("utf-8")

    def _final(self, message: str) -> bytes:
        attributes = _attributes(message)
        if len(attributes) < 3 or attributes[0][0] != "c" or attributes[1][0] != "r" or attributes[-1][0] != "p":
            raise AuthenticationFailed("SCRAM: malformed client-final message")
        # Kafka's ScramSaslServer only checks that the nonce ends with the server-first one,
        # and librdkafka 2.0 (Debian's kcat) relies on it: it sends the client nonce twice.
        if not attributes[1][1].endswith(self._nonce):
            raise AuthenticationFailed("SCRAM: nonce mismatch")
        if attributes[0][1] != base64.b64encode(self._gs2_header.encode("utf-8")).decode("ascii"):
            raise AuthenticationFailed("SCRAM: channel binding mismatch")
        try:
            proof = base64.b64decode(attributes[-1][1], validate=True)
        except ValueError:
            raise AuthenticationFailed("SCRAM: malformed proof") from None
        without_proof = message[:message.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        credential = self._credential
        signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise AuthenticationFailed(f"{self.mechanism}: wrong password for user {self._user_pending!r}",
                                       SCRAM_BAD_CREDENTIALS)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise AuthenticationFailed(f"{self.mechanism}: wrong password for user {self._user_pending!r}",
                                       SCRAM_BAD_CREDENTIALS)
        self.user = self._user_pending
        self._state = "done"
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        return f"v={base64.b64encode(server_signature).decode('ascii')}".encode("utf-8")
