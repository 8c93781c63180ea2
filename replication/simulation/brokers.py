"""The simulator's brokers: a real ``Broker`` (storage, handlers) with a real ``ClusterMember``
(controller, replica manager, fetchers) on the in-memory ZooKeeper and network, started and
stopped the ways a broker process is: started (recovering its logs if it did not stop
cleanly), shut down cleanly after a controlled shutdown, crashed, or crashed with the power
going (the unflushed tail of each segment file is cut at a random point).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path

import trio

from minikafka.broker.config import BrokerConfig
from minikafka.broker.server import Broker
from minikafka.protocol.records import iter_entries
from minikafka.replication.cluster import ClusterMember
from minikafka.replication.fetcher import FetcherSettings
from minikafka.replication.simulation.network import serve_connection
from minikafka.replication.simulation.zk import SimZkClient

SESSION_TIMEOUT_MS = 4000
REPLICA_LAG_TIME_MAX_MS = 2000
PORT = 9092
OFFSETS_PARTITIONS = 3


class VirtualClock:
    """The storage ``Clock`` on trio's (virtual) time."""

    def __init__(self, epoch_ms: int) -> None:
        self.epoch_ms = epoch_ms

    def time_ms(self) -> int:
        return self.epoch_ms + int(trio.current_time() * 1000)


def node_name(node_id: int) -> str:
    return f"broker-{node_id}"


class SimBroker:
    def __init__(self, sim, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.name = node_name(node_id)
        self.log_dir = Path(sim.work_dir) / self.name
        self.broker: Broker | None = None
        self.zk: SimZkClient | None = None
        self.incarnation = 0
        self.alive = False  # serving (registered or about to)
        self.down_since: float | None = 0.0
        self._scope: trio.CancelScope | None = None
        self._stopped: trio.Event | None = None

    def properties(self) -> dict[str, str]:
        return {
            "broker.id": str(self.node_id), "zookeeper.connect": "sim-zookeeper:2181",
            "log.dirs": str(self.log_dir), "listeners": f"PLAINTEXT://{self.name}:{PORT}",
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "replica.lag.time.max.ms": str(REPLICA_LAG_TIME_MAX_MS),
            "min.insync.replicas": "2", "unclean.leader.election.enable": "false",
            "auto.create.topics.enable": "false", "controlled.shutdown.retry.backoff.ms": "500",
            "controlled.shutdown.max.retries": "3", "controller.socket.timeout.ms": "3000",
            "log.segment.bytes": "4096", "replica.fetch.wait.max.ms": "200",
            "replica.high.watermark.checkpoint.interval.ms": "1000",
            "log.flush.scheduler.interval.ms": "700", "log.flush.interval.ms": "1500",
            # Small enough that a run snapshots __consumer_offsets (leader and followers),
            # trims its segments and expires offsets: the group workload's commits of a
            # short retention lapse within seconds.
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "offsets.topic.segment.bytes": "4096",
            "offsets.snapshot.interval.events": "20", "offsets.retention.check.interval.ms": "1000",
            "offsets.commit.timeout.ms": "3000", "group.min.session.timeout.ms": "1000",
        }

    # ------------------------------------------------------------------ start

    async def start(self) -> None:
        self._stopped = trio.Event()
        await self.sim.nursery.start(self._run)

    async def _run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sim = self.sim
        self.incarnation += 1
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                broker = Broker(BrokerConfig(self.properties()), clock=sim.clock)
                self.broker = broker
                old = broker.cluster
                dialer = sim.net.dialer(self.name)
                fetcher = _fetcher_settings(old.settings.fetcher, dialer)
                self.zk = SimZkClient(sim.zk, self.name, session_timeout_ms=SESSION_TIMEOUT_MS)
                broker.cluster = ClusterMember(
                    node_id=self.node_id, settings=dataclasses.replace(old.settings, dialer=dialer, fetcher=fetcher),
                    log_manager=broker.log_manager, clock=broker.clock, on_readable=broker.append_waiters.notify,
                    on_role_change=old.replicas.on_role_change, zk_client=self.zk)
                broker.host, broker.port = self.name, PORT
                broker.advertised_host, broker.advertised_port = self.name, PORT
                broker.endpoints = {"PLAINTEXT": (self.name, PORT)}
                sim.net.hosts[self.name] = self.name
                await broker._join_cluster_zookeeper()
                broker._start_storage()
                try:
                    async with trio.open_nursery() as nursery:
                        broker._nursery = nursery
                        config = broker.config
                        await broker.start_cluster_coordinators(nursery)
                        nursery.start_soon(broker._every, config.flush_scheduler_interval_ms,
                                           broker.log_manager.flush_due, "flush")
                        nursery.start_soon(broker._every, config.checkpoint_interval_ms,
                                           broker.log_manager.checkpoint, "checkpoint")
                        sim.net.listeners[self.name] = lambda stream: nursery.start_soon(
                            serve_connection, broker, stream, self._observe)
                        await nursery.start(broker.cluster.run, broker.endpoints, {"PLAINTEXT": "PLAINTEXT"})
                        self.alive = True
                        self.down_since = None
                        sim.trace("broker", f"{self.name} up (incarnation {self.incarnation})")
                        task_status.started()
                        nursery.start_soon(sim.checker.watch_broker, self)
                finally:
                    sim.net.listeners.pop(self.name, None)
        finally:
            self.alive = False
            if self.down_since is None:
                self.down_since = trio.current_time()
            self._stopped.set()

    def _observe(self, request, body) -> None:
        self.sim.checker.answered(self, request, body)

    # ------------------------------------------------------------------ stop

    async def _cancel(self) -> None:
        self.alive = False
        self.down_since = trio.current_time()
        self.sim.net.listeners.pop(self.name, None)
        self.sim.net.break_node(self.name)
        self._scope.cancel()
        await self._stopped.wait()

    async def crash(self, *, lose_unflushed: bool) -> None:
        """kill -9 (the page cache survives), or with ``lose_unflushed`` a power loss."""
        broker = self.broker
        flushed = {(log.topic, log.partition): (log.dir, log.recovery_point) for log in broker.log_manager.logs()}
        self.zk.crash()
        await self._cancel()
        for log in broker.log_manager.logs():
            log.close()
        broker._release_dir_locks()
        if lose_unflushed:
            for directory, recovery_point in flushed.values():
                self._cut_unflushed(directory, recovery_point)

    def _cut_unflushed(self, directory: Path, recovery_point: int) -> None:
        """The page cache is gone: the log loses a suffix of what was written after its
        recovery point (its last fsync), cut at a random byte. Segments after the cut go whole,
        as files whose creation was never synced to the directory do: a later segment
        surviving a cut earlier one would leave a hole no recovery (Kafka's either) sees."""
        segments = sorted((int(name[:-4]), directory / name) for name in os.listdir(directory) if name.endswith(".log"))
        unflushed = []  # (path, first unflushed byte, size)
        for _, path in segments:
            data = path.read_bytes()
            start = next((e.position for e in iter_entries(data) if e.offset >= recovery_point), len(data))
            if start < len(data) or unflushed:
                unflushed.append((path, start, len(data)))
        total = sum(size - start for _, start, size in unflushed)
        if not total:
            return
        keep = self.sim.rng.randint(0, total)
        lost = total - keep
        first = segments[0][1]
        cut = False
        for path, start, size in unflushed:
            if not cut and keep < size - start:
                cut = True
                if start + keep > 0 or path == first:
                    os.truncate(path, start + keep)
                    continue
            if cut:
                for suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"):
                    path.with_suffix(suffix).unlink(missing_ok=True)
            else:
                keep -= size - start
        self.sim.trace("fault", f"{self.name}: {directory.name} loses {lost} unflushed bytes")

    async def controlled_stop(self) -> bool:
        try:
            done = await self.broker.cluster.controlled_shutdown()
            self.broker.partitions.resign_moved_groups()  # as Broker.prepare_shutdown
        except Exception as exc:  # a broker bug: reported, and the broker stops all the same
            self.sim.checker.violation(("shutdown-error", type(exc).__name__),
                                       f"{self.name}: controlled shutdown raised {type(exc).__name__}: {exc}")
            done = False
        self.sim.checker.shutdown_answered(self, done)
        # The process finishes the requests it has before it exits (in Kafka 0.10.2 too: the
        # request handlers drain their queue); by then it must know it leads nothing.
        await trio.sleep(self.sim.rng.uniform(0, 0.6))
        await self._cancel()
        self.broker._stop_storage()
        return done


def _fetcher_settings(settings: FetcherSettings, dialer) -> FetcherSettings:
    simulated = copy.copy(settings)
    simulated.dialer = dialer
    return simulated
