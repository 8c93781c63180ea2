"""Producer ids for InitProducerId: unique across the cluster and across restarts.

As Kafka 2.x's ``ProducerIdManager``: a broker claims a block of 1,000 ids at a time and hands
them out from memory; a block is durable before its first id is handed out, so no restart (and,
in a cluster, no other broker) ever hands out an id twice. Where the block is claimed:

- in a cluster, ZooKeeper's ``/latest_producer_id_block``, Kafka's node and JSON, claimed by a
  conditional write (a broker that loses the race reads the node again and claims the next);
- on a single broker, the same JSON in ``latest-producer-id-block`` in the first log dir,
  replaced atomically (Kafka keeps no such file — a KRaft cluster writes the block to its
  metadata log — but a broker without ZooKeeper needs a durable counter of its own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import trio

from minikafka.replication.zookeeper import BadVersion, ConnectionLost, NodeExists
from minikafka.storage.checkpoint import write_atomically

BLOCK_SIZE = 1000
ZNODE = "/latest_producer_id_block"
BLOCK_FILE = "latest-producer-id-block"
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class ProducerIdBlock:
    """The ids ``first``..``last`` (inclusive), claimed by ``broker``."""

    broker: int
    first: int
    last: int

    def encode(self) -> bytes:
        return json.dumps({"version": 1, "broker": self.broker, "block_start": str(self.first),
                           "block_end": str(self.last)}, separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes) -> "ProducerIdBlock":
        try:
            fields = json.loads(data)
            return ProducerIdBlock(int(fields["broker"]), int(fields["block_start"]), int(fields["block_end"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not a producer id block: {data[:200]!r}") from exc

    @staticmethod
    def first_for(broker: int) -> "ProducerIdBlock":
        return ProducerIdBlock(broker, 0, BLOCK_SIZE - 1)

    def following(self, broker: int) -> "ProducerIdBlock":
        if self.last > _INT64_MAX - BLOCK_SIZE:
            raise RuntimeError("every producer id has been handed out")
        return ProducerIdBlock(broker, self.last + 1, self.last + BLOCK_SIZE)


class ProducerIdManager:
    """Hands out ids of the block ``claim`` (an async callable) returns, claiming the next when
    one is used up."""

    def __init__(self, claim) -> None:
        self._claim = claim
        self._block: ProducerIdBlock | None = None
        self._next = 0
        self._lock = trio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._block is None or self._next > self._block.last:
                self._block = await self._claim()
                self._next = self._block.first
            self._next += 1
            return self._next - 1


def local_blocks(log_dir: Path, broker: int):
    """The claim of a single broker: the next block after the one its file names."""
    path = Path(log_dir) / BLOCK_FILE

    def claim_in_thread() -> ProducerIdBlock:
        try:
            block = ProducerIdBlock.decode(path.read_bytes()).following(broker)
        except FileNotFoundError:
            block = ProducerIdBlock.first_for(broker)
        write_atomically(path, block.encode())
        return block

    async def claim() -> ProducerIdBlock:
        return await trio.to_thread.run_sync(claim_in_thread)

    return claim


def zookeeper_blocks(zk, broker: int):
    """The claim of a cluster broker: the block after ``/latest_producer_id_block``'s, written
    there if the node has not changed since it was read."""

    async def claim() -> ProducerIdBlock:
        while True:
            found = await zk.get(ZNODE)
            block = ProducerIdBlock.first_for(broker) if found is None else \
                ProducerIdBlock.decode(found[0]).following(broker)
            try:
                if found is None:
                    await zk.create(ZNODE, block.encode())
                else:
                    await zk.set(ZNODE, block.encode(), version=found[1])
                return block
            except (BadVersion, NodeExists):
                continue  # another broker claimed one first
            except ConnectionLost:
                # The write may have been applied: it was if the node now holds this very block
                # (Kafka's checkProducerIdBlockZkData). The read raises if ZooKeeper is still away.
                now = await zk.get(ZNODE)
                if now is not None and ProducerIdBlock.decode(now[0]) == block:
                    return block

    return claim
