"""COMMIT/ABORT markers written to the partitions this broker leads: what a WriteTxnMarkers
request asks of a partition leader (Kafka 2.8's ``handleWriteTxnMarkersRequest``), and what a
coordinator does directly instead of sending itself that request; and the coordinator's side
that sends the others to their leaders (:class:`MarkerSender`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from minikafka.broker.groups.store import GROUP_METADATA_TOPIC
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

logger = logging.getLogger(__name__)


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


class MarkerSender:
    """Where a transaction coordinator's markers go (Kafka's TransactionMarkerChannelManager):
    each partition's marker to its leader. A single broker leads every partition and writes
    them itself (:func:`write_markers`); a cluster broker writes those it leads and sends the
    others, grouped by leader, in one WriteTxnMarkers request per broker over a channel kept
    per broker. A partition with no leader yet, or an unreachable one, is answered with the
    error the coordinator retries on (its leader is looked up again then)."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._channels: dict[int, object] = {}

    async def send(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                   partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        marker = {"producer_id": producer_id, "producer_epoch": producer_epoch,
                  "coordinator_epoch": coordinator_epoch, "commit": commit}
        cluster = self.broker.cluster
        if cluster is None:
            return await write_markers(self.broker, partitions=partitions, **marker)
        results: dict[tuple[str, int], ErrorCode] = {}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in partitions:
            info = cluster.metadata.partition(topic, partition)
            if info is None:
                results[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif info.leader < 0:
                results[(topic, partition)] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(info.leader, []).append((topic, partition))

        async def write_local(assigned: list[tuple[str, int]]) -> None:
            results.update(await write_markers(self.broker, partitions=assigned, **marker))

        async def write_remote(leader: int, assigned: list[tuple[str, int]]) -> None:
            results.update(await self._request(leader, assigned, **marker))

        async with trio.open_nursery() as nursery:
            for leader, assigned in by_leader.items():
                if leader == self.broker.node_id:
                    nursery.start_soon(write_local, assigned)
                else:
                    nursery.start_soon(write_remote, leader, assigned)
        return results

    async def _request(self, leader: int, partitions: list[tuple[str, int]], *, producer_id: int,
                       producer_epoch: int, coordinator_epoch: int, commit: bool) -> dict[tuple[str, int], ErrorCode]:
        from minikafka.replication.channel import BrokerChannel, ChannelError, dial_address

        cluster = self.broker.cluster
        endpoint = cluster.metadata.brokers.get(leader)
        if endpoint is None:
            return dict.fromkeys(partitions, ErrorCode.LEADER_NOT_AVAILABLE)
        settings = cluster.settings
        host, port = dial_address(leader, endpoint.host, endpoint.port, settings.dial)
        channel = self._channels.get(leader)
        if channel is None:
            channel = self._channels[leader] = BrokerChannel(
                host, port, client_id=f"broker-{self.broker.node_id}-txn-markers",
                timeout_s=self.broker.config.get("request.timeout.ms") / 1000, security=settings.security,
                dialer=settings.dialer)
        else:
            channel.retarget(host, port)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": topic, "partition_indexes": indexes}
                                        for topic, indexes in by_topic.items()]}]}
        try:
            response = await channel.request(ApiKey.WRITE_TXN_MARKERS, 0, body)
        except ChannelError as exc:
            logger.info("markers of producer %d to broker %d not sent: %s", producer_id, leader, exc)
            return dict.fromkeys(partitions, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        results = dict.fromkeys(partitions, ErrorCode.UNKNOWN_SERVER_ERROR)
        for answer in response.markers:
            for topic in answer.topics:
                for partition in topic.partitions:
                    results[(topic.name, partition.partition_index)] = ErrorCode(partition.error_code)
        return results

    async def aclose(self) -> None:
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.aclose()
