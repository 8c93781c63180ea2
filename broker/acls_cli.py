"""``minikafka acls add|remove|list``: a single broker's ACLs, with kafka-acls' arguments
(``--allow-principal User:alice --operation Write --topic orders``). They are written to the
first log dir (broker.security.acl) and a running broker picks them up at its next request."""

from __future__ import annotations

import argparse
import sys

from minikafka.broker.security.acl import CLUSTER_NAME, OPERATIONS, Acl, AclError, AclStore, resource_key
from minikafka.broker.users_cli import first_log_dir, log_dir_arguments


def register(subparsers) -> None:
    acls = subparsers.add_parser(
        "acls", help="manage ACLs of a single broker",
        description="Add, remove or list the ACLs the authorizer (authorizer.class.name) checks, "
                    "with kafka-acls' arguments.")
    actions = acls.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    resource = argparse.ArgumentParser(add_help=False)
    which = resource.add_mutually_exclusive_group()
    which.add_argument("--topic", help="a topic name, or * for every topic")
    which.add_argument("--group", help="a consumer group, or * for every group")
    which.add_argument("--cluster", action="store_true", help="the cluster (Create, ClusterAction, Describe)")
    rules = argparse.ArgumentParser(add_help=False)
    rules.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    rules.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    rules.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    rules.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    rules.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                       help=f"one of {', '.join(OPERATIONS)} (repeatable; default All)")
    for name, parents, help_text in (("add", [log_dir_arguments(), resource, rules], "add ACLs"),
                                     ("remove", [log_dir_arguments(), resource, rules],
                                      "remove ACLs (all of the resource without principals)"),
                                     ("list", [log_dir_arguments(), resource], "list ACLs")):
        actions.add_parser(name, parents=parents, help=help_text)
    acls.set_defaults(func=_acls_command)


def _resource(args) -> str | None:
    if args.cluster:
        return resource_key("Cluster", CLUSTER_NAME)
    if args.topic is not None:
        return resource_key("Topic", args.topic)
    if args.group is not None:
        return resource_key("Group", args.group)
    return None


def _acls(args) -> list[Acl]:
    operations = args.operation or ["All"]
    made = []
    for permission, principals, hosts in (("Allow", args.allow_principal, args.allow_host),
                                          ("Deny", args.deny_principal, args.deny_host)):
        for principal in principals:
            for host in hosts or ["*"]:
                made.extend(Acl.make(principal, operation, permission, host) for operation in operations)
    return made


def _acls_command(args: argparse.Namespace) -> int:
    try:
        store = AclStore(first_log_dir(args))
        key = _resource(args)
        if args.action == "list":
            for resource, acls in sorted(store.load().items()):
                if key is None or resource == key:
                    print(f"Current ACLs for resource `{resource}`:")
                    for acl in acls:
                        print(f"    {acl.principal} has {acl.permission} permission for operations: "
                              f"{acl.operation} from hosts: {acl.host}")
            return 0
        if key is None:
            raise AclError("name the resource: --topic, --group or --cluster")
        acls = _acls(args)
        if args.action == "add":
            if not acls:
                raise AclError("give --allow-principal or --deny-principal")
            store.add(key, acls)
        else:
            store.remove(key, acls or None)
        return 0
    except (AclError, OSError, ValueError) as exc:
        print(f"minikafka acls: {exc}", file=sys.stderr)
        return 1
