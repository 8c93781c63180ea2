"""Producer ids (broker/producer_ids.py) are never handed out twice: not after a restart of a
single broker (its block file), not by two brokers of a cluster (ZooKeeper's node, the real
server), and the node holds Kafka's JSON."""

from __future__ import annotations

import json

import trio

from minikafka.broker.producer_ids import (
    BLOCK_FILE,
    BLOCK_SIZE,
    ZNODE,
    ProducerIdBlock,
    ProducerIdManager,
    local_blocks,
    zookeeper_blocks,
)
from minikafka.replication.zookeeper import ZkClient


async def take(manager: ProducerIdManager, count: int) -> list[int]:
    return [await manager.next_id() for _ in range(count)]


async def test_a_restarted_single_broker_continues_after_its_last_block(tmp_path):
    first = await take(ProducerIdManager(local_blocks(tmp_path, 0)), 3)
    assert first == [0, 1, 2]
    assert ProducerIdBlock.decode((tmp_path / BLOCK_FILE).read_bytes()) == ProducerIdBlock(0, 0, BLOCK_SIZE - 1)
    # A restart (a new manager on the same log dir) never reuses the ids of the claimed block.
    second = await take(ProducerIdManager(local_blocks(tmp_path, 0)), BLOCK_SIZE + 1)
    assert second[0] == BLOCK_SIZE and second == list(range(BLOCK_SIZE, 2 * BLOCK_SIZE + 1))
    assert ProducerIdBlock.decode((tmp_path / BLOCK_FILE).read_bytes()).last == 3 * BLOCK_SIZE - 1


async def test_brokers_of_a_cluster_claim_disjoint_blocks(zk_chroot):
    async with ZkClient(zk_chroot) as zk1, ZkClient(zk_chroot) as zk2, ZkClient(zk_chroot) as zk3:
        assert await ProducerIdManager(zookeeper_blocks(zk1, 1)).next_id() == 0  # the node exists now
        # Three brokers claim at once, each reading the same node version: one write wins each
        # round, the others read again and claim the next block.
        managers = [ProducerIdManager(zookeeper_blocks(zk, broker)) for broker, zk in ((1, zk1), (2, zk2), (3, zk3))]
        firsts: dict[int, int] = {}  # manager index -> its first id

        async def first_id(index: int) -> None:
            firsts[index] = await managers[index].next_id()

        async with trio.open_nursery() as nursery:
            for index in range(len(managers)):
                nursery.start_soon(first_id, index)
        assert sorted(firsts.values()) == [BLOCK_SIZE, 2 * BLOCK_SIZE, 3 * BLOCK_SIZE]
        data, _ = await zk1.get(ZNODE)
        node = json.loads(data)
        assert set(node) == {"version", "broker", "block_start", "block_end"} and node["version"] == 1
        assert (node["block_start"], node["block_end"]) == (str(3 * BLOCK_SIZE), str(4 * BLOCK_SIZE - 1))
        # The rest of a claimed block comes from memory; a broker of a new session continues
        # after the node's block.
        assert [await managers[0].next_id() for _ in range(2)] == [firsts[0] + 1, firsts[0] + 2]
        assert await ProducerIdManager(zookeeper_blocks(zk2, 4)).next_id() == 4 * BLOCK_SIZE
