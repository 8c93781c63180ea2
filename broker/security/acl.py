"""Kafka 0.10.2's SimpleAclAuthorizer, as plain data and functions, and where a single broker
keeps its ACLs.

An ACL allows or denies a principal (``User:alice``, or ``User:*``) from a host (or ``*``) one
operation on one resource (``Topic:orders``, ``Group:billing``, ``Cluster:kafka-cluster``; the
name ``*`` is every resource of the type). The decision, in Kafka's order:

1. a super user (``super.users``) may do anything;
2. the ACLs that apply to a resource are its own, the type's ``*`` ones and (Kafka >= 2.0,
   KIP-290) those of every PREFIXED pattern its name begins with (``Topic:orders-`` applies to
   ``orders-eu``); a resource with none is open to everyone if
   ``allow.everyone.if.no.acl.found``, else closed;
3. a matching DENY wins;
4. a matching ALLOW of the operation grants it; READ, WRITE, DELETE and ALTER each imply
   DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka >= 0.11's operations, for the
   config APIs), and ALL matches every operation.

Storage is Kafka's ZooKeeper layout turned into one JSON file, ``<first log dir>/acls.json``:
``{"Topic:orders": {"version": 1, "acls": [{"principal": "User:alice", "permissionType":
"Allow", "operation": "Write", "host": "*"}]}}`` (each value is what Kafka writes to
``/kafka-acl/Topic/orders``); a PREFIXED pattern's key is ``Prefixed:Topic:orders-``
(``Prefixed`` is no resource type, so a file from before KIP-290 reads as it did). The
authorizer re-reads it when it changes, so ``minikafka acls`` takes effect on a running broker. In a cluster the ACLs are Kafka's ZooKeeper nodes themselves
(``ZkAcls``: every broker reads ``/kafka-acl`` and ``/kafka-acl-extended`` at start-up, then
re-reads the resources that ``/kafka-acl-changes`` and ``/kafka-acl-extended-changes``
notifications name).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from minikafka.broker.security import CLUSTER_NAME

RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId")
OPERATIONS = ("Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite", "All")
PERMISSIONS = ("Allow", "Deny")
ACLS_FILE = "acls.json"
# A PREFIXED pattern's resource key ("Prefixed:Topic:orders-"); a literal one is "Topic:orders".
PREFIXED_KEY = "Prefixed:"
_IMPLIES_DESCRIBE = ("Describe", "Read", "Write", "Delete", "Alter")
# Kafka >= 0.11: ALTER_CONFIGS implies DESCRIBE_CONFIGS.
_IMPLIES_DESCRIBE_CONFIGS = ("DescribeConfigs", "AlterConfigs")


class AclError(ValueError):
    """An ACL or ACL file that cannot be used; the message is one sentence."""


def _canonical(value: str, choices: tuple[str, ...], what: str) -> str:
    for choice in choices:
        if value.replace("_", "").lower() == choice.lower():
            return choice
    raise AclError(f"{what} {value!r} is not one of {', '.join(choices)}")


@dataclass(frozen=True, slots=True)
class Acl:
    principal: str
    host: str
    operation: str
    permission: str

    @classmethod
    def make(cls, principal: str, operation: str, permission: str = "Allow", host: str = "*") -> "Acl":
        if ":" not in principal:
            raise AclError(f"principal {principal!r} is not TYPE:NAME (e.g. User:alice)")
        return cls(principal, host, _canonical(operation, OPERATIONS, "operation"),
                   _canonical(permission, PERMISSIONS, "permission type"))

    def to_json(self) -> dict:
        return {"principal": self.principal, "permissionType": self.permission,
                "operation": self.operation, "host": self.host}

    def matches(self, principal: str, host: str, operations: tuple[str, ...]) -> bool:
        return (self.principal in (principal, "User:*") and self.host in (host, "*")
                and (self.operation == "All" or self.operation in operations))


def resource_key(resource_type: str, name: str, *, prefixed: bool = False) -> str:
    resource_type = _canonical(resource_type, RESOURCE_TYPES, "resource type")
    if not name:
        raise AclError("the resource name is empty")
    return pattern_key(prefixed, resource_type, name)


def pattern_key(prefixed: bool, resource_type: str, name: str) -> str:
    """The key of a resource pattern as stored (``resource_key`` without its checks: a cluster's
    ZooKeeper may hold resource types of later Kafka versions, kept as they are)."""
    return f"{PREFIXED_KEY if prefixed else ''}{resource_type}:{name}"


def split_key(key: str) -> tuple[bool, str, str]:
    """``(prefixed, resource type, name)`` of a resource key."""
    prefixed = key.startswith(PREFIXED_KEY)
    resource_type, _, name = key.removeprefix(PREFIXED_KEY).partition(":")
    return prefixed, resource_type, name


def keyed(patterns: dict[tuple[bool, str, str], dict]) -> dict[str, dict]:
    """ACL nodes by ``(prefixed, resource type, name)``, as ZooKeeper's store reads them -> by
    resource key."""
    return {pattern_key(*pattern): entry for pattern, entry in patterns.items()}


def applying(acls: dict[str, list[Acl]], resource_type: str, name: str) -> list[Acl]:
    """The ACLs that apply to one resource: its literal ones, the type's ``*`` ones and those of
    every prefix of its name (a lookup per prefix, like Kafka's sorted-set range)."""
    found = [*acls.get(f"{resource_type}:{name}", ()), *acls.get(f"{resource_type}:*", ())]
    for end in range(1, len(name) + 1):
        found.extend(acls.get(f"{PREFIXED_KEY}{resource_type}:{name[:end]}", ()))
    return found


def parse_entries(data: dict) -> dict[str, list[Acl]]:
    """``{"Topic:orders": {"version": 1, "acls": [...]}}`` -> ACLs by resource."""
    try:
        return {key: [Acl.make(a["principal"], a["operation"], a["permissionType"], a["host"])
                      for a in entry["acls"]] for key, entry in data.items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise AclError(f"malformed ACL entry ({exc!r})") from None


def entry_json(acls: list[Acl]) -> dict:
    """One resource's ACLs as Kafka writes them to ``/kafka-acl/<Type>/<name>``."""
    return {"version": 1, "acls": [acl.to_json() for acl in acls]}


def with_acls(entries: list[Acl], new: list[Acl]) -> list[Acl]:
    return entries + [acl for i, acl in enumerate(new) if acl not in entries and acl not in new[:i]]


def without_acls(entries: list[Acl], gone: list[Acl] | None) -> list[Acl]:
    """``entries`` without ``gone`` (all of them when None)."""
    return [] if gone is None else [acl for acl in entries if acl not in gone]


class ZkAcls:
    """A cluster broker's copy of ``/kafka-acl``: read whole at start-up (``replace``), then
    one resource at a time as ``/kafka-acl-changes`` notifications name them (``update``)."""

    def __init__(self) -> None:
        self._acls: dict[str, list[Acl]] = {}

    def load(self) -> dict[str, list[Acl]]:
        return self._acls

    def replace(self, data: dict) -> None:
        self._acls = parse_entries(data)

    def update(self, resource: str, entry: dict | None) -> None:
        """``resource``'s ACLs are now ``entry`` (its node's JSON; None: the node is gone).
        A new dict, so an authorization in progress keeps the copy it started with."""
        acls = {key: value for key, value in self._acls.items() if key != resource}
        if entry is not None:
            acls.update(parse_entries({resource: entry}))
        self._acls = acls


class AclStore:
    """The single broker's ACLs, in ``<log dir>/acls.json``."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / ACLS_FILE
        self._stamp = None
        self._acls: dict[str, list[Acl]] = {}

    def load(self) -> dict[str, list[Acl]]:
        """Every resource's ACLs, re-read only when the file changed."""
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            self._acls = self._read() if stamp is not None else {}
            self._stamp = stamp
        return self._acls

    def _read(self) -> dict[str, list[Acl]]:
        try:
            return parse_entries(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise AclError(f"cannot read {self.path}: {exc}") from None

    def _write(self, acls: dict[str, list[Acl]]) -> None:
        data = {key: entry_json(entries) for key, entries in sorted(acls.items()) if entries}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)

    def set_resources(self, changes: dict[str, list[Acl]]) -> None:
        """Each resource of ``changes`` now has exactly those ACLs (none: its entry goes)."""
        acls = dict(self.load())
        acls.update(changes)
        self._write(acls)

    def add(self, key: str, new: list[Acl]) -> None:
        acls = dict(self.load())
        acls[key] = with_acls(acls.get(key, []), new)
        self._write(acls)

    def remove(self, key: str, gone: list[Acl] | None = None) -> int:
        """Remove ``gone`` (every ACL of the resource by default); how many went."""
        acls = dict(self.load())
        entries = acls.get(key, [])
        keep = without_acls(entries, gone)
        acls[key] = keep
        self._write(acls)
        return len(entries) - len(keep)


class Authorizer:
    """``authorize(principal, host, operation, resource_type, name) -> bool`` (see the module
    docstring for the rules)."""

    def __init__(self, store: AclStore, *, super_users: frozenset[str] = frozenset(),
                 allow_if_no_acls: bool = False) -> None:
        self.store = store
        self.super_users = super_users
        self.allow_if_no_acls = allow_if_no_acls

    def authorize(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        if principal in self.super_users:
            return True
        found = applying(self.store.load(), resource_type, name)
        if not found:
            return self.allow_if_no_acls
        if any(acl.permission == "Deny" and acl.matches(principal, host, (operation,)) for acl in found):
            return False
        allowed_by = {"Describe": _IMPLIES_DESCRIBE,
                      "DescribeConfigs": _IMPLIES_DESCRIBE_CONFIGS}.get(operation, (operation,))
        return any(acl.permission == "Allow" and acl.matches(principal, host, allowed_by) for acl in found)

    def authorize_any(self, principal: str, host: str, operation: str, resource_type: str) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type: Kafka 2.8's
        ``authorizeByResourceType`` (KIP-679's "Write on any topic"). A DENY on ``*`` denies;
        ``allow.everyone.if.no.acl.found`` allows; else an ALLOW allows unless a DENY covers
        every resource it does (a literal DENY of the same name, a prefixed DENY whose prefix
        begins its name)."""
        if principal in self.super_users:
            return True
        allowed, denied = set(), set()
        for key, acls in self.store.load().items():
            prefixed, kind, name = split_key(key)
            if kind != resource_type:
                continue
            for acl in acls:
                if acl.matches(principal, host, (operation,)):
                    (denied if acl.permission == "Deny" else allowed).add((prefixed, name))
        if (False, "*") in denied:
            return False

        def covered(prefixed: bool, name: str) -> bool:
            return (not prefixed and (False, name) in denied) or any(
                deny_prefixed and name.startswith(prefix) for deny_prefixed, prefix in denied)

        return self.allow_if_no_acls or (False, "*") in allowed or any(
            not covered(prefixed, name) for prefixed, name in allowed)


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:ops``)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())
