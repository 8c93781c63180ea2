"""DescribeAcls (key 29), v0-v1: the ACLs the authorizer enforces that match a filter
(broker.security.acl_admin), grouped by resource.

As Kafka 2.8's KafkaApis: SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED
without DESCRIBE on the cluster, INVALID_REQUEST for a filter no ACL could match (an UNKNOWN
code)."""

from __future__ import annotations

from minikafka.broker.security.acl import AclError
from minikafka.broker.security.acl_admin import Filter, acl_fields, refusal, resource_fields
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DESCRIBE_ACLS


async def handle(broker, request) -> dict:
    refused = refusal(broker, request, "Describe")
    if refused is not None:
        return refused
    try:
        wanted = Filter(request.body)
        acls = broker.authorizer.store.load()
    except AclError as exc:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)}
    resources = []
    for key, entries in sorted(acls.items()):
        matching = [acl_fields(acl) for acl in entries if wanted.matches(key, acl)]
        if matching:
            resources.append({**resource_fields(key), "acls": matching})
    return {"error_code": ErrorCode.NONE, "resources": resources}
