"""``minikafka users add|remove|list``: SCRAM users (kafka-configs' ``--entity-type users
--alter --add-config SCRAM-SHA-256=[...]``). Credentials are stored salted: in the first log
dir of a single broker (broker.security.scram), or with ``--zookeeper`` in
``/config/users/<user>`` of a cluster's ZooKeeper, where Kafka keeps them. Brokers read them at
each authentication, so no restart is needed."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from minikafka.broker.security.scram import (HASHES, MIN_ITERATIONS, CredentialError, CredentialStore,
                                              with_password, without)


def register(subparsers) -> None:
    users = subparsers.add_parser(
        "users", help="manage SCRAM users (a single broker's log dir or a cluster's ZooKeeper)",
        description="Add, remove or list the SCRAM-SHA-256/512 users a single broker's SASL "
                    "listeners accept; credentials are kept salted in the log dir, never the password.")
    actions = users.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    common = log_dir_arguments()
    add = actions.add_parser("add", parents=[common], help="add a user or change its password")
    add.add_argument("user")
    add.add_argument("--mechanism", action="append", choices=sorted(HASHES),
                     help="SCRAM mechanism (repeatable; default both)")
    add.add_argument("--iterations", type=int, default=MIN_ITERATIONS)
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password", help="the password (visible to other local users in ps; "
                                           "prefer --password-stdin or the prompt)")
    source.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    remove = actions.add_parser("remove", parents=[common], help="remove a user's credentials")
    remove.add_argument("user")
    remove.add_argument("--mechanism", action="append", choices=sorted(HASHES),
                        help="only this mechanism's credential (repeatable)")
    actions.add_parser("list", parents=[common], help="list users and their mechanisms")
    users.set_defaults(func=_users_command)


def log_dir_arguments() -> argparse.ArgumentParser:
    """--log-dir / --config: where a tool finds a single broker's first log dir; --zookeeper:
    a cluster's ZooKeeper instead."""
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_mutually_exclusive_group()
    where.add_argument("--log-dir", type=Path, help="the broker's data directory (default ./minikafka-data)")
    where.add_argument("--config", type=Path, metavar="FILE", help="take log.dirs from this server.properties")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="a cluster's ZooKeeper (the brokers' zookeeper.connect) instead of a log dir")
    return common


def first_log_dir(args) -> Path:
    from minikafka.broker.config import BrokerConfig

    return BrokerConfig.from_sources(config_file=args.config, log_dir=args.log_dir).log_dirs[0]


def _store(args) -> CredentialStore:
    return CredentialStore(first_log_dir(args))


def _password(args) -> str:
    if args.password is not None:
        return args.password
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    if not sys.stdin.isatty():
        # getpass would read the password from the pipe, echoed, after a warning.
        raise CredentialError("no terminal to ask for the password on: give --password or --password-stdin")
    try:
        return getpass.getpass(f"password for {args.user}: ")
    except EOFError:  # Ctrl-D at the prompt
        print(file=sys.stderr)
        return ""


async def _zookeeper_command(args, password: str | None) -> int:
    from minikafka.replication.kafka_zk import KafkaZk
    from minikafka.replication.zookeeper import ZkClient

    async with ZkClient(args.zookeeper) as client:
        zk = KafkaZk(client)
        if args.action == "list":
            for user, entry in (await zk.users()).items():
                print(f"{user}\t{','.join(sorted(entry))}")
            return 0
        entry = await zk.user_config(args.user)
        if args.action == "remove":
            if not entry:
                print(f"minikafka users: error: no user {args.user!r}", file=sys.stderr)
                return 1
            await zk.set_user_config(args.user, without(entry, args.mechanism))
            return 0
        await zk.set_user_config(args.user, with_password(entry, password, args.mechanism or sorted(HASHES),
                                                          iterations=args.iterations))
        return 0


def _users_command(args: argparse.Namespace) -> int:
    try:
        password = None
        if args.action == "add":
            password = _password(args)
            if not password:
                print("minikafka users: error: the password is empty", file=sys.stderr)
                return 1
        if args.zookeeper:
            import trio

            from minikafka.replication.zookeeper import ZooKeeperError

            try:
                return trio.run(_zookeeper_command, args, password)
            except ZooKeeperError as exc:
                print(f"minikafka users: error: ZooKeeper {args.zookeeper}: {exc}", file=sys.stderr)
                return 1
        store = _store(args)
        if args.action == "list":
            for user, mechanisms in store.users().items():
                print(f"{user}\t{','.join(mechanisms)}")
            return 0
        if args.action == "remove":
            if not store.remove(args.user, args.mechanism):
                print(f"minikafka users: error: no user {args.user!r}", file=sys.stderr)
                return 1
            return 0
        store.add(args.user, password, args.mechanism or sorted(HASHES), iterations=args.iterations)
        return 0
    except (CredentialError, OSError, ValueError) as exc:
        print(f"minikafka users: error: {exc}", file=sys.stderr)
        return 1
