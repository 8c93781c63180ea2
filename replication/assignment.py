"""Replica assignment for new topics: Kafka 0.10.2's rack-unaware algorithm
(``AdminUtils.assignReplicasToBrokersRackUnaware``), so a topic created here lands on brokers
the way Kafka would place it.

The first replica of each partition goes round-robin over the broker list from a start index;
the other replicas follow it at a shift that grows by one each time the partition id wraps
around the broker list, so that the partitions one broker leads have their followers spread
over the other brokers rather than always on the same neighbour. Start index and shift are
random unless fixed; ``rng`` makes the random ones reproducible.
"""

from __future__ import annotations

import random

from minikafka.protocol.errors import ErrorCode


class InvalidReplicationFactor(ValueError):
    """CreateTopics answers it with INVALID_REPLICATION_FACTOR."""

    error_code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidPartitions(ValueError):
    """CreateTopics answers it with INVALID_PARTITIONS."""

    error_code = ErrorCode.INVALID_PARTITIONS


def assign_replicas(
    num_partitions: int,
    replication_factor: int,
    broker_ids: list[int],
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """``{partition: [replica broker ids, preferred leader first]}``.

    ``broker_ids`` is used in the order given (Kafka passes the live brokers sorted by id).
    ``start_partition_id`` is where new partitions are numbered from (adding partitions to an
    existing topic); negative means 0. A negative ``fixed_start_index`` picks the start index
    and the first shift at random, as Kafka does.
    """
    if num_partitions <= 0:
        raise InvalidPartitions("number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise InvalidReplicationFactor("replication factor must be larger than 0")
    if replication_factor > len(broker_ids):
        raise InvalidReplicationFactor(
            f"replication factor: {replication_factor} larger than available brokers: {len(broker_ids)}"
        )
    if len(set(broker_ids)) != len(broker_ids):
        # A broker listed twice would get two replicas of one partition.
        raise ValueError(f"broker ids must be distinct: {broker_ids}")
    n = len(broker_ids)
    # Without an rng, the process's shared generator: the simulator seeds it per run, so a
    # topic created through the controller (e.g. __transaction_state) is placed alike each time.
    randrange = rng.randrange if rng is not None else random.randrange
    start_index = fixed_start_index if fixed_start_index >= 0 else randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else randrange(n)
    partition = max(0, start_partition_id)
    assignment: dict[int, list[int]] = {}
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [broker_ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(broker_ids[_replica_index(first, shift, j, n)])
        assignment[partition] = replicas
        partition += 1
    return assignment


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    # The offset from the first replica is in 1..n-1, so a follower never lands on the leader's
    # broker and the j followers of one partition land on distinct brokers.
    return (first + 1 + (shift + j) % (n - 1)) % n
