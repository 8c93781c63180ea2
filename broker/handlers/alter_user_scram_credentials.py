"""AlterUserScramCredentials (key 51), v0: add, replace or delete SCRAM credentials where this
broker reads them (Broker.set_scram_user); taken at the next authentication.

Per user, as Kafka 2.8's ZkAdminManager: ALTER on the cluster is needed
(CLUSTER_AUTHORIZATION_FAILED); an unknown mechanism is UNSUPPORTED_SASL_MECHANISM, a mechanism
named twice for one user DUPLICATE_RESOURCE, an empty name or iterations outside [4096, 16384]
UNACCEPTABLE_CREDENTIAL, deleting a credential that does not exist RESOURCE_NOT_FOUND; a user
refused for one of its changes gets none of them."""

from __future__ import annotations

from collections import Counter

from minikafka.broker.handlers.describe_user_scram_credentials import MECHANISMS
from minikafka.broker.security.scram import MIN_ITERATIONS, ScramCredential, keys_of_salted_password
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism maxIterations
_NAMES = {code: name for name, code in MECHANISMS.items()}


async def handle(broker, request) -> dict:
    body = request.body
    changes = [(d.name, d.mechanism, None) for d in body.deletions] + [(u.name, u.mechanism, u) for u in body.upsertions]
    users = list(dict.fromkeys(name for name, _, _ in changes))
    if not broker.authorize(request, "Alter", "Cluster"):
        return {"results": [{"user": user, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED} for user in users]}
    current = await broker.scram_users()
    twice = Counter((name, mechanism) for name, mechanism, _ in changes)
    results = []
    for user in users:
        mine = [(mechanism, upsertion) for name, mechanism, upsertion in changes if name == user]
        error, entry = _altered(user, mine, twice, dict(current.get(user, {})))
        if error is None:
            await broker.set_scram_user(user, entry)
            results.append({"user": user, "error_code": ErrorCode.NONE})
        else:
            results.append({"user": user, "error_code": error[0], "error_message": error[1]})
    return {"results": results}


def _altered(user: str, changes, twice: Counter, entry: dict[str, str]):
    """(None, the user's new credentials), or ((code, message), None) when one change is refused."""
    if not user:
        return (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"), None
    for mechanism, upsertion in changes:
        if mechanism not in _NAMES:
            return (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mechanism}"), None
        if twice[(user, mechanism)] > 1:
            return (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"), None
        name = _NAMES[mechanism]
        if upsertion is None:
            if name not in entry:
                return (ErrorCode.RESOURCE_NOT_FOUND,
                        "Attempt to delete a user credential that does not exist"), None
            del entry[name]
            continue
        if not MIN_ITERATIONS <= upsertion.iterations <= MAX_ITERATIONS:
            return (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                    f"Iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]: {upsertion.iterations}"), None
        _, stored_key, server_key = keys_of_salted_password(name, bytes(upsertion.salted_password))
        entry[name] = ScramCredential(bytes(upsertion.salt), stored_key, server_key, upsertion.iterations).format()
    return None, entry
