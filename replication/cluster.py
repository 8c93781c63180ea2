"""A broker's membership in a ZooKeeper-coordinated cluster (Kafka 0.10.2's KafkaServer side).

``ClusterMember.run`` connects to ZooKeeper, registers ``/brokers/ids/<id>`` once the listener
is open, runs for ``/controller`` (and the :class:`~replication.controller.Controller` while it
holds it), reports started once the controller's first UpdateMetadata has filled the metadata
cache (the broker's ready line waits for it), keeps the replica fetchers and the ISR-shrink and
high-watermark-checkpoint duties going, and survives session expiry by registering again. It owns the broker's
:class:`~replication.metadata_cache.MetadataCache` and
:class:`~replication.replica_manager.ReplicaManager`, which the handlers use.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Mapping

import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.channel import (
    PLAINTEXT,
    BrokerChannel,
    ChannelError,
    ChannelSecurity,
    Dialer,
    dial_address,
)
from minikafka.replication.controller import Controller, ControllerError, ControllerSettings
from minikafka.replication.fetcher import FetcherManager, FetcherSettings
from minikafka.replication.metadata_cache import BrokerEndpoint, MetadataCache, PartitionInfo
from minikafka.replication.replica_manager import ReplicaManager
from minikafka.replication.kafka_zk import BROKER_IDS_PATH, PREFERRED_REPLICA_ELECTION_PATH, BrokerInfo, KafkaZk
from minikafka.replication.zookeeper import ZkClient, ZooKeeperError
from minikafka.storage.clock import Clock
from minikafka.storage.log_manager import LogManager

logger = logging.getLogger(__name__)

CONTROLLER_PATH = "/controller"
WATCHED = {"/brokers/ids": "brokers", "/brokers/topics": "topics",
           "/admin/delete_topics": "deletions", "/isr_change_notification": "isr_changes"}
# Watched for data (creation): kafka-preferred-replica-election.sh's request, or the test
# fixture's move_leader.
WATCHED_DATA = {PREFERRED_REPLICA_ELECTION_PATH: "preferred_elections"}


@dataclass(frozen=True)
class ClusterSettings:
    zookeeper_connect: str
    session_timeout_ms: int
    connection_timeout_ms: int
    replica_lag_time_max_ms: int
    unclean_leader_election: bool
    fetcher: FetcherSettings
    controller_socket_timeout_ms: int
    hw_checkpoint_interval_ms: int
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    # minikafka.test.broker.dial: the test fixture's per-link proxies; empty in production.
    dial: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    # The listener brokers reach each other on (inter.broker.listener.name).
    inter_broker_listener: str = "PLAINTEXT"
    # How that listener is secured (TLS, SASL) from the connecting broker's side.
    security: ChannelSecurity = PLAINTEXT
    # Replaces TCP to the other brokers (the simulator's network); None in production.
    dialer: Dialer | None = None


class ClusterMember:
    def __init__(self, *, node_id: int, settings: ClusterSettings, log_manager: LogManager, clock: Clock,
                 on_readable, on_role_change=None, zk_client: ZkClient | None = None) -> None:
        self.node_id = node_id
        self.settings = settings
        self.log_manager = log_manager
        # zk_client: the simulator's in-memory ZooKeeper session; None: kazoo's, to zookeeper_connect.
        self.zk_client = zk_client or ZkClient(settings.zookeeper_connect, session_timeout_ms=settings.session_timeout_ms,
                                               connection_timeout_ms=settings.connection_timeout_ms)
        self.zk = KafkaZk(self.zk_client)
        self.metadata = MetadataCache()
        # Set by the first UpdateMetadata that lists this broker: until then the cache holds no
        # brokers and no controller, a view that clients must not be given (see cluster_view).
        self.metadata_ready = trio.Event()
        self.replicas = ReplicaManager(
            node_id=node_id, log_manager=log_manager, clock=clock, zk=self.zk, metadata=self.metadata,
            replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
            on_readable=on_readable, on_role_change=on_role_change)
        self.controller: Controller | None = None
        self.cluster_id: str | None = None
        self._endpoint: tuple[str, int] | None = None
        self._controller_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        # Paths watched for others (the ACL change notifications): path -> on_children.
        self._children_handlers: dict[str, Callable[[list[str]], Awaitable[None]]] = {}

    async def watch_children(self, path: str, on_children: Callable[[list[str]], Awaitable[None]]) -> None:
        """Call ``on_children(children)`` with ``path``'s children now and after each change,
        from this member's event task (so calls never overlap). Needs ``connect`` first."""
        self._children_handlers[path] = on_children
        await self.zk_client.watch_children(path)

    # ------------------------------------------------------------------ start-up

    async def connect(self, proposed_cluster_id: str) -> str:
        """Connect to ZooKeeper and agree on the cluster id (before the listener opens)."""
        await self.zk_client.start()
        await self.zk.ensure_paths()
        self.cluster_id = await self.zk.get_or_create_cluster_id(proposed_cluster_id)
        await self._drop_deleted_topics()
        return self.cluster_id

    async def _drop_deleted_topics(self) -> None:
        """Local replicas of topics deleted while this broker was away are removed (the
        controller's StopReplica could not reach it then)."""
        known = set(await self.zk.topics())
        for log in self.log_manager.logs():
            if log.topic not in known:
                logger.info("removing %s-%d: the topic no longer exists in the cluster", log.topic, log.partition)
                await trio.to_thread.run_sync(self.log_manager.delete_log, log.topic, log.partition)

    async def run(self, endpoints: dict[str, tuple[str, int]], protocols: dict[str, str], *,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Register with the advertised ``endpoints`` (listener name -> (host, port)) and their
        security ``protocols``, and take part until cancelled."""
        self._endpoint = (dict(endpoints), dict(protocols))
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.replicas.fetchers = FetcherManager(self.node_id, self.replicas, self.settings.fetcher, nursery)
                for path in WATCHED:
                    await self.zk_client.watch_children(path)
                await self.zk_client.watch_data(CONTROLLER_PATH)
                for path in WATCHED_DATA:
                    await self.zk_client.watch_data(path)
                await self._register()
                nursery.start_soon(self._dispatch_events)
                nursery.start_soon(self._every, self.settings.replica_lag_time_max_ms / 2000, self.replicas.shrink_isrs)
                nursery.start_soon(self._every, self.settings.hw_checkpoint_interval_ms / 1000,
                                   self._checkpoint_high_watermarks)
                await self._elect()
                await self._wait_for_metadata()
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                if self.replicas.fetchers is not None:
                    await self.replicas.fetchers.aclose()
                await self.zk_client.close()

    async def _register(self) -> None:
        endpoints, protocols = self._endpoint
        # Kafka's top-level host/port: the PLAINTEXT listener old clients use, or null/-1.
        host, port = next((endpoints[name] for name in endpoints if protocols[name] == "PLAINTEXT"), ("", -1))
        info = BrokerInfo(id=self.node_id, host=host, port=port, endpoints=endpoints, rack=None,
                          protocols=protocols)
        await self.zk.register_broker(info, wait_ms=self.settings.session_timeout_ms * 2)
        logger.info("registered as broker %d at %s", self.node_id,
                    ",".join(f"{name}://{h}:{p}" for name, (h, p) in endpoints.items()))

    async def update_endpoints(self, endpoints: dict[str, tuple[str, int]]) -> None:
        """Advertise ``endpoints`` from now on (a dynamic advertised.listeners): once registered,
        /brokers/ids/<id> is rewritten in place, on the same session (Kafka's updateBrokerInfo),
        and the controller, watching it, tells every broker."""
        if self._endpoint is None or self._endpoint[0] == endpoints:
            return  # not registered yet: run registers these
        self._endpoint = (dict(endpoints), self._endpoint[1])
        await self._register()

    async def _wait_for_metadata(self) -> None:
        """Until the controller's first UpdateMetadata, which it sends as soon as it sees this
        broker register (Kafka's onBrokerStartup): the broker is ready for clients only then."""
        with trio.move_on_after(self.settings.session_timeout_ms / 1000):
            await self.metadata_ready.wait()
            return
        logger.warning("no metadata from a controller %.1f s after registering; still waiting",
                       self.settings.session_timeout_ms / 1000)
        await self.metadata_ready.wait()

    def update_metadata(self, controller_id: int, controller_epoch: int, brokers: list[BrokerEndpoint],
                        partitions: dict[tuple[str, int], PartitionInfo | None]) -> None:
        """Apply the controller's UpdateMetadata (MetadataCache.update)."""
        self.metadata.update(controller_id, controller_epoch, brokers, partitions)
        if self.node_id in self.metadata.brokers:
            self.metadata_ready.set()

    async def cluster_view(self) -> bool:
        """Wait until the metadata cache holds the controller's view (at once, but for the
        moment between listening and the first UpdateMetadata; up to the time the controller
        has to reach a broker, controller.socket.timeout.ms); False if it still does not.

        Kafka 0.10.2 answers Metadata from an empty cache in that moment: no brokers, no
        controller, and librdkafka then waits for its next refresh (30 s) before it can send
        CreateTopics anywhere. KRaft brokers serve no request before they have caught up with
        the metadata log; this holds only the requests that read the cache."""
        if not self.metadata_ready.is_set():
            with trio.move_on_after(self.settings.controller_socket_timeout_ms / 1000):
                await self.metadata_ready.wait()
        return self.metadata_ready.is_set()

    async def _every(self, seconds: float, duty) -> None:
        while True:
            await trio.sleep(seconds)
            try:
                await duty()
            except ZooKeeperError as exc:
                logger.warning("%s: %s", getattr(duty, "__name__", duty), exc)
            except Exception:  # a failing duty (a disk error) is retried next time
                logger.exception("%s failed", getattr(duty, "__name__", duty))

    async def _checkpoint_high_watermarks(self) -> None:
        await trio.to_thread.run_sync(self.log_manager.checkpoint_high_watermarks)

    # ------------------------------------------------------------------ controller election

    async def _elect(self) -> None:
        if self.controller is not None:
            return
        try:
            won = await self.zk.try_elect_controller(self.node_id)
        except ZooKeeperError as exc:
            logger.warning("controller election failed: %s", exc)
            return
        # Re-checked after the await: two elections of this broker can run at once (start-up
        # and a session or /controller event), and the second finds /controller held by this
        # very session, which try_elect_controller counts as won. Starting a second Controller
        # left the first one running with the older controller epoch, its requests refused as
        # STALE_CONTROLLER_EPOCH, partitions created meanwhile never followed.
        if won and self.controller is None:
            await self._start_controller()

    async def _start_controller(self) -> None:
        controller = Controller(self.node_id, self.zk, ControllerSettings(
            unclean_leader_election=self.settings.unclean_leader_election,
            socket_timeout_ms=self.settings.controller_socket_timeout_ms, dial=self.settings.dial,
            inter_broker_listener=self.settings.inter_broker_listener,
            security=self.settings.security, dialer=self.settings.dialer))
        self.controller = controller
        assert self._nursery is not None

        async def run_controller(task_status=trio.TASK_STATUS_IGNORED) -> None:
            failed = False
            with trio.CancelScope() as scope:
                self._controller_scope = scope
                try:
                    await controller.run(task_status=task_status)
                except ZooKeeperError as exc:
                    logger.warning("controller stopped: %s", exc)
                    failed = True
            if self.controller is controller:
                self.controller = None
            if failed:
                # Give /controller up, so that an election (ours again, maybe) follows at once
                # instead of the cluster waiting for this broker's session to end.
                with trio.move_on_after(self.settings.session_timeout_ms / 1000):
                    try:
                        if await self.zk.controller_id() == self.node_id:
                            await self.zk_client.delete(CONTROLLER_PATH)
                    except ZooKeeperError as exc:
                        logger.warning("cannot give up /controller: %s", exc)

        self._nursery.start_soon(run_controller)

    def _resign(self) -> None:
        if self.controller is not None:
            logger.info("broker %d is no longer the controller", self.node_id)
            self.controller = None
            if self._controller_scope is not None:
                self._controller_scope.cancel()

    # ------------------------------------------------------------------ ZooKeeper events

    async def _dispatch_events(self) -> None:
        async for event in self.zk_client.events:
            try:
                await self._on_event(event)
            except ZooKeeperError as exc:
                logger.warning("handling %s %s: %s", event.kind, event.path, exc)

    async def _on_event(self, event) -> None:
        if event.kind == "session":
            if event.state == "expired":
                logger.warning("ZooKeeper session expired: registering again")
                self._resign()
            elif event.state == "connected" and self._endpoint is not None:
                if await self.zk_client.get(f"/brokers/ids/{self.node_id}") is None:
                    await self._register()
                await self._elect()
            return
        if event.path == CONTROLLER_PATH:
            # Events can be stale by the time they are handled: act on /controller as it is now.
            current = await self.zk.controller_id()
            if current is None:
                self._resign()
                await self._elect()
            elif current != self.node_id:
                self._resign()
            return
        handler = self._children_handlers.get(event.path)
        if handler is not None and event.kind == "children":
            await handler(event.children)
            return
        kind = WATCHED.get(event.path) or WATCHED_DATA.get(event.path)
        if kind is not None and self.controller is not None:
            self.controller.notify(kind)
        elif event.kind == "data" and event.path.startswith(BROKER_IDS_PATH + "/") and self.controller is not None:
            self.controller.notify("broker_modified")

    # ------------------------------------------------------------------ requests

    async def controller_request(self, kind: str, timeout_s: float, **args):
        """Run a controller event on this broker (it must be the controller) and return its
        result; ControllerError(NOT_CONTROLLER) otherwise."""
        controller = self.controller
        if controller is None or not controller.active:
            raise ControllerError(ErrorCode.NOT_CONTROLLER, f"broker {self.node_id} is not the controller")
        send, receive = trio.open_memory_channel(1)
        controller.notify(kind, send, **args)
        with trio.move_on_after(timeout_s):
            result = await receive.receive()
            if isinstance(result, ControllerError):
                raise result
            return result
        raise ControllerError(ErrorCode.REQUEST_TIMED_OUT, f"controller did not handle {kind} in time")

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away (Kafka's controlled
        shutdown); True once nothing is left, False after the retries."""
        if not self.settings.controlled_shutdown_enable:
            return False
        for attempt in range(self.settings.controlled_shutdown_max_retries + 1):
            if attempt:
                await trio.sleep(self.settings.controlled_shutdown_retry_backoff_ms / 1000)
            controller_id = self.metadata.controller_id
            endpoint = self.metadata.brokers.get(controller_id)
            if endpoint is not None:
                host, port = endpoint.host, endpoint.port
            else:
                found = await self._zk_controller_endpoint()
                if found is None:
                    continue
                host, port = found.address(self.settings.inter_broker_listener)
                controller_id = found.id
            host, port = dial_address(controller_id, host, port, self.settings.dial)
            channel = BrokerChannel(host, port, client_id=f"broker-{self.node_id}",
                                    timeout_s=self.settings.controller_socket_timeout_ms / 1000,
                                    security=self.settings.security, dialer=self.settings.dialer)
            try:
                response = await channel.request(ApiKey.CONTROLLED_SHUTDOWN, 1, {"broker_id": self.node_id})
            except ChannelError as exc:
                logger.warning("controlled shutdown: %s", exc)
                continue
            finally:
                await channel.aclose()
            if response.error_code:
                logger.warning("controlled shutdown refused: %s", ErrorCode(response.error_code).name)
                continue
            remaining = list(response.remaining_partitions)
            if not remaining:
                logger.info("controlled shutdown complete: no partition is led here")
                return True
            logger.info("controlled shutdown: %d partition(s) still led here", len(remaining))
        return False

    async def _zk_controller_endpoint(self) -> BrokerInfo | None:
        """The controller's registration, read from ZooKeeper (when the metadata cache does not
        know it): its ``id`` and the ``address`` of each listener."""
        try:
            controller_id = await self.zk.controller_id()
            if controller_id is None:
                return None
            return (await self.zk.live_brokers()).get(controller_id)
        except ZooKeeperError:
            return None

