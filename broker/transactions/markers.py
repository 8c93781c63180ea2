"""COMMIT/ABORT markers written to the partitions this broker leads: what a WriteTxnMarkers
request asks of a partition leader (Kafka 2.8's ``handleWriteTxnMarkersRequest``), and what a
single broker's coordinator does directly instead of sending itself that request."""

from __future__ import annotations

from collections.abc import Iterable

import trio

from minikafka.broker.groups.store import GROUP_METADATA_TOPIC
from minikafka.protocol.errors import ErrorCode


async def write_markers(broker, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                        commit: bool, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """Write the marker to every partition (at once, each acks=all) and return each one's error.

    A marker written to a ``__consumer_offsets`` partition makes the group coordinator apply or
    drop the producer's transactional offset commits there (Kafka's
    ``onTransactionCompletion``), once the marker is in the log."""
    results: dict[tuple[str, int], ErrorCode] = {}

    async def write(topic: str, partition: int) -> None:
        results[(topic, partition)] = await broker.partitions.append_txn_marker(
            topic, partition, producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch, commit=commit)

    async with trio.open_nursery() as nursery:
        for topic, partition in partitions:
            nursery.start_soon(write, topic, partition)
    offsets_partitions = sorted(partition for (topic, partition), error in results.items()
                                if topic == GROUP_METADATA_TOPIC and error == ErrorCode.NONE)
    if offsets_partitions:
        groups = await broker.groups()
        groups.handle_txn_completion(producer_id, offsets_partitions, commit)
    return results
