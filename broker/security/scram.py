"""SCRAM-SHA-256/512 credentials (RFC 5802, RFC 7677) and where a single broker keeps them.

A credential is what Kafka stores per user and mechanism, never the password::

    salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>

with ``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``, ``StoredKey =
H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey = HMAC(SaltedPassword, "Server Key")``
(hashlib and hmac do the primitives). On a single broker the credentials live in
``<first log dir>/scram-credentials.json``: ``{"<user>": {"SCRAM-SHA-256": "<credential>"}}``,
written atomically with mode 0600 and read at each authentication, so ``minikafka users``
takes effect without a restart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's minimum and the default of kafka-configs' --add-config.
MIN_ITERATIONS = 4096
CREDENTIALS_FILE = "scram-credentials.json"


class CredentialError(ValueError):
    """A credential or credential file that cannot be used; the message is one sentence."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_password(cls, mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS,
                      salt: bytes | None = None) -> "ScramCredential":
        if iterations < MIN_ITERATIONS:
            raise CredentialError(f"iterations must be at least {MIN_ITERATIONS}, got {iterations}")
        salt = secrets.token_bytes(32) if salt is None else salt
        _, stored_key, server_key = derive_keys(mechanism, password, salt, iterations)
        return cls(salt, stored_key, server_key, iterations)

    def format(self) -> str:
        b64 = lambda raw: base64.b64encode(raw).decode("ascii")  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def parse(cls, text: str) -> "ScramCredential":
        try:
            fields = dict(item.split("=", 1) for item in text.split(","))
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (ValueError, KeyError) as exc:
            raise CredentialError(f"malformed SCRAM credential ({exc})") from None


def derive_keys(mechanism: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes, bytes]:
    """RFC 5802's (ClientKey, StoredKey, ServerKey) of ``password``: the server keeps the last
    two, a client (a broker authenticating to another) needs the first to prove itself."""
    salted = hashlib.pbkdf2_hmac(_hash(mechanism), password.encode("utf-8"), salt, iterations)
    return keys_of_salted_password(mechanism, salted)


def keys_of_salted_password(mechanism: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of a salted password (what AlterUserScramCredentials
    carries: the client salts and hashes the password itself)."""
    name = _hash(mechanism)
    client_key = hmac.digest(salted, b"Client Key", name)
    return client_key, hashlib.new(name, client_key).digest(), hmac.digest(salted, b"Server Key", name)


def _hash(mechanism: str) -> str:
    try:
        return HASHES[mechanism]
    except KeyError:
        raise CredentialError(f"{mechanism} is not a SCRAM mechanism ({', '.join(HASHES)})") from None


def with_password(entry: dict[str, str], password: str, mechanisms: list[str], *,
                  iterations: int = MIN_ITERATIONS) -> dict[str, str]:
    """A user's mechanism -> credential map with fresh credentials for ``mechanisms`` (what
    both the log-dir file and ZooKeeper's ``/config/users/<user>`` hold)."""
    return {**entry, **{mechanism: ScramCredential.from_password(mechanism, password, iterations=iterations).format()
                        for mechanism in mechanisms}}


def without(entry: dict[str, str], mechanisms: list[str] | None) -> dict[str, str]:
    """``entry`` without ``mechanisms`` (all of them when None)."""
    return {} if mechanisms is None else {m: c for m, c in entry.items() if m not in mechanisms}


class CredentialStore:
    """The single broker's SCRAM users, in ``<log dir>/scram-credentials.json``."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / CREDENTIALS_FILE

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise CredentialError(f"cannot read {self.path}: {exc}") from None
        if not isinstance(data, dict):
            raise CredentialError(f"{self.path} does not hold a JSON object")
        return data

    def _save(self, data: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self._load().get(user, {}).get(mechanism)
        return None if text is None else ScramCredential.parse(text)

    def add(self, user: str, password: str, mechanisms: list[str], *, iterations: int = MIN_ITERATIONS) -> None:
        """Add ``user`` or replace its credentials for ``mechanisms``."""
        if not user:
            raise CredentialError("the user name is empty")
        data = self._load()
        data[user] = with_password(data.get(user, {}), password, mechanisms, iterations=iterations)
        self._save(data)

    def remove(self, user: str, mechanisms: list[str] | None = None) -> bool:
        """Remove ``user``'s credentials (all of them by default); False if it had none."""
        data = self._load()
        entry = data.get(user)
        if entry is None:
            return False
        data[user] = without(entry, mechanisms)
        if not data[user]:
            del data[user]
        self._save(data)
        return True

    def entries(self) -> dict[str, dict[str, str]]:
        """Every user's credentials, mechanism -> stored text."""
        return self._load()

    def set(self, user: str, entry: dict[str, str]) -> None:
        """``user`` now has exactly the credentials of ``entry`` (none: the user goes)."""
        data = self._load()
        if entry:
            data[user] = entry
        else:
            data.pop(user, None)
        self._save(data)

    def users(self) -> dict[str, list[str]]:
        return {user: sorted(entry) for user, entry in sorted(self._load().items())}
