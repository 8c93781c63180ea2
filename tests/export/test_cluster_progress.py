"""The cluster's shared export progress without brokers: chunk planning, the ZooKeeper nodes
and their conditional updates (real ZooKeeper), two hand-offs claiming and re-running the same
chunks from replicas whose segments end at different offsets (real logs on disk), the retention
veto from shared progress, and chunks exported by Spark under the same names whatever segment
files they were read from."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import trio

from minikafka.export.cluster_handoff import ClusterExportHandoff, ClusterView
from minikafka.export.cluster_progress import ClusterExportProgress, PartitionExport, plan_chunks
from minikafka.export.exporter import export_chunks
from minikafka.export.planning import SegmentSlice, chunks_option, parse_options
from minikafka.protocol.records import build_message_set
from minikafka.replication.kafka_zk import topic_path
from minikafka.replication.zookeeper import ZkClient, ZooKeeperError
from minikafka.storage import SegmentInfo
from minikafka.storage.clock import SystemClock
from minikafka.storage.config import LogConfig
from minikafka.storage.log_manager import LogManager

from .conftest import plain_segment, write_segments


def segment(base: int, next_offset: int, closed: bool = True) -> SegmentInfo:
    return SegmentInfo("t", 0, base, next_offset, Path(f"/x/{base:020d}.log"), 10, 0, closed, "id")


def test_plan_chunks_from_progress_below_the_high_watermark():
    segments = [segment(0, 5), segment(5, 9), segment(9, 14), segment(14, 15, closed=False)]
    assert plan_chunks(segments, None, 14) == [(0, 5), (5, 9), (9, 14)]
    assert plan_chunks(segments, 0, 13) == [(0, 5), (5, 9)]  # 9..13 is not all committed yet
    assert plan_chunks(segments, 7, 20) == [(7, 9), (9, 14)]  # another leader's segments ended at 7
    assert plan_chunks(segments, 14, 20) == []  # the active segment is never planned
    assert plan_chunks(segments, 0, 20, max_chunks=2) == [(0, 5), (5, 9)]
    assert plan_chunks(segments[1:], 2, 20) == [(5, 9), (9, 14)]  # 2..5 gone: the caller warns


def test_chunks_option_round_trip_and_refusal(tmp_path):
    groups = [[SegmentSlice("t", 0, "/x/0.log", 0, 2, 5, None, 10), SegmentSlice("t", 0, "/x/5.log", 5, 5, 9, None, 8)],
              [SegmentSlice("t", 0, "/x/9.log", 9, 9, 14, None, 9)]]
    parsed = parse_options({"path": str(tmp_path), "chunks": chunks_option(groups)})
    assert parsed.chunks == tuple(tuple(group) for group in groups)
    with pytest.raises(ValueError, match="option chunks must be what export.planning.chunks_option writes"):
        parse_options({"path": str(tmp_path), "chunks": "[[1, 2]]"})


async def test_generations_and_conditional_writes(zk_chroot):
    async with ZkClient(zk_chroot) as zk:
        progress = ClusterExportProgress(zk)
        await zk.create(topic_path("t"), b"{}")
        first = await progress.incarnation("t")
        assert await progress.incarnation("missing") is None
        async with trio.open_nursery() as nursery:  # two brokers meeting the topic at once agree
            results = []

            async def ask():
                results.append(await progress.generation("t", first))
            for _ in range(3):
                nursery.start_soon(ask)
        assert results == [1, 1, 1]
        await zk.delete(topic_path("t"))
        await zk.create(topic_path("t"), b"{}")  # deleted and created again: another incarnation
        second = await progress.incarnation("t")
        assert second != first and await progress.generation("t", second) == 2
        assert await progress.generation("t", first) == 1

        claimed = PartitionExport(second, 2, 0, ((0, 5), (5, 9)))
        assert await progress.read("t", 0) == (None, None)
        version = await progress.write("t", 0, claimed, None)
        assert version == 0
        assert await progress.write("t", 0, claimed, None) is None  # created by someone else first
        assert await progress.read("t", 0) == (claimed, 0)
        done = PartitionExport(second, 2, 9)
        assert await progress.write("t", 0, done, version) == 1
        assert await progress.write("t", 0, replace(done, next_offset=5), version) is None  # stale
        assert await progress.read_many([("t", 0), ("t", 1)]) == {("t", 0): done}
        await zk.create(progress.partition_node("t", 1), b"not json")
        with pytest.raises(ZooKeeperError, match="not minikafka export progress"):
            await progress.read("t", 1)


def replica(tmp_path: Path, name: str, sets_per_append: list[int]) -> LogManager:
    """A broker's log manager holding t-0 with 12 records (offsets 0..11), appended in groups of
    ``sets_per_append`` records, each group one set (so each replica rolls at other offsets)."""
    manager = LogManager([tmp_path / name], LogConfig(message_format_version="0.10.2"), SystemClock())
    manager.startup()
    log = manager.create_log("t", 0, {"segment.bytes": "200"})
    offset = 0
    for count in sets_per_append:
        log.append_as_leader(build_message_set(
            [(b"k%d" % o, b"v%d" % o, 1_700_000_000_000 + o) for o in range(offset, offset + count)]))
        offset += count
    log.high_watermark = log.log_end_offset
    return manager


async def test_a_new_leader_reruns_the_claimed_chunks_from_its_own_segments(tmp_path, zk_chroot):
    """Broker A claims chunks from its segments; broker B, whose segments end at other offsets,
    gets exactly A's chunks to export again, each as the ranges of its own files that hold it;
    once recorded, B plans from where A's chunks ended, not from its own segment bounds."""
    a = replica(tmp_path, "a", [1] * 12)
    b = replica(tmp_path, "b", [3, 3, 3, 3])
    async with ZkClient(zk_chroot) as zk:
        await zk.create(topic_path("t"), b"{}")
        handoffs = []
        for node_id, manager in ((1, a), (2, b)):
            handoff = ClusterExportHandoff(tmp_path / "out", manager.log_dirs, node_id=node_id)
            log = manager.get_log("t", 0)
            handoff.join_cluster(ClusterView(zk, manager, lambda log=log: [log]))
            handoffs.append((handoff, log))
        (handoff_a, log_a), (handoff_b, log_b) = handoffs
        job = await handoff_a._claim(log_a)
        assert job is not None and job.state.generation == 1
        chunks = job.state.pending
        assert chunks == ((0, 5), (5, 10))  # A's closed segments; 10..11 is its active one
        rerun = await handoff_b._claim(log_b)
        assert rerun.state.pending == chunks
        for (start, end), slices in zip(rerun.state.pending, rerun.slices):
            assert slices[0].start_offset == start and slices[-1].end_offset == end
            assert all(x.end_offset == y.start_offset for x, y in zip(slices, slices[1:]))
            assert all(Path(s.log_path).parent == log_b.dir for s in slices)
        # B's segments are 0-3, 3-6, 6-9, 9-12 (the last one active).
        assert [[(s.base_offset, s.start_offset, s.end_offset) for s in slices] for slices in rerun.slices] == [
            [(0, 0, 3), (3, 3, 5)], [(3, 5, 6), (6, 6, 9), (9, 9, 10)]]
        await handoff_b._record(rerun)
        await handoff_a._record(job)  # late: B recorded first, nothing changes
        state, _ = await ClusterExportProgress(zk).read("t", 0)
        assert state.next_offset == chunks[-1][1] and state.pending == ()
        # Retention on either replica: segments below the recorded offset may go, no others.
        for handoff, log in handoffs:
            await handoff.refresh_vetoes()
            for info in log.closed_segments():
                assert handoff.may_delete(info) == (info.next_offset <= state.next_offset)
            assert not handoff.may_delete(log.closed_segments()[0]._replace(topic_id="another"))
        # The topic deleted and created again: the old progress lifts no veto any more.
        await zk.delete(topic_path("t"))
        await zk.create(topic_path("t"), b"{}")
        await handoff_a.refresh_vetoes()
        assert not handoff_a.may_delete(log_a.closed_segments()[0])


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_chunk_gets_the_same_files_from_any_segment_layout(spark, tmp_path):
    """Offsets 2..9 read from one segment, or from two segments split at 5, give one file per
    date with the same name and rows."""
    plans = {}
    for layout, segments in {"one": [plain_segment(0, 10), plain_segment(10, 1)],
                             "two": [plain_segment(0, 5), plain_segment(5, 5), plain_segment(10, 1)]}.items():
        log_dir = tmp_path / layout / "log"
        paths = write_segments(log_dir, "t", 0, segments)
        slices = [["t", 0, str(path), base, max(base, 2), min(base + n, 10), None, path.stat().st_size]
                  for path, (base, n) in zip(paths, [(0, 10)] if layout == "one" else [(0, 5), (5, 5)])]
        plans[layout] = {"staging": str(tmp_path / layout / "staging"), "jobs": [
            {"topic": "t", "partition": 0, "generation": 1, "topic_id": None,
             "chunks": [{"start": 2, "end": 10, "slices": slices}]}]}
        summary = export_chunks(lambda: spark, [log_dir], tmp_path / layout / "out", plans[layout])
        assert summary.files == 1 and summary.records == 8 and not summary.incomplete_partitions
    files = {layout: sorted(p.relative_to(tmp_path / layout / "out")
                            for p in (tmp_path / layout / "out").glob("t/dt=*/*.parquet")) for layout in plans}
    assert files["one"] == files["two"] and files["one"][0].name == "1_0_00000000000000000002.parquet"
    tables = [pq.read_table(tmp_path / layout / "out" / files[layout][0]).to_pylist() for layout in plans]
    assert tables[0] == tables[1] and [r["offset"] for r in tables[0]] == list(range(2, 10))
