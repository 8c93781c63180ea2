"""``minikafka acls add|remove|list``: ACLs with kafka-acls' arguments (``--allow-principal
User:alice --operation Write --topic orders``). They are written to the first log dir of a
single broker (broker.security.acl), which picks them up at its next request, or with
``--zookeeper`` to a cluster's ``/kafka-acl`` nodes plus a ``/kafka-acl-changes`` notification
naming the resource, which every broker watches and answers by re-reading that resource
(``--resource-pattern-type prefixed``: ``/kafka-acl-extended/prefixed`` and
``/kafka-acl-extended-changes``)."""

from __future__ import annotations

import argparse
import sys

from minikafka.broker.security.acl import (CLUSTER_NAME, OPERATIONS, Acl, AclError, AclStore, entry_json, keyed,
                                           parse_entries, resource_key, split_key, with_acls,
                                           without_acls)
from minikafka.broker.users_cli import first_log_dir, log_dir_arguments


def register(subparsers) -> None:
    acls = subparsers.add_parser(
        "acls", help="manage ACLs (a single broker's log dir or a cluster's ZooKeeper)",
        description="Add, remove or list the ACLs the authorizer (authorizer.class.name) checks, "
                    "with kafka-acls' arguments.")
    actions = acls.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    resource = argparse.ArgumentParser(add_help=False)
    which = resource.add_mutually_exclusive_group()
    which.add_argument("--topic", help="a topic name, or * for every topic")
    which.add_argument("--group", help="a consumer group, or * for every group")
    which.add_argument("--cluster", action="store_true", help="the cluster (Create, ClusterAction, Describe)")
    resource.add_argument("--resource-pattern-type", choices=("literal", "prefixed"), default="literal",
                          type=str.lower, help="literal: the name itself (* every resource); prefixed: every "
                                               "resource whose name begins with it (KIP-290)")
    rules = argparse.ArgumentParser(add_help=False)
    rules.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    rules.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    rules.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    rules.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    rules.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                       help=f"one of {', '.join(OPERATIONS)} (repeatable; default All)")
    for name, parents, help_text in (("add", [resource, rules], "add ACLs"),
                                     ("remove", [resource, rules], "remove ACLs (all of the resource without principals)"),
                                     ("list", [resource], "list ACLs")):
        actions.add_parser(name, parents=[log_dir_arguments(), *parents], help=help_text)
    acls.set_defaults(func=_acls_command)


def _resource(args) -> str | None:
    prefixed = args.resource_pattern_type == "prefixed"
    if args.cluster:
        return resource_key("Cluster", CLUSTER_NAME, prefixed=prefixed)
    if args.topic is not None:
        return resource_key("Topic", args.topic, prefixed=prefixed)
    if args.group is not None:
        return resource_key("Group", args.group, prefixed=prefixed)
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


def _print(acls_by_resource: dict, key: str | None) -> None:
    for resource, acls in sorted(acls_by_resource.items()):
        if key is None or resource == key:
            print(f"Current ACLs for resource `{resource}`:")
            for acl in acls:
                print(f"    {acl.principal} has {acl.permission} permission for operations: "
                      f"{acl.operation} from hosts: {acl.host}")


async def _zookeeper_command(args, key: str | None, acls: list[Acl]) -> None:
    from minikafka.replication.kafka_zk import KafkaZk
    from minikafka.replication.zookeeper import ZkClient

    async with ZkClient(args.zookeeper) as client:
        zk = KafkaZk(client)
        current = parse_entries(keyed(await zk.acls()))
        if args.action == "list":
            _print(current, key)
            return
        entries = with_acls(current.get(key, []), acls) if args.action == "add" else \
            without_acls(current.get(key, []), acls or None)
        prefixed, resource_type, name = split_key(key)
        await zk.set_acls(resource_type, name, entry_json(entries) if entries else None, prefixed=prefixed)


def _acls_command(args: argparse.Namespace) -> int:
    try:
        key = _resource(args)
        acls = _acls(args) if args.action != "list" else []
        if args.action != "list" and key is None:
            raise AclError("name the resource: --topic, --group or --cluster")
        if args.action == "add" and not acls:
            raise AclError("give --allow-principal or --deny-principal")
        if args.zookeeper:
            import trio

            from minikafka.replication.zookeeper import ZooKeeperError

            try:
                trio.run(_zookeeper_command, args, key, acls)
            except ZooKeeperError as exc:
                raise AclError(f"ZooKeeper {args.zookeeper}: {exc}") from None
            return 0
        store = AclStore(first_log_dir(args))
        if args.action == "list":
            _print(store.load(), key)
            return 0
        if args.action == "add":
            store.add(key, acls)
        else:
            store.remove(key, acls or None)
        return 0
    except (AclError, OSError, ValueError) as exc:
        print(f"minikafka acls: error: {exc}", file=sys.stderr)
        return 1
