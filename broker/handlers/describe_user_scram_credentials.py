"""DescribeUserScramCredentials (key 50), v0: the SCRAM users this broker authenticates (its
log dir's credentials, or a cluster's ``/config/users``) with each mechanism's iterations.

As Kafka's KafkaApis and ZkAdminManager: DESCRIBE on the cluster is needed (the top-level
CLUSTER_AUTHORIZATION_FAILED); no users named means every user; a user named twice is
DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND."""

from __future__ import annotations

from collections import Counter

from minikafka.broker.security.scram import ScramCredential
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
# ScramMechanism's wire codes.
MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


async def handle(broker, request) -> dict:
    if not broker.authorize(request, "Describe", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    users = await broker.scram_users()
    asked = [entry.name for entry in request.body.users or ()] or sorted(users)
    counts = Counter(asked)
    results = []
    for user in dict.fromkeys(asked):
        if counts[user] > 1:
            results.append({"user": user, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                            "error_message": f"Cannot describe SCRAM credentials for the same user twice in a "
                                             f"single request: {user}"})
        elif not users.get(user):
            results.append({"user": user, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                            "error_message": f"Attempt to describe a user credential that does not exist: {user}"})
        else:
            results.append({"user": user, "error_code": ErrorCode.NONE, "credential_infos": [
                {"mechanism": MECHANISMS[mechanism], "iterations": ScramCredential.parse(text).iterations}
                for mechanism, text in sorted(users[user].items()) if mechanism in MECHANISMS]})
    return {"error_code": ErrorCode.NONE, "results": results}
