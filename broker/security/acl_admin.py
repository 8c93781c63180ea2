"""The ACL APIs' view of the ACLs the authorizer enforces (broker.security.acl): Kafka's wire
codes for resource types, operations and permissions, the filters of DescribeAcls and
DeleteAcls (Kafka's AclBindingFilter.matches), and CreateAcls' checks (AuthorizerUtils'
validateAclBinding).

What Kafka 2.8's AclAuthorizer stores is accepted: LITERAL (``*`` is every resource of the
type) and PREFIXED (KIP-290) patterns of topics, groups, transactional ids and the cluster. A
creation with a filter's pattern type (ANY, MATCH) or another resource type (delegation
tokens, users) is refused with INVALID_REQUEST rather than stored where the authorizer would
not read it. A v0 request has no pattern type: its schema default, LITERAL, is Kafka's reading.
"""

from __future__ import annotations

from minikafka.broker.security import CLUSTER_NAME
from minikafka.broker.security.acl import Acl, AclError, resource_key, split_key
from minikafka.protocol.errors import ErrorCode

ANY = 1  # the "any" code of every filter enum
LITERAL = 3
MATCH = 2
PREFIXED = 4
RESOURCE_TYPES = {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId"}
OPERATIONS = {2: "All", 3: "Read", 4: "Write", 5: "Create", 6: "Delete", 7: "Alter", 8: "Describe",
              9: "ClusterAction", 10: "DescribeConfigs", 11: "AlterConfigs"}
PERMISSIONS = {2: "Deny", 3: "Allow"}
_CODES = {name: code for table in (RESOURCE_TYPES, OPERATIONS, PERMISSIONS) for code, name in table.items()}


def refusal(broker, request, operation: str) -> dict | None:
    """The answer every item of an ACL request gets when it may not be served (Kafka 2.8's
    KafkaApis): SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without
    ``operation`` on the cluster; None when it may."""
    if broker.authorizer is None:
        return {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": "No Authorizer is configured on the broker"}
    if not broker.authorize(request, operation, "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": "Cluster authorization failed."}
    return None


def _named(table: dict[int, str], code: int, what: str, *, any_allowed: bool) -> str | None:
    """The name of ``code`` in ``table``; None for ANY where a filter allows it."""
    if any_allowed and code == ANY:
        return None
    if code not in table:
        raise AclError(f"{what} {code} is not supported")
    return table[code]


def binding(creation) -> tuple[str, Acl]:
    """``(resource key, Acl)`` of a CreateAcls creation; AclError for what cannot be stored."""
    if creation.resource_pattern_type not in (LITERAL, PREFIXED):
        raise AclError(f"resource pattern type {creation.resource_pattern_type} is not LITERAL or PREFIXED")
    resource_type = _named(RESOURCE_TYPES, creation.resource_type, "resource type", any_allowed=False)
    if resource_type == "Cluster" and creation.resource_name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    key = resource_key(resource_type, creation.resource_name, prefixed=creation.resource_pattern_type == PREFIXED)
    return key, Acl.make(
        creation.principal, _named(OPERATIONS, creation.operation, "operation", any_allowed=False),
        _named(PERMISSIONS, creation.permission_type, "permission type", any_allowed=False), creation.host)


class Filter:
    """A DescribeAcls request or a DeleteAcls filter: which (resource, ACL) pairs it matches.
    AclError for a code no filter may hold (UNKNOWN, or one Kafka does not define)."""

    def __init__(self, spec) -> None:
        self.resource_type = _named(RESOURCE_TYPES, spec.resource_type_filter, "resource type", any_allowed=True)
        self.pattern_type = spec.pattern_type_filter
        if self.pattern_type not in (ANY, MATCH, LITERAL, PREFIXED):
            raise AclError(f"pattern type {self.pattern_type} is not a filter")
        self.name = spec.resource_name_filter
        self.principal = spec.principal_filter
        self.host = spec.host_filter
        self.operation = _named(OPERATIONS, spec.operation, "operation", any_allowed=True)
        self.permission = _named(PERMISSIONS, spec.permission_type, "permission type", any_allowed=True)

    def matches(self, key: str, acl: Acl) -> bool:
        prefixed, resource_type, name = split_key(key)
        if self.resource_type not in (None, resource_type) or not _pattern_matches(self.pattern_type, self.name, prefixed, name):
            return False
        return (self.principal in (None, acl.principal) and self.host in (None, acl.host)
                and self.operation in (None, acl.operation) and self.permission in (None, acl.permission))


def _pattern_matches(filter_type: int, filter_name: str | None, prefixed: bool, name: str) -> bool:
    """Kafka's ResourcePatternFilter.matches: ANY and a specific type select that exact name,
    MATCH every pattern that applies to the name (equal, ``*``, a prefix of it)."""
    pattern_type = PREFIXED if prefixed else LITERAL
    if filter_type not in (ANY, MATCH, pattern_type):
        return False
    if filter_name is None or filter_type != MATCH:
        return filter_name in (None, name)
    return filter_name.startswith(name) if prefixed else name in (filter_name, "*")


def acl_fields(acl: Acl) -> dict:
    """An ACL as the responses carry it."""
    return {"principal": acl.principal, "host": acl.host, "operation": _CODES[acl.operation],
            "permission_type": _CODES[acl.permission]}


def resource_fields(key: str) -> dict:
    prefixed, resource_type, name = split_key(key)
    return {"resource_type": _CODES[resource_type], "resource_name": name,
            "pattern_type": PREFIXED if prefixed else LITERAL}
