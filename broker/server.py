"""The broker: storage, topics, the TCP listener and background duties under one trio nursery.

``Broker(config)`` owns the :class:`~storage.log_manager.LogManager`, the group coordinator and
(with ``minikafka.export.dir``) the export hand-off. ``await nursery.start(broker.serve)``
opens the listener, loads every partition, starts the background tasks and reports the bound
``(host, port)``; cancelling it shuts down cleanly (checkpoints and the clean-shutdown marker),
so the next start needs no recovery.

Handlers stay thin: the topic and partition operations they need (create, delete, append with
acks and fetch wake-ups, the leader's log and its bounds) are ``broker.partitions``, chosen
here once: :mod:`broker.partitions.local` on a single broker, ``.replicated`` in a cluster.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import trio

from minikafka.broker.config import BrokerConfig, ConfigError, Listener, host_port, parse_properties
from minikafka.broker.dynamic_configs import DEFAULT_ENTITY, DynamicConfigFile
from minikafka.broker.groups.config import GroupConfig
from minikafka.broker.outliving import outlive_request
from minikafka.broker.partitions.local import LocalPartitions
from minikafka.broker.request_memory import RequestMemory
from minikafka.broker.security import CLUSTER_NAME
from minikafka.storage.cleaner import LogCleaner
from minikafka.storage.clock import Clock, SystemClock
from minikafka.storage.config import LogConfig
from minikafka.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from minikafka.storage.types import CorruptPartitionMetadata

logger = logging.getLogger(__name__)

# Topics that belong to the broker itself: clients may read them but not write them, and
# Metadata flags them is_internal so clients can leave them out of their topic lists.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
# Kafka's AclOperation codes, bits of the authorized-operations fields, of the operations each
# resource type supports.
_TOPIC_OPERATIONS = {"Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7, "Describe": 8,
                     "DescribeConfigs": 10, "AlterConfigs": 11}
_CLUSTER_OPERATIONS = {"Create": 5, "Alter": 7, "Describe": 8, "ClusterAction": 9, "DescribeConfigs": 10,
                       "AlterConfigs": 11, "IdempotentWrite": 12}

# What trio.open_tcp_listeners asks for: as many as the kernel allows (somaxconn caps it).
_LISTEN_BACKLOG = 0xFFFF
# accept(2) failing for want of resources, which may come back (as trio.serve_listeners).
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})

META_PROPERTIES = "meta.properties"
# Kafka's lock file: an exclusive flock keeps a second broker off the same log dir.
LOCK_FILE = ".lock"


class BrokerStartupError(Exception):
    """The broker cannot start (log dir unusable, port busy); the message is one sentence."""


class AppendWaiters:
    """Wakes long-polling fetches when a partition they watch gets new messages.

    A fetch registers one ``trio.Event`` under every partition it reads; an append (or the
    deletion of the topic) sets and forgets every event registered for that partition, so a
    waiting fetch is woken exactly when there may be something new to read, without polling.
    """

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[trio.Event]] = {}

    @contextmanager
    def watch(self, partitions: Iterable[tuple[str, int]]) -> Iterator[trio.Event]:
        """Register a fresh event for ``partitions`` for the duration of the block."""
        event = trio.Event()
        keys = list(partitions)
        for key in keys:
            self._waiters.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[key]

    def notify(self, topic: str, partition: int) -> None:
        for event in self._waiters.pop((topic, partition), ()):
            event.set()


def _open_file_limit() -> int:
    """The soft RLIMIT_NOFILE, named in errors that running out of descriptors causes."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _new_cluster_id() -> str:
    """Kafka's cluster id form: a random UUID as 22 characters of unpadded URL-safe base64."""
    import base64

    # A version 4 UUID's bits, as java.util.UUID.randomUUID() sets them, from os.urandom: a
    # test broker starts on a fresh log dir every time, and the uuid module's import would
    # cost each of those start-ups ~0.7 ms.
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # IETF variant
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


async def _bind_tcp(host: bytes | str | None, port: int) -> list[trio.socket.SocketType]:
    """``trio.open_tcp_listeners`` up to, not including, ``listen``: a socket bound to each
    address ``host`` resolves to (both wildcards for None), with SO_REUSEADDR, IPv6 ones
    v6-only; an address family the system lacks is skipped."""
    sockets: list[trio.socket.SocketType] = []
    try:
        for family, type_, proto, _, address in await trio.socket.getaddrinfo(
                host, port, type=trio.socket.SOCK_STREAM, flags=trio.socket.AI_PASSIVE):
            try:
                sock = trio.socket.socket(family, type_, proto)
            except OSError as exc:
                if exc.errno == errno.EAFNOSUPPORT:
                    continue
                raise
            sockets.append(sock)
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
            if family == trio.socket.AF_INET6:
                sock.setsockopt(trio.socket.IPPROTO_IPV6, trio.socket.IPV6_V6ONLY, 1)
            await sock.bind(address)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(errno.EAFNOSUPPORT, f"no address family of {host!r} is supported here")
    return sockets


def _holds_partitions(log_dir: Path) -> bool:
    """Whether ``log_dir`` may hold a directory (a partition, or a deletion's leftover) to load."""
    try:
        return any(entry.is_dir() and not entry.name.startswith(".") for entry in os.scandir(log_dir))
    except (FileNotFoundError, NotADirectoryError):  # made, or refused, by _start_storage
        return False
    except OSError:  # unreadable: _start_storage says so
        return True


def _listen(bound: list[tuple[Listener, list[trio.socket.SocketType]]]) -> list[tuple[Listener, list[trio.SocketListener]]]:
    """The bound sockets listening: from here on connects to them succeed."""
    opened = []
    for listener, sockets in bound:
        for sock in sockets:
            sock.listen(_LISTEN_BACKLOG)
        opened.append((listener, [trio.SocketListener(sock) for sock in sockets]))
    return opened


def _close(bound: list[tuple[Listener, list[trio.socket.SocketType]]]) -> None:
    for _, sockets in bound:
        for sock in sockets:
            sock.close()


class _StartOnFirstUse:
    """A single broker's group or transaction coordinator, started by the first request that
    needs it: its state topic is created, or its snapshots and events loaded, in a worker
    thread while that request (and any other that needs it) waits; other requests go on being
    served. If the disk refuses, that is logged, ``start`` answers False and the next request
    tries again."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.running = False
        self._starting = trio.Lock()

    async def start(self, coordinator, topic_admin: trio.Lock, nursery: trio.Nursery) -> bool:
        if not self.running:
            async with self._starting:
                if not self.running:
                    try:
                        # Under the topic lock: a CreateTopics of the state topic must see it.
                        async with topic_admin:
                            await trio.to_thread.run_sync(coordinator.startup)
                    except OSError as exc:
                        logger.error("cannot start the %s: %s", self.name, exc.strerror or exc)
                        return False
                    await nursery.start(coordinator.run)
                    self.running = True
        return True


class Broker:
    """A single Kafka broker (node ``config.node_id``) serving one PLAINTEXT listener.

    Attributes the handlers and the group coordinator use: ``config``, ``clock``,
    ``node_id``, ``partitions`` (topics and partitions, :mod:`broker.partitions`),
    ``log_manager``, ``group_coordinator``, ``producer_ids``, ``cluster_id``, ``advertised_host``,
    ``advertised_port`` (valid once ``serve`` has started), ``append_waiters``,
    ``request_memory`` (``queued.max.request.bytes``), ``faults`` (a ``FaultInjector`` when
    started for tests, else None).
    """

    def __init__(self, config: BrokerConfig, *, clock: Clock | None = None) -> None:
        # The configuration as started; ``config`` is it with the dynamic settings over it.
        self.static_config = config
        self.node_id = config.node_id
        self._dynamic_file = None
        self._dynamic: dict[str, dict[str, str]] = {}
        if config.zookeeper_connect is None:
            self._dynamic_file = DynamicConfigFile(config.log_dirs[0])
            self._dynamic = self._dynamic_file.load()
            config = self._layered(self._dynamic)
        self.config = config
        self.clock = clock if clock is not None else SystemClock()
        self.default_log_config: LogConfig = config.log_config()
        self.cluster_id: str | None = None
        self.host: str | None = None
        self.port: int | None = None
        self.advertised_host: str | None = None
        self.advertised_port: int | None = None
        # Listener name -> advertised (host, port), once serving.
        self.endpoints: dict[str, tuple[str, int]] = {}
        # Listener name -> the port it is bound to (what a dynamic advertised.listeners without one means).
        self._bound_ports: dict[str, int] = {}
        self.tls_contexts = {}
        if any(listener.uses_tls for listener in config.listeners):
            from minikafka.broker.security import tls

            self.tls_contexts = {listener.name: tls.server_context(config, listener)
                                 for listener in config.listeners if listener.uses_tls}
        self.plain_users: dict[str, dict[str, str]] = {}
        for listener in config.listeners:
            if listener.uses_sasl and "PLAIN" in config.listener_setting(listener, "sasl.enabled.mechanisms"):
                from minikafka.broker.security import sasl

                try:
                    self.plain_users[listener.name] = sasl.plain_users(
                        config.listener_setting(listener, "sasl.jaas.config", "PLAIN"))
                except sasl.JaasError as exc:
                    raise ConfigError(f"sasl.jaas.config of listener {listener.name}: {exc}") from None
        self.authorizer = None
        if config.get("authorizer.class.name"):
            from minikafka.broker.security.acl import AclStore, Authorizer, ZkAcls, parse_super_users

            # A cluster's ACLs are its ZooKeeper's /kafka-acl nodes, refreshed while serving.
            acls = ZkAcls() if config.zookeeper_connect is not None else AclStore(config.log_dirs[0])
            self.authorizer = Authorizer(acls,
                                         super_users=parse_super_users(config.get("super.users")),
                                         allow_if_no_acls=config.get("allow.everyone.if.no.acl.found"))
        self._acl_writes = trio.Lock()
        self.append_waiters = AppendWaiters()
        self.request_memory = RequestMemory(config.queued_max_request_bytes)
        # Tests only (minikafka.test.control.port): injected errors and delays, and where the
        # channel that queues them listens once serving.
        self.faults = None
        if config.test_control_port is not None:
            from minikafka.broker.fault_injection import FaultInjector  # imports the handlers

            self.faults = FaultInjector()
        self.control_address: tuple[str, int] | None = None
        self._dir_locks: list = []
        self.export_handoff = None
        segment_hooks = {}
        if config.export_dir is not None:
            try:
                from minikafka.export.handoff import ExportHandoff
            except ModuleNotFoundError as exc:
                raise ConfigError(f"minikafka.export.dir: the export package is not available ({exc})") from None

            options = {"master": config.export_master} if config.export_master is not None else {}
            handoff_class = ExportHandoff
            if config.zookeeper_connect is not None:  # progress shared by the cluster, in ZooKeeper
                from minikafka.export.cluster_handoff import ClusterExportHandoff

                handoff_class = ClusterExportHandoff
                options["node_id"] = config.node_id
            try:
                self.export_handoff = handoff_class(out_dir=config.export_dir, log_dirs=config.log_dirs, **options)
            except ValueError as exc:  # a malformed Spark master URL
                raise ConfigError(f"minikafka.export.master: {exc}") from None
            segment_hooks = {"on_segment_closed": self.export_handoff.segment_closed,
                             "may_delete_segment": self.export_handoff.may_delete}
        self.log_manager = LogManager(config.log_dirs, self.default_log_config, self.clock, **segment_hooks)
        # The topic and partition operations handlers use, chosen here once; and the cluster
        # membership (zookeeper.connect set), None for the embedded single broker, which never
        # imports the replication layer (nor kazoo).
        if config.zookeeper_connect is None:
            self.cluster = None
            self.partitions = LocalPartitions(self)
        else:
            from minikafka.broker.partitions.replicated import ReplicatedPartitions

            self.partitions = ReplicatedPartitions(self)
            self.cluster = self.partitions.cluster_member()
            if self.export_handoff is not None:
                self.export_handoff.join_cluster(self.partitions.export_view())
        try:
            GroupConfig.from_broker_config(config)
        except ValueError as exc:  # a group.* / offsets.* setting the coordinator refuses
            raise ConfigError(str(exc)) from None
        self._group_coordinator = None
        self._txn_coordinator = None
        self._txns_start = _StartOnFirstUse("transaction coordinator")
        self._producer_ids = None
        self._groups_start = _StartOnFirstUse("group coordinator")
        self._nursery: trio.Nursery | None = None
        # The running log cleaner's; cancelled to restart it under new dynamic settings.
        self._cleaner_scope: trio.CancelScope | None = None

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the broker until cancelled; ``task_status.started((host, port))`` once ready."""
        from minikafka.broker.connection import Connection

        bound = await self._bind_listeners()
        storage_started = False
        try:
            if self.cluster is not None:
                await self._join_cluster_zookeeper()
            if any(map(_holds_partitions, self.config.log_dirs)):
                await trio.to_thread.run_sync(self._start_storage)
            else:
                # New or empty log dirs, nothing to load or recover: under a millisecond,
                # less than the worker thread a to_thread starts first (~1 ms), which the
                # count_maps below then starts once listening, off the path to the ready line.
                # Nothing is served before either way.
                self._start_storage()
            storage_started = True
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._every, self.config.retention_check_interval_ms,
                                   self._retention_pass, "retention")
                nursery.start_soon(self._every, self.config.flush_scheduler_interval_ms,
                                   self.log_manager.flush_due, "flush")
                nursery.start_soon(self._every, self.config.checkpoint_interval_ms,
                                   self.log_manager.checkpoint, "checkpoint")
                if self.config.cleaner_enabled:
                    nursery.start_soon(self._run_cleaner)
                nursery.start_soon(self.partitions.move_replicas)
                nursery.start_soon(self._every, self.config.producer_id_expiration_check_interval_ms,
                                   self.log_manager.remove_expired_producers, "producer expiry")
                if self.cluster is not None:
                    await self.start_cluster_coordinators(nursery)
                if self.export_handoff is not None:
                    nursery.start_soon(self.export_handoff.run)
                if self.faults is not None:
                    from minikafka.broker.control import serve_control

                    self.control_address = await nursery.start(serve_control, self.faults,
                                                               self.config.test_control_port)

                for listener, sockets in _listen(bound):
                    async def handle(stream: trio.SocketStream, listener=listener) -> None:
                        await Connection(self, stream, listener, self.tls_contexts.get(listener.name)).run()

                    for socket_listener in sockets:
                        nursery.start_soon(self._accept, socket_listener, handle, nursery)
                # Off the path to the ready line and to the first answers (see LogManager.count_maps).
                nursery.start_soon(trio.to_thread.run_sync, self.log_manager.count_maps)
                if self.cluster is not None and self.authorizer is not None:
                    await self.partitions.follow_acls()  # before the first client is authorized
                if self.cluster is not None:
                    await self.partitions.follow_topic_configs()
                if self.cluster is not None:
                    await nursery.start(self.cluster.run, self.endpoints,
                                        {listener.name: listener.security_protocol for listener in self.config.listeners})
                logger.info("serving on %s (advertised %s), log dirs %s", host_port(self.host, self.port),
                            host_port(self.advertised_host, self.advertised_port),
                            ",".join(map(str, self.config.log_dirs)))
                task_status.started((self.advertised_host, self.advertised_port))
        finally:
            with trio.CancelScope(shield=True):
                _close(bound)
                await trio.lowlevel.checkpoint()
                if storage_started:
                    await trio.to_thread.run_sync(self._stop_storage)
                else:
                    self._release_dir_locks()

    async def _bind_listeners(self) -> list[tuple[Listener, list[trio.socket.SocketType]]]:
        """Bind every configured listener's sockets (the first one's address is
        ``host``/``port``) and note each one's advertised address. They listen only once the
        broker accepts (_listen), after storage has loaded, as Kafka starts its socket server
        after its logs: a client's connect is then answered at once, while a busy port is
        still refused here, before a long recovery."""
        bound: list[tuple[Listener, list[trio.socket.SocketType]]] = []
        try:
            for listener in self.config.listeners:
                host = listener.host
                if host is not None and host.isascii():
                    host = host.encode()  # a str would load the idna codec (1 ms of start-up)
                try:
                    sockets = await _bind_tcp(host, listener.port)
                except OSError as exc:
                    where = f"{listener.name}://{listener.host or '*'}:{listener.port}"
                    reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
                    raise BrokerStartupError(f"cannot listen on {where}: {reason}") from None
                bound.append((listener, sockets))
                self._bound_ports[listener.name] = sockets[0].getsockname()[1]
        except BaseException:
            _close(bound)
            raise
        sockname = bound[0][1][0].getsockname()
        self.host, self.port = sockname[0], sockname[1]
        self._advertise(self.config)
        return bound

    def _advertise(self, config: BrokerConfig) -> None:
        """Note each bound listener's advertised address under ``config``, what Metadata answers."""
        for listener in config.listeners:
            self.endpoints[listener.name] = config.advertised_address(self._bound_ports[listener.name], listener)
        self.advertised_host, self.advertised_port = self.endpoints[config.listener.name]

    async def scram_credential(self, user: str, mechanism: str):
        """``user``'s SCRAM credential: from ``/config/users/<user>`` in ZooKeeper in a
        cluster (where Kafka keeps them), else from the log dir's file; None if it has none."""
        from minikafka.broker.security.scram import CredentialError, CredentialStore, ScramCredential

        if self.cluster is not None:
            from minikafka.replication.zookeeper import ZooKeeperError

            try:
                text = (await self.cluster.zk.user_config(user)).get(mechanism)
            except ZooKeeperError as exc:
                raise CredentialError(f"cannot read the credentials of {user!r} from ZooKeeper: {exc}") from None
            return None if text is None else ScramCredential.parse(text)
        return await trio.to_thread.run_sync(CredentialStore(self.config.log_dirs[0]).get, user, mechanism)

    async def scram_users(self) -> dict[str, dict[str, str]]:
        """Every SCRAM user's credentials (mechanism -> stored text), where
        :meth:`scram_credential` reads them."""
        if self.cluster is not None:
            return await self.cluster.zk.users()
        from minikafka.broker.security.scram import CredentialStore

        return await trio.to_thread.run_sync(CredentialStore(self.config.log_dirs[0]).entries)

    async def set_scram_user(self, user: str, entry: dict[str, str]) -> None:
        """``user`` now has exactly the credentials of ``entry`` (none: it goes), where
        :meth:`scram_credential` reads them at the next authentication."""
        if self.cluster is not None:
            await self.cluster.zk.set_user_config(user, entry)
            return
        from minikafka.broker.security.scram import CredentialStore

        await trio.to_thread.run_sync(CredentialStore(self.config.log_dirs[0]).set, user, entry)

    async def change_acls(self, change) -> None:
        """Change the ACLs the authorizer enforces (CreateAcls, DeleteAcls): ``change(current
        ACLs by resource)`` returns the resources whose ACLs change, each with all of its new
        ACLs (none: its entry goes). One change at a time on this broker, so none is lost to
        another's read and write. They go where the authorizer reads them: a cluster's
        ``/kafka-acl`` nodes, each with Kafka's change notification for the other brokers, and
        this broker's copy at once (as SimpleAclAuthorizer updates its cache); else the log
        dir's ACL file."""
        from minikafka.broker.security.acl import entry_json, split_key

        store = self.authorizer.store
        async with self._acl_writes:
            changes = change(store.load())
            if self.cluster is None:
                await trio.to_thread.run_sync(store.set_resources, changes)
                return
            for key, acls in changes.items():
                prefixed, resource_type, name = split_key(key)
                entry = entry_json(acls) if acls else None
                await self.cluster.zk.set_acls(resource_type, name, entry, prefixed=prefixed)
                store.update(key, entry)

    def _layered(self, dynamic: dict[str, dict[str, str]]) -> BrokerConfig:
        return self.static_config.with_dynamic(dynamic.get(DEFAULT_ENTITY, {}), dynamic.get(str(self.node_id), {}))

    def dynamic_configs(self, entity: str) -> dict[str, str]:
        """The dynamic settings of ``entity`` (this broker's id, or the cluster default's)."""
        return dict(self._dynamic.get(entity, {}))

    def check_dynamic_configs(self, entity: str, settings: dict[str, str]) -> None:
        """ConfigError (broker.config's) for a value the layered configuration refuses, or a
        cleaner thread count Kafka's LogCleaner.validateReconfiguration refuses (the count has
        no effect here, one task cleans, but a value Kafka refuses is refused alike)."""
        threads = self._layered({**self._dynamic, entity: settings}).get("log.cleaner.threads")
        current = self.config.get("log.cleaner.threads")
        if threads < 1:
            raise ConfigError("Log cleaner threads should be at least 1")
        if threads < current // 2:
            raise ConfigError(f"Log cleaner threads cannot be reduced to less than half the current value {current}")
        if threads > current * 2:
            raise ConfigError(f"Log cleaner threads cannot be increased to more than double the current value {current}")

    async def alter_dynamic_configs(self, entity: str, settings: dict[str, str]) -> None:
        """Replace ``entity``'s dynamic settings (checked by the caller): kept, then in effect at
        once, for every log without an override of its own too. A cluster keeps them in
        ZooKeeper, and each broker applies them when notified (this one too, a moment after)."""
        if self.cluster is not None:
            await self.cluster.zk.set_broker_config(entity, settings)
            return
        dynamic = {**self._dynamic, entity: dict(settings)}
        self._layered(dynamic)
        await trio.to_thread.run_sync(self._dynamic_file.save, dynamic)
        await self.apply_dynamic_configs(dynamic)

    async def apply_dynamic_configs(self, dynamic: dict[str, dict[str, str]]) -> None:
        """Run with these dynamic settings (entity -> settings) from now on; ConfigError for a
        value that does not parse, which changes nothing."""
        config = self._layered(dynamic)
        cleaner_changed = _cleaner_settings(config) != _cleaner_settings(self.config)
        self._dynamic, self.config = dynamic, config
        self.default_log_config = config.log_config()
        if self._bound_ports:
            self._advertise(config)
            if self.cluster is not None:
                await self.cluster.update_endpoints(self.endpoints)
        if cleaner_changed and self._cleaner_scope is not None:
            self._cleaner_scope.cancel()
        await trio.to_thread.run_sync(self.log_manager.set_default_config, self.default_log_config)
        logger.info("dynamic broker configs now %s", {entity: s for entity, s in dynamic.items() if s})

    def authorize(self, request, operation: str, resource_type: str, name: str = CLUSTER_NAME) -> bool:
        """Whether ``request``'s principal may do ``operation`` ("Read", "Write", ...) on the
        resource (``"Topic"``/``"Group"``/``"Cluster"``); always without an authorizer. An
        unreadable ACL file denies (and says so in the log) rather than opening everything."""
        if self.authorizer is None:
            return True
        from minikafka.broker.security.acl import AclError

        try:
            allowed = self.authorizer.authorize(request.principal, request.client_host, operation, resource_type, name)
        except AclError as exc:
            logger.error("authorizer: %s; denying", exc)
            return False
        if not allowed:
            logger.info("authorizer: %s from %s may not %s %s:%s", request.principal, request.client_host,
                        operation, resource_type, name)
        return allowed

    def authorized_operations(self, request, resource_type: str, name: str = CLUSTER_NAME) -> int:
        """KIP-430's bit set of the operations ``request``'s principal may do on the resource
        (Metadata v8+, DescribeCluster, DescribeTopicPartitions), over those its type supports."""
        operations = _TOPIC_OPERATIONS if resource_type == "Topic" else _CLUSTER_OPERATIONS
        return sum(1 << code for operation, code in operations.items()
                   if self.authorize(request, operation, resource_type, name))

    def authorize_any(self, request, operation: str, resource_type: str) -> bool:
        """Whether ``request``'s principal may do ``operation`` on some resource of the type
        (see ``Authorizer.authorize_any``); always without an authorizer."""
        if self.authorizer is None:
            return True
        from minikafka.broker.security.acl import AclError

        try:
            return self.authorizer.authorize_any(request.principal, request.client_host, operation, resource_type)
        except AclError as exc:
            logger.error("authorizer: %s; denying", exc)
            return False

    def advertised_endpoint(self, listener_name: str = "") -> tuple[str, int]:
        """The (host, port) clients of ``listener_name`` are told to use: Kafka answers
        Metadata with the addresses of the listener the request came in on."""
        return self.endpoints.get(listener_name, (self.advertised_host, self.advertised_port))

    async def _accept(self, listener: trio.SocketListener, handle, nursery: trio.Nursery) -> None:
        """``trio.serve_listeners`` for one listener, but out of descriptors (or memory) it
        logs one line when accepting stalls and one when it resumes, where trio logs a
        traceback every 100 ms; the waiting clients stay in the backlog meanwhile."""
        stalled = False
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                if not stalled:
                    stalled = True
                    logger.error("cannot accept connections: %s (open-file limit %d); retrying",
                                 exc.strerror, _open_file_limit())
                await trio.sleep(0.1)
                continue
            if stalled:
                stalled = False
                logger.info("accepting connections again")
            nursery.start_soon(handle, stream)

    def _start_storage(self) -> None:
        for log_dir in self.config.log_dirs:
            if log_dir.exists() and not log_dir.is_dir():
                raise BrokerStartupError(f"cannot use log dir {log_dir}: it is not a directory")
            try:
                log_dir.mkdir(parents=True, exist_ok=True)
                lock = open(log_dir / LOCK_FILE, "a+b")
            except OSError as exc:
                raise BrokerStartupError(
                    f"cannot use log dir {log_dir}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()
                raise BrokerStartupError(
                    f"cannot use log dir {log_dir}: another broker is using it") from None
            self._dir_locks.append(lock)
        self.cluster_id = self._load_or_create_cluster_id(self.cluster_id)
        for log_dir in self.config.log_dirs:
            if _holds_partitions(log_dir) and not (log_dir / CLEAN_SHUTDOWN_FILE).exists():
                logger.warning("log dir %s was not shut down cleanly: recovering its logs", log_dir)
        try:
            self.log_manager.startup()
        except OSError as exc:  # e.g. a full disk while recovery rebuilds indexes: one line, not a signal
            dirs = self.config.log_dirs
            where = next((d for d in dirs if exc.filename and Path(exc.filename).is_relative_to(d)), None)
            named = f"log dir {where}" if where else f"log dir{'s' * (len(dirs) > 1)} {','.join(map(str, dirs))}"
            raise BrokerStartupError(f"cannot load logs from {named}: {exc.strerror or exc}"
                                     + (f" ({exc.filename})" if exc.filename else "")) from None
        except (RuntimeError, CorruptPartitionMetadata) as exc:  # e.g. one partition in two log dirs
            raise BrokerStartupError(f"cannot load logs: {exc}") from None

    def _stop_storage(self) -> None:
        try:
            if self._group_coordinator is not None:
                try:
                    self._group_coordinator.shutdown()
                except Exception:
                    logger.exception("group coordinator shutdown failed")
            if self._txn_coordinator is not None:
                try:
                    self._txn_coordinator.shutdown()
                except Exception:
                    logger.exception("transaction coordinator shutdown failed")
            self.log_manager.shutdown()
            if self.export_handoff is not None:
                self.export_handoff.close()
        finally:
            self._release_dir_locks()
        logger.info("shut down cleanly")

    def _release_dir_locks(self) -> None:
        for lock in self._dir_locks:
            lock.close()  # closing the descriptor releases the flock
        self._dir_locks.clear()

    async def _join_cluster_zookeeper(self) -> None:
        """Connect to ZooKeeper and take the cluster's id (a log dir of another cluster is
        refused), before storage loads."""
        from minikafka.replication.zookeeper import ZooKeeperError

        stored = await trio.to_thread.run_sync(self._stored_cluster_id)
        try:
            cluster_id = await self.cluster.connect(stored or _new_cluster_id())
        except ZooKeeperError as exc:
            raise BrokerStartupError(f"cannot join the cluster at zookeeper.connect="
                                     f"{self.config.zookeeper_connect}: {exc}") from None
        if stored is not None and stored != cluster_id:
            raise BrokerStartupError(f"log dir belongs to cluster {stored}, but ZooKeeper at "
                                     f"{self.config.zookeeper_connect} holds cluster {cluster_id}")
        self.cluster_id = cluster_id

    def _stored_cluster_id(self) -> str | None:
        for log_dir in self.config.log_dirs:
            path = log_dir / META_PROPERTIES
            if path.exists():
                props = parse_properties(path.read_text(encoding="utf-8"), source=str(path))
                if props.get("cluster.id"):
                    return props["cluster.id"]
        return None

    def _load_or_create_cluster_id(self, known: str | None = None) -> str:
        """Read ``cluster.id`` from ``meta.properties`` or create one (``known``: the id a
        cluster's ZooKeeper holds); every log dir gets the file, so the id stays stable for
        the data directory.

        ``meta.properties`` is Kafka's file, in properties syntax::

            version=0
            broker.id=<node id>
            cluster.id=<22 characters of unpadded URL-safe base64>
        """
        cluster_id = known or self._stored_cluster_id() or _new_cluster_id()
        for log_dir in self.config.log_dirs:
            path = log_dir / META_PROPERTIES
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                tmp.write_text(f"version=0\nbroker.id={self.node_id}\ncluster.id={cluster_id}\n",
                               encoding="utf-8")
                os.replace(tmp, path)
        return cluster_id

    async def _every(self, interval_ms: int, duty, name: str) -> None:
        """Run ``duty()`` every ``interval_ms`` in a worker thread (it may fsync or unlink;
        storage is thread-safe); a failure is logged and retried next time."""
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                await trio.to_thread.run_sync(duty)
            except Exception:
                logger.exception("background %s failed", name)

    async def _run_cleaner(self) -> None:
        """The log cleaner, started again with the settings of the moment whenever its dynamic
        ones change (Kafka's LogCleaner.reconfigure stops its threads and starts new ones):
        the pass in progress is aborted, and a backoff being slept is cut short."""
        while True:
            with trio.CancelScope() as self._cleaner_scope:
                await self._clean_logs()

    async def _clean_logs(self) -> None:
        """The log cleaner's background task (Kafka's CleanerThread): clean while some
        compacted log is due, then sleep ``log.cleaner.backoff.ms``. A pass is driven from a
        worker thread, off the event loop, and computed in the cleaner's worker process, off
        this interpreter; the broker stopping (or a restart of the cleaner) kills that
        process, so neither waits for a pass, nor leaves an idle worker behind."""
        # Not __consumer_offsets: the group store keeps it short with snapshots instead
        # (broker.groups.store), and a tombstone the cleaner removed after a snapshot that
        # holds its key would bring the key back on the next load from that snapshot. Nor a
        # segment the export hand-off has not exported yet (it vetoes its deletion too).
        cleaner = LogCleaner(lambda: [log for log in self.log_manager.logs() if not self.is_internal(log.topic)],
                             self.config.cleaner_config(), self.clock, self.log_manager.may_delete_segment)
        try:
            while True:
                await trio.sleep(self.config.cleaner_backoff_ms / 1000)
                finished = False
                async with trio.open_nursery() as watch:
                    @watch.start_soon
                    async def abort_when_cancelled() -> None:
                        try:
                            await trio.sleep_forever()
                        finally:
                            if not finished:
                                cleaner.abort()

                    try:
                        await trio.to_thread.run_sync(cleaner.clean_until_idle)
                    except Exception:
                        logger.exception("background log cleaner failed")
                    finished = True
                    watch.cancel_scope.cancel()
        finally:
            cleaner.abort()  # its worker process, idle between passes

    def _retention_pass(self) -> None:
        deleted = self.log_manager.cleanup()
        if deleted:
            logger.info("retention removed %d segment(s)", deleted)

    # ------------------------------------------------------------------ groups

    @property
    def group_coordinator(self):
        """The group coordinator, built on first use: a broker whose clients never use a
        consumer group never imports it. Request handlers use :meth:`groups`."""
        if self._group_coordinator is None:
            from minikafka.broker.groups.coordinator import GroupCoordinator

            self._group_coordinator = GroupCoordinator(self)
        return self._group_coordinator

    @property
    def groups_running(self) -> bool:
        """Whether the group coordinator runs (a single broker starts it at the first group
        request, Broker.groups; a cluster member when it starts serving)."""
        return self._groups_start.running

    async def outlive_request(self, operation, stopped):
        """``operation()`` run to its end in the broker's nursery whatever becomes of the
        request awaiting it (see ``minikafka.broker.outliving``)."""
        return await outlive_request(self._nursery, operation, stopped)

    async def groups(self):
        """The group coordinator, started. A single broker starts it at the first group
        request other than FindCoordinator (Kafka creates ``__consumer_offsets`` at the first
        FindCoordinator; see _StartOnFirstUse). If the disk refuses, the coordinator stays
        stopped, answering COORDINATOR_NOT_AVAILABLE (which clients retry)."""
        coordinator = self.group_coordinator
        await self._groups_start.start(coordinator, self.partitions.topic_admin, self._nursery)
        return coordinator

    # ------------------------------------------------------------------ transactions

    async def start_cluster_coordinators(self, nursery: trio.Nursery) -> None:
        """A cluster broker's group and transaction coordinators, started with the broker:
        each loads the partitions of its state topic this broker comes to lead."""
        self.group_coordinator.startup()
        nursery.start_soon(self.group_coordinator.run)
        self._groups_start.running = True
        self.txn_coordinator.startup()
        await nursery.start(self.txn_coordinator.run)
        self._txns_start.running = True

    @property
    def txn_coordinator(self):
        """The transaction coordinator, built on first use (a cluster broker builds it at
        start-up: the partitions of ``__transaction_state`` it comes to lead are its)."""
        if self._txn_coordinator is None:
            from minikafka.broker.transactions.coordinator import TransactionCoordinator

            self._txn_coordinator = TransactionCoordinator(self)
        return self._txn_coordinator

    async def transactions(self):
        """The transaction coordinator, started; None while ``__transaction_state`` cannot be
        created or loaded on a single broker (logged; the next transactional request tries
        again). A single broker starts it as the group coordinator, at the first
        transactional request (see _StartOnFirstUse); a cluster broker at start-up."""
        coordinator = self.txn_coordinator
        if self.cluster is not None:
            return coordinator
        started = await self._txns_start.start(coordinator, self.partitions.topic_admin, self._nursery)
        return coordinator if started else None

    # ------------------------------------------------------------------ producers

    @property
    def producer_ids(self):
        """The ``ProducerIdManager`` of InitProducerId, built on first use: blocks claimed in
        ZooKeeper in a cluster, in the first log dir's file on a single broker."""
        if self._producer_ids is None:
            from minikafka.broker import producer_ids

            claim = producer_ids.local_blocks(self.config.log_dirs[0], self.node_id) if self.cluster is None \
                else producer_ids.zookeeper_blocks(self.cluster.zk_client, self.node_id)
            self._producer_ids = producer_ids.ProducerIdManager(claim)
        return self._producer_ids

    # ------------------------------------------------------------------ topics

    @staticmethod
    def is_internal(topic: str) -> bool:
        return topic in INTERNAL_TOPICS

    async def prepare_shutdown(self) -> None:
        """Before a clean stop: in a cluster, move this broker's leaderships away first."""
        await self.partitions.prepare_shutdown()


def _cleaner_settings(config: BrokerConfig) -> tuple:
    """What the log cleaner runs with: a change restarts it (Broker._run_cleaner)."""
    return config.cleaner_config(), config.cleaner_backoff_ms
