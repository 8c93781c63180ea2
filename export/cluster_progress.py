"""Export progress shared by a broker cluster, in ZooKeeper (used only in cluster mode).

Every replica of a partition holds the same committed records, but not the same segment
files: a follower rolls where its own appends make it roll. So in a cluster the unit of export
is not a segment but a *chunk*, an offset range ``[start, end)`` of committed records that the
partition's leader plans from its own closed segments and records here *before* any file of it
is written. Whoever exports a chunk (the leader that planned it, or the next leader after a
crash or a leadership move) reads exactly that range from its own segment files, in one Spark
task, so the chunk's output files (``<generation>_<partition>_<first offset>`` per date) have
the same names and rows on every broker.

Layout, under the cluster's ZooKeeper chroot (beside Kafka's own paths)::

    /minikafka/export/topics/<topic>                   {"version": 1, "incarnations": {"<id>": <generation>}}
    /minikafka/export/topics/<topic>/partitions/<p>    {"version": 1, "incarnation": "<id>", "generation": G,
                                                        "next_offset": N, "pending": [[start, end], ...]}

An incarnation id is the creation zxid of the topic's ``/brokers/topics/<topic>`` node: a topic
deleted and created again gets a new node, so a new id, the next generation and progress of
its own (the replicas' local topic ids differ from broker to broker, so they cannot serve).
``next_offset`` is the next offset to export (all below it are exported and recorded);
``pending`` are chunks claimed and maybe partly written, not yet recorded.

The protocol (every write is a conditional update on the version the writer read):

1. The leader reads the partition's node. If it has ``pending`` chunks, it exports those again,
   exactly as recorded. Otherwise it plans chunks from its closed segments that lie wholly
   below its high watermark (records above it may still be truncated away) and claims them by
   writing ``pending``; losing that race means another broker wrote first, and the next pass
   reads what it wrote.
2. It exports the chunks (files are renamed into place once complete).
3. It records them: ``next_offset`` = end of the last chunk, ``pending`` = [], conditional on
   the version it claimed or read. If the version moved, someone else recorded (the same
   chunks: nobody plans past unrecorded ones), and there is nothing to do.

So a leader change or a crash at any point leaves either nothing claimed (the next leader plans
from ``next_offset``) or claimed chunks that the next leader rewrites under the same names with
the same rows: no offset is skipped, none lands in two files. Retention on every replica asks
this node, through the hand-off's cache, before it deletes a segment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from minikafka.replication.kafka_zk import topic_path
from minikafka.replication.zookeeper import BadVersion, NodeExists, ZkClient, ZooKeeperError

__all__ = ["EXPORT_ROOT", "ClusterExportProgress", "PartitionExport", "plan_chunks"]

EXPORT_ROOT = "/minikafka/export/topics"
_FORMAT_VERSION = 1
FIRST_GENERATION = 1  # as export.progress: the first incarnation of a name writes 1_...


@dataclass(frozen=True)
class PartitionExport:
    """One partition's shared export state (see the module docstring)."""

    incarnation: str
    generation: int
    next_offset: int
    pending: tuple[tuple[int, int], ...] = field(default=())

    def encode(self) -> bytes:
        return json.dumps({"version": _FORMAT_VERSION, "incarnation": self.incarnation,
                           "generation": self.generation, "next_offset": self.next_offset,
                           "pending": [list(chunk) for chunk in self.pending]}).encode()

    @classmethod
    def decode(cls, data: bytes, path: str) -> "PartitionExport":
        try:
            obj = json.loads(data.decode("utf-8"))
            return cls(str(obj["incarnation"]), int(obj["generation"]), int(obj["next_offset"]),
                       tuple((int(start), int(end)) for start, end in obj["pending"]))
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise ZooKeeperError(f"{path} holds {data[:80]!r}, not minikafka export progress") from exc


def plan_chunks(segments, next_offset: int | None, high_watermark: int,
                max_chunks: int = 64) -> list[tuple[int, int]]:
    """The chunks a leader claims: from ``next_offset`` (None: the start of the log), one per
    closed segment lying wholly below ``high_watermark``, in offset order. The first one starts
    mid-segment when an earlier leader's segments ended elsewhere. A chunk starting above
    ``next_offset`` means records were deleted before their export (the caller warns)."""
    chunks: list[tuple[int, int]] = []
    position = next_offset
    for info in segments:
        if not info.closed or info.next_offset > high_watermark or len(chunks) >= max_chunks:
            break
        start = info.base_offset if position is None else max(info.base_offset, position)
        if start < info.next_offset:
            chunks.append((start, info.next_offset))
            position = info.next_offset
    return chunks


class ClusterExportProgress:
    """Reads and conditional writes of the export nodes, on the broker's ZooKeeper session."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk

    @staticmethod
    def topic_node(topic: str) -> str:
        return f"{EXPORT_ROOT}/{topic}"

    @classmethod
    def partition_node(cls, topic: str, partition: int) -> str:
        return f"{cls.topic_node(topic)}/partitions/{partition}"

    async def incarnation(self, topic: str) -> str | None:
        """The id of the topic as it exists now in the cluster; None if it does not."""
        found = await self.zk.get_stat(topic_path(topic))
        return None if found is None else str(found[1].czxid)

    async def generation(self, topic: str, incarnation: str) -> int:
        """The file generation of this incarnation of ``topic``, given one on first use (one
        more than the topic's highest so far), agreed on by conditional writes."""
        path = self.topic_node(topic)
        while True:
            found = await self.zk.get_json(path)
            known = {} if found is None else {str(k): int(v) for k, v in found[0].get("incarnations", {}).items()}
            if incarnation in known:
                return known[incarnation]
            generation = max(known.values(), default=FIRST_GENERATION - 1) + 1
            known[incarnation] = generation
            data = json.dumps({"version": _FORMAT_VERSION, "incarnations": known}).encode()
            try:
                if found is None:
                    await self.zk.create(path, data)
                else:
                    await self.zk.set(path, data, found[1])
                return generation
            except (BadVersion, NodeExists):
                continue  # another broker gave out a generation meanwhile: read it again

    async def read(self, topic: str, partition: int) -> tuple[PartitionExport | None, int | None]:
        """The partition's state and its znode version; (None, None) if none is recorded."""
        path = self.partition_node(topic, partition)
        found = await self.zk.get(path)
        if found is None:
            return None, None
        return PartitionExport.decode(found[0], path), found[1]

    async def read_many(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], PartitionExport]:
        """The recorded state of many partitions in one round trip's time (missing ones left out)."""
        paths = [self.partition_node(topic, partition) for topic, partition in keys]
        found = await self.zk.get_many(paths)
        return {key: PartitionExport.decode(entry[0], path)
                for key, path, entry in zip(keys, paths, found) if entry is not None}

    async def write(self, topic: str, partition: int, state: PartitionExport, version: int | None) -> int | None:
        """Write ``state`` if the node is still at ``version`` (None: if it does not exist yet);
        the new version, or None if another broker wrote first."""
        path = self.partition_node(topic, partition)
        try:
            if version is None:
                await self.zk.create(path, state.encode())
                return 0
            return await self.zk.set(path, state.encode(), version)
        except (BadVersion, NodeExists):
            return None
