"""CreateAcls (key 30), v0-v1: add ACLs to those the authorizer enforces (Broker.change_acls).

As Kafka 2.8's KafkaApis, per creation: SECURITY_DISABLED without an authorizer,
CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster, INVALID_REQUEST for one that cannot
be stored (broker.security.acl_admin); the valid ones are added all the same. An ACL already
there is not added twice."""

from __future__ import annotations

from minikafka.broker.security.acl import AclError, with_acls
from minikafka.broker.security.acl_admin import binding, refusal
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.CREATE_ACLS


async def handle(broker, request) -> dict:
    creations = request.body.creations
    refused = refusal(broker, request, "Alter")
    if refused is not None:
        return {"results": [refused] * len(creations)}
    results, added = [], {}
    for creation in creations:
        try:
            key, acl = binding(creation)
        except AclError as exc:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)})
            continue
        added.setdefault(key, []).append(acl)
        results.append({"error_code": ErrorCode.NONE})
    if added:
        await broker.change_acls(lambda current: {key: with_acls(current.get(key, []), acls)
                                                  for key, acls in added.items()})
    return {"results": results}
