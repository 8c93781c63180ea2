"""DeleteAcls (key 31), v0-v1: remove the ACLs matching each filter from those the authorizer
enforces (Broker.change_acls), answering what each filter removed.

As Kafka 2.8's KafkaApis, per filter: SECURITY_DISABLED without an authorizer,
CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster, INVALID_REQUEST for a filter no ACL
could match (an UNKNOWN code); the other filters are applied all the same."""

from __future__ import annotations

from minikafka.broker.security.acl import AclError
from minikafka.broker.security.acl_admin import Filter, acl_fields, refusal, resource_fields
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DELETE_ACLS


async def handle(broker, request) -> dict:
    filters = request.body.filters
    refused = refusal(broker, request, "Alter")
    if refused is not None:
        return {"filter_results": [refused] * len(filters)}
    wanted: list[Filter | None] = []
    results = []
    for spec in filters:
        try:
            wanted.append(Filter(spec))
            results.append({"error_code": ErrorCode.NONE, "matching_acls": []})
        except AclError as exc:
            wanted.append(None)
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)})

    def without_matching(current: dict) -> dict:
        gone = set()
        for matcher, result in zip(wanted, results):
            if matcher is not None:
                matching = [(key, acl) for key, entries in sorted(current.items()) for acl in entries
                            if matcher.matches(key, acl)]
                gone.update(matching)
                result["matching_acls"] = [{**resource_fields(key), **acl_fields(acl)} for key, acl in matching]
        touched = {key for key, _ in gone}
        return {key: [acl for acl in current[key] if (key, acl) not in gone] for key in touched}

    await broker.change_acls(without_matching)
    return {"filter_results": results}
