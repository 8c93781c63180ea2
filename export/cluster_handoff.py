"""The export hand-off of a broker in a replicated cluster (``serve --export-to`` with ``zookeeper.connect``).

As on one broker (``export.handoff``), closed segments go to the exporter in a separate process
and retention waits for them. What changes with replicas:

* Only the leader of a partition exports it; the other replicas hold the same records and
  would write the same files for nothing. Leadership can move at any time, so the hand-off
  also looks every ``poll_interval`` seconds, not only when a segment closes here: a broker
  that becomes leader finishes what the previous leader claimed.
* Progress is the cluster's, in ZooKeeper (``export.cluster_progress``): the leader claims
  chunks there before the exporter writes a file and records them after it is done, each with
  a conditional update, and the exporter process gets exactly the claimed chunks
  (``minikafka export --plan``), read from this broker's segment files.
* Retention on every replica (leader or follower) asks the shared progress, through a cache
  refreshed on every pass, whether a segment is exported. The cache only ever lags the real
  progress, so it can only hold a deletion back, never allow one early; and it is keyed by the
  local topic id, read before ZooKeeper is, so a topic deleted and created again never
  inherits the old one's progress.

All brokers export into one OUT (a shared filesystem, as for a Spark cluster); each stages its
files under ``OUT/_minikafka/staging/broker-<id>``, and no broker takes the single-broker lock.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from minikafka.export.cluster_progress import ClusterExportProgress, PartitionExport, plan_chunks
from minikafka.export.exporter import internal_topic
from minikafka.export.handoff import ExportHandoff
from minikafka.export.planning import SegmentSlice, segments_option
from minikafka.export.progress import META_DIR
from minikafka.replication.zookeeper import ZooKeeperError
from minikafka.storage.types import UnknownTopic

__all__ = ["ClusterExportHandoff", "ClusterView"]

logger = logging.getLogger("minikafka.export")


@dataclass(frozen=True)
class ClusterView:
    """What the hand-off needs of the broker's cluster membership: its ZooKeeper session, its
    log manager, and the logs of the partitions it leads now."""

    zk_client: object
    log_manager: object
    leader_logs: Callable[[], list]


@dataclass(frozen=True)
class _Job:
    """Claimed chunks of one partition led here, and this broker's segment ranges covering them."""

    topic: str
    partition: int
    topic_id: str | None
    state: PartitionExport  # with the chunks as ``pending``
    version: int
    slices: tuple[tuple[SegmentSlice, ...], ...]  # per chunk

    def plan_entry(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "generation": self.state.generation,
                "topic_id": self.topic_id,
                "chunks": [{"start": start, "end": end, "slices": json.loads(segments_option(slices))}
                           for (start, end), slices in zip(self.state.pending, self.slices)]}


class ClusterExportHandoff(ExportHandoff):
    """``ExportHandoff`` for a broker of a cluster; ``join_cluster`` before ``run``."""

    def __init__(self, out_dir: Path | str, log_dirs, *, node_id: int, poll_interval: float = 2.0,
                 **options) -> None:
        super().__init__(out_dir, log_dirs, **options)
        self.node_id = node_id
        self.poll_interval = poll_interval
        self.staging_root = self.out_dir / META_DIR / "staging" / f"broker-{node_id}"
        self._view: ClusterView | None = None
        self._progress: ClusterExportProgress | None = None
        self._vetoes: dict[tuple[str, int], tuple[str | None, int]] = {}  # -> (local topic id, next offset)

    def join_cluster(self, view: ClusterView) -> None:
        self._view = view
        self._progress = ClusterExportProgress(view.zk_client)

    def may_delete(self, segment_info) -> bool:
        """Retention veto on any replica: True once the cluster has recorded every record of
        the segment as exported (for this incarnation of the topic)."""
        if internal_topic(segment_info.topic):
            return True
        with self._lock:
            recorded = self._vetoes.get((segment_info.topic, segment_info.partition))
        return (recorded is not None and recorded[0] == segment_info.topic_id
                and segment_info.next_offset <= recorded[1])

    async def run(self) -> None:
        # A previous process's staged leftovers: this broker's own, never another broker's.
        await trio.to_thread.run_sync(lambda: shutil.rmtree(self.staging_root, ignore_errors=True))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._poll)
            await super().run()
            nursery.cancel_scope.cancel()

    async def _poll(self) -> None:
        while True:
            await trio.sleep(self.poll_interval)
            self._wake()

    # -- one pass ---------------------------------------------------------------------------

    async def _export(self, batch: list) -> bool:
        if self._view is None:
            return True
        try:
            await self.refresh_vetoes()
            jobs = [job for log in self._view.leader_logs() if not internal_topic(log.topic)
                    if (job := await self._claim(log)) is not None]
        except ZooKeeperError as exc:
            logger.warning("export: %s", exc)
            return False
        if not jobs:
            return True
        plan = {"staging": str(self.staging_root), "jobs": [job.plan_entry() for job in jobs]}
        plan_path = self.staging_root / f"plan-{uuid.uuid4().hex}.json"
        await trio.to_thread.run_sync(_write_plan, plan_path, plan)
        command = self.command() + ["--plan", str(plan_path)]
        logger.info("exporting %s", ", ".join(f"{job.topic}-{job.partition} {list(job.state.pending)}"
                                                for job in jobs))
        try:
            result = await self._run_exporter(command)
        finally:
            plan_path.unlink(missing_ok=True)
        if result.returncode != 0:
            return False
        try:
            for job in jobs:
                await self._record(job)
            await self.refresh_vetoes()
        except ZooKeeperError as exc:
            logger.warning("export: %s", exc)
            return False
        return True

    async def _claim(self, log) -> _Job | None:
        """The chunks of ``log``'s partition to export now: the ones claimed and not recorded,
        else new ones claimed here; None when there is nothing (or nothing yet) to do."""
        assert self._progress is not None
        topic, partition = log.topic, log.partition
        incarnation = await self._progress.incarnation(topic)
        if incarnation is None:
            return None  # deleted meanwhile
        state, version = await self._progress.read(topic, partition)
        fresh = state is None or state.incarnation != incarnation
        if fresh:
            generation = await self._progress.generation(topic, incarnation)
            state = PartitionExport(incarnation, generation, 0)
        try:
            segments = log.segments()
        except UnknownTopic:
            return None  # the replica was deleted meanwhile
        if fresh or not state.pending:
            chunks = plan_chunks(segments, None if fresh else state.next_offset, log.high_watermark)
            if not chunks:
                return None
            if not fresh and chunks[0][0] > state.next_offset:
                logger.warning("%s-%d: offsets %d to %d were deleted before they were exported", topic,
                               partition, state.next_offset, chunks[0][0])
            claimed = dataclasses.replace(state, pending=tuple(chunks))
            version = await self._progress.write(topic, partition, claimed, version)
            if version is None:
                return None  # another broker wrote first: the next pass reads what it wrote
            state = claimed
        slices = []
        for start, end in state.pending:
            covering = [s for s in segments if s.base_offset < end and s.next_offset > start]
            if not covering or covering[0].base_offset > start or covering[-1].next_offset < end:
                logger.info("%s-%d: offsets %d to %d are not all in this replica yet", topic, partition,
                            start, end)
                return None
            slices.append(tuple(SegmentSlice(topic, partition, str(s.log_path), s.base_offset,
                                             max(s.base_offset, start), min(s.next_offset, end), None, s.size)
                                for s in covering))
        return _Job(topic, partition, log.topic_id, state, version, tuple(slices))

    async def _record(self, job: _Job) -> None:
        assert self._progress is not None
        done = PartitionExport(job.state.incarnation, job.state.generation, job.state.pending[-1][1])
        if await self._progress.write(job.topic, job.partition, done, job.version) is None:
            # Someone moved the node on since our claim or read; it can only have recorded these
            # same chunks (nobody plans past unrecorded ones), whose files ours replaced with
            # identical ones.
            logger.info("%s-%d: export already recorded by another broker", job.topic, job.partition)

    async def refresh_vetoes(self) -> None:
        """Reload the shared progress of every local replica into the retention veto's cache."""
        assert self._view is not None and self._progress is not None
        # Local topic ids first, ZooKeeper second: an id read after a re-creation could pair
        # the new topic's segments with the old topic's progress.
        local = {(log.topic, log.partition): log.topic_id for log in self._view.log_manager.logs()
                 if not internal_topic(log.topic)}
        incarnations = {topic: await self._progress.incarnation(topic) for topic in {t for t, _ in local}}
        states = await self._progress.read_many(sorted(local))
        vetoes = {key: (local[key], state.next_offset) for key, state in states.items()
                  if state.incarnation == incarnations[key[0]]}
        with self._lock:
            self._vetoes = vetoes


def _write_plan(path: Path, plan: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan), encoding="utf-8")
