"""Replica fetchers: one per leader broker, copying its partitions' logs to this broker.

A follower partition first learns where to truncate (KIP-101: OffsetForLeaderEpoch for its
epochs, answered by the leader; ``truncation`` decides the point from the answers), then
fetches from its log end with ``replica_id`` = this broker's id and appends the leader's
message sets as they are: the leader's offsets, timestamps and compression
(``Log.append_as_follower``). The leader's high watermark comes back with every answer.

Every request names the follower's leader epoch (KIP-320: Fetch v9+, OffsetForLeaderEpoch
v2+), and the leader answers only in that same epoch: FENCED_LEADER_EPOCH when it has moved
past it (the follower stops fetching the partition until its own LeaderAndIsr comes),
UNKNOWN_LEADER_EPOCH when it has not reached it yet (asked again after a backoff). So every
answer applied was read while the leader was in the follower's epoch and holds messages of
epochs the follower has recorded, or will as its log end reaches their starts: its epoch cache
always describes its log, which exact truncation rests on (``truncation``'s docstring; magic
0/1 sets carry no epoch of their own). Before KIP-320 this broker asked OffsetForLeaderEpoch
once more after each answer that carried something, for the same guarantee.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.replication.channel import (
    PLAINTEXT,
    AuthenticationError,
    BrokerChannel,
    ChannelError,
    ChannelSecurity,
    Dialer,
    dial_address,
)
from minikafka.replication.metadata_cache import BrokerEndpoint
from minikafka.replication.quota import ReplicationQuota, is_throttled
from minikafka.replication.truncation import (
    epochs_to_query,
    epochs_to_query_below,
    epochs_to_record,
    leader_epochs_from_answers,
    truncation_offset_from_answers,
)
from minikafka.storage.types import UnknownTopic

if TYPE_CHECKING:
    from minikafka.replication.replica_manager import Replica, ReplicaManager

logger = logging.getLogger(__name__)

# The first versions that carry the follower's leader epoch; v10 also takes zstd batches.
FETCH_VERSION = 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 3


class FetcherSettings:
    def __init__(self, *, wait_max_ms: int, min_bytes: int, max_bytes: int, response_max_bytes: int,
                 backoff_ms: int, socket_timeout_ms: int,
                 dial: dict[int, tuple[str, int]] | None = None, security: ChannelSecurity = PLAINTEXT,
                 dialer: Dialer | None = None, snapshot_trimmed_topics: frozenset[str] = frozenset(),
                 quota: ReplicationQuota | None = None) -> None:
        self.security = security
        # follower.replication.throttled.rate (KIP-73); None: never throttled
        self.quota = quota
        # The coordinators' state logs: each replica deletes their segments only below its own
        # snapshots, so a follower keeps its log start there (see ReplicaFetcher._process).
        self.snapshot_trimmed_topics = snapshot_trimmed_topics
        self.dialer = dialer  # replaces TCP (the simulator's network)  # how the leaders' inter-broker listener is secured
        self.wait_max_ms = wait_max_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.response_max_bytes = response_max_bytes
        self.backoff_ms = backoff_ms
        self.socket_timeout_ms = socket_timeout_ms
        self.dial = dial or {}


class FetcherManager:
    """Keeps one :class:`ReplicaFetcher` task per leader broker with follower partitions."""

    def __init__(self, node_id: int, replicas: "ReplicaManager", settings: FetcherSettings,
                 nursery: trio.Nursery) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self.settings = settings
        self.nursery = nursery
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def add(self, replica: "Replica", leader: BrokerEndpoint) -> None:
        fetcher = self.fetchers.get(leader.node_id)
        if fetcher is None or fetcher.closed:
            fetcher = ReplicaFetcher(self.node_id, leader, self.replicas, self.settings)
            self.fetchers[leader.node_id] = fetcher
            self.nursery.start_soon(fetcher.run)
        else:
            fetcher.channel.retarget(*dial_address(leader.node_id, leader.host, leader.port, self.settings.dial))
        fetcher.add(replica)

    def remove(self, topic: str, partition: int) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(topic, partition)

    def following(self) -> dict[int, list[tuple[str, int]]]:
        return {leader: sorted(f.partitions) for leader, f in self.fetchers.items() if f.partitions}

    async def aclose(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.aclose()


class ReplicaFetcher:
    def __init__(self, node_id: int, leader: BrokerEndpoint, replicas: "ReplicaManager",
                 settings: FetcherSettings) -> None:
        self.node_id = node_id
        self.leader_id = leader.node_id
        self.replicas = replicas
        self.settings = settings
        host, port = dial_address(leader.node_id, leader.host, leader.port, settings.dial)
        self.channel = BrokerChannel(host, port, client_id=f"broker-{node_id}-fetcher",
                                     timeout_s=(settings.wait_max_ms + settings.socket_timeout_ms) / 1000,
                                     security=settings.security, dialer=settings.dialer)
        self.partitions: dict[tuple[str, int], Replica] = {}
        self._changed = trio.Event()
        self._failed_round = False
        self.closed = False

    def add(self, replica: "Replica") -> None:
        self.partitions[(replica.topic, replica.partition)] = replica
        self._changed.set()

    def remove(self, topic: str, partition: int) -> None:
        if self.partitions.pop((topic, partition), None) is not None:
            self._changed.set()

    async def aclose(self) -> None:
        self.closed = True
        self._changed.set()
        await self.channel.aclose()

    async def run(self) -> None:
        backoff = self.settings.backoff_ms / 1000
        while not self.closed:
            if not self.partitions:
                self._changed = trio.Event()
                await self._changed.wait()
                continue
            try:
                truncating = [r for r in self.partitions.values() if r.needs_truncation or r.needs_epochs]
                if truncating:
                    await self._truncate(truncating)
                    continue
                await self._fetch_once()
            except ChannelError as exc:
                # A refused login will not mend by itself (a wrong inter-broker password, an
                # untrusted certificate): say it louder than a dropped connection.
                level = logging.WARNING if isinstance(exc, AuthenticationError) else logging.INFO
                logger.log(level, "fetcher for broker %d: %s; retrying in %.1f s", self.leader_id, exc, backoff)
                await trio.sleep(backoff)

    # -- truncation --------------------------------------------------------------------------

    async def _truncate(self, replicas: list["Replica"]) -> None:
        queries = {(r.topic, r.partition): epochs_to_query(r.log.leader_epoch_cache.entries, r.leader_epoch)
                   for r in replicas}
        answers, errors = await self._ask_epochs(queries, {(r.topic, r.partition): r.leader_epoch for r in replicas})
        for replica in replicas:
            key = (replica.topic, replica.partition)
            if self.partitions.get(key) is not replica or not (replica.needs_truncation or replica.needs_epochs):
                continue  # the controller moved it meanwhile
            if key in errors:
                # UNKNOWN_LEADER_EPOCH: the leader's LeaderAndIsr is on its way; FENCED: ours is.
                logger.info("%s-%d: leader %d answered OffsetForLeaderEpoch with %s; retrying",
                            replica.topic, replica.partition, self.leader_id, ErrorCode(errors[key]).name)
                await trio.sleep(self.settings.backoff_ms / 1000)
                continue
            await self._truncate_one(replica, answers[key])

    async def _ask_epochs(self, queries: dict[tuple[str, int], list[int]], current: dict[tuple[str, int], int]):
        """One OffsetForLeaderEpoch request for ``{partition: [epochs]}``, each fenced by the
        follower's epoch ``current[partition]``; answers come back per entry in request order
        (a partition is listed once per epoch)."""
        topics: dict[str, list[dict]] = {}
        for key, epochs in queries.items():
            topics.setdefault(key[0], []).extend(
                {"partition": key[1], "current_leader_epoch": current[key], "leader_epoch": e} for e in epochs)
        body = {"replica_id": self.node_id, "topics": [{"topic": t, "partitions": p} for t, p in topics.items()]}
        response = await self.channel.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, body)
        ends: dict[tuple[str, int], list[int]] = {}
        errors: dict[tuple[str, int], int] = {}
        for topic in response.topics:
            for entry in topic.partitions:
                key = (topic.topic, entry.partition)
                if entry.error_code:
                    errors[key] = entry.error_code
                else:
                    ends.setdefault(key, []).append(entry.end_offset)
        answers = {key: dict(zip(epochs, ends.get(key, []))) for key, epochs in queries.items() if key not in errors}
        return answers, errors

    async def _truncate_one(self, replica: "Replica", ends: dict[int, int]) -> None:
        log = replica.log
        cache = log.leader_epoch_cache
        local_end = log.log_end_offset
        if not replica.needs_truncation:
            if not self._learn_epochs(replica, ends):
                await trio.sleep(self.settings.backoff_ms / 1000)
            return
        try:
            point = truncation_offset_from_answers(cache.entries, local_end, ends, replica.leader_epoch,
                                                   log.high_watermark)
            below = epochs_to_query_below(ends, point)
            if below:
                key = (replica.topic, replica.partition)
                more, errors = await self._ask_epochs({key: below}, {key: replica.leader_epoch})
                if errors:
                    return  # asked again on the next round
                ends = {**more[key], **ends}
            leader_entries = leader_epochs_from_answers(ends, replica.leader_epoch)
        except ValueError as exc:  # answers no leader gives: ask again later
            self._inconsistent(replica, ends, exc)
            await trio.sleep(self.settings.backoff_ms / 1000)
            return
        if self.partitions.get((replica.topic, replica.partition)) is not replica:
            return
        if point < local_end:
            logger.info("%s-%d: truncating from %d to %d (leader %d, epoch %d)", replica.topic,
                        replica.partition, local_end, point, self.leader_id, replica.leader_epoch)
            log.truncate_to(point)
        cache.truncate_from_end(point)
        replica.pending_epochs = epochs_to_record(leader_entries, point)
        replica.needs_truncation = replica.needs_epochs = False
        self.replicas.follower_appended(replica, log.high_watermark)

    def _learn_epochs(self, replica: "Replica", ends: dict[int, int]) -> bool:
        """A new epoch of the leader we follow: record the leader's epochs from the start of
        our latest one on (as the log end reaches them), the log untouched. False if the
        answers are inconsistent (asked again later)."""
        try:
            leader_entries = leader_epochs_from_answers(ends, replica.leader_epoch)
        except ValueError as exc:
            self._inconsistent(replica, ends, exc)
            return False
        entries = replica.log.leader_epoch_cache.entries
        replica.pending_epochs = epochs_to_record(leader_entries, entries[-1][1] if entries else 0)
        replica.needs_epochs = False
        self.replicas.follower_appended(replica, replica.log.high_watermark)
        return True

    def _inconsistent(self, replica: "Replica", ends: dict[int, int], exc: ValueError) -> None:
        logger.warning("%s-%d: leader %d's epoch answers %s are inconsistent (%s); retrying",
                       replica.topic, replica.partition, self.leader_id, ends, exc)

    # -- fetching ----------------------------------------------------------------------------

    async def _fetch_once(self) -> None:
        self._failed_round = False
        requested = dict(self.partitions)
        throttled = self._throttled(requested)
        if throttled and self.settings.quota.exceeded():
            # Kafka's ReplicaFetcherThread.shouldFollowerThrottle: over the rate, a throttled
            # replica that has not caught up is left out of the fetch until the rate falls.
            for key in throttled:
                if requested[key].fetch_lag != 0:
                    del requested[key]
            if not requested:
                await trio.sleep(self.settings.backoff_ms / 1000)
                return
        topics: dict[str, list[dict]] = {}
        for (topic, partition), replica in requested.items():
            topics.setdefault(topic, []).append({
                "partition": partition, "current_leader_epoch": replica.leader_epoch,
                "fetch_offset": replica.log.log_end_offset, "log_start_offset": replica.log.log_start_offset,
                "partition_max_bytes": self.settings.max_bytes})
        body = {"replica_id": self.node_id, "max_wait_ms": self.settings.wait_max_ms,
                "min_bytes": self.settings.min_bytes, "max_bytes": self.settings.response_max_bytes,
                "topics": [{"topic": t, "partitions": p} for t, p in topics.items()]}
        epochs = {key: replica.leader_epoch for key, replica in requested.items()}
        response = await self.channel.request(ApiKey.FETCH, FETCH_VERSION, body)
        for topic in response.responses:
            for entry in topic.partitions:
                key = (topic.topic, entry.partition_index)
                replica = requested.get(key)
                if replica is None or self.partitions.get(key) is not replica:
                    continue
                if entry.error_code == ErrorCode.FENCED_LEADER_EPOCH and replica.leader_epoch == epochs[key]:
                    # Kafka's onPartitionFenced: the LeaderAndIsr that tells this broker the
                    # leader's new epoch puts the partition back (ReplicaManager._make_follower).
                    logger.info("%s-%d: leader %d has moved past epoch %d: fetching waits for the new "
                                "LeaderAndIsr", replica.topic, replica.partition, self.leader_id, epochs[key])
                    self.remove(replica.topic, replica.partition)
                    continue
                await self._apply(replica, entry)
                if key in throttled and entry.records:
                    self.settings.quota.record(len(entry.records))
                if entry.records and self.partitions.get(key) is replica:
                    # To the back of the next request, as Kafka's fetcher moves a partition
                    # that got data (PartitionStates.updateAndMoveToEnd): only the first
                    # partition with data may exceed the answer's budget (KIP-74), so in a fixed
                    # order one that always has more would starve those after it, and they
                    # would fall out of the ISR behind it.
                    self.partitions[key] = self.partitions.pop(key)
        if self._failed_round:
            await trio.sleep(self.settings.backoff_ms / 1000)

    def _throttled(self, replicas: dict[tuple[str, int], "Replica"]) -> set[tuple[str, int]]:
        """Those of ``replicas`` their topic's follower.replication.throttled.replicas lists as
        this broker's; none while this broker's rate is unlimited."""
        quota = self.settings.quota
        if quota is None or not quota.limited():
            return set()
        listed = {}
        for topic in {topic for topic, _ in replicas}:
            try:
                listed[topic] = self.replicas.log_manager.topic_overrides(topic).get(
                    "follower.replication.throttled.replicas")
            except UnknownTopic:
                pass
        return {(topic, partition) for topic, partition in replicas
                if is_throttled(listed.get(topic), partition, self.node_id)}

    async def _apply(self, replica: "Replica", entry) -> None:
        code = entry.error_code
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(replica)
            return
        if code:
            # NOT_LEADER / UNKNOWN_TOPIC / UNKNOWN_LEADER_EPOCH: the leader has not had its
            # LeaderAndIsr yet, or leadership moved on and ours is on its way (FENCED after our
            # epoch changed meanwhile); keep asking (after a backoff) until it settles.
            logger.info("%s-%d: leader %d answered Fetch with %s; retrying", replica.topic,
                        replica.partition, self.leader_id, ErrorCode(code).name)
            self._failed_round = True
            return
        records = entry.records
        if records:
            try:
                # A view of the response frame, not a copy: validation makes the bytes to keep.
                replica.log.append_as_follower(records)
            except RecordError as exc:
                logger.error("%s-%d: a set fetched from leader %d was refused (%s): stopping this "
                             "partition's replication", replica.topic, replica.partition, self.leader_id, exc)
                self.remove(replica.topic, replica.partition)
                return
        self.replicas.follower_appended(replica, entry.high_watermark)
        replica.fetch_lag = max(0, entry.high_watermark - replica.log.log_end_offset)
        # The leader's log start offset (Fetch v5+; absent from older answers): records it
        # deleted (DeleteRecords, retention) go here too, as Kafka's follower does.
        # Not for the coordinators' state logs (__consumer_offsets, __transaction_state): a leader
        # deletes their segments below ITS snapshots; here the events above our own newest
        # snapshot would go with them, and loading this replica as the next leader would then
        # replay a partial state (a group answered as new, its generation and offsets lost:
        # simulator seed 29 on 7d6e246). Kafka never moves these logs' start (it compacts them).
        leader_start = getattr(entry, "log_start_offset", -1)
        if leader_start > replica.log.log_start_offset and replica.topic not in self.settings.snapshot_trimmed_topics:
            replica.log.increment_log_start_offset(min(leader_start, replica.log.log_end_offset))

    async def _handle_out_of_range(self, replica: "Replica") -> None:
        """Our log end is outside the leader's log: below its start (retention ran there), so
        start over at the leader's log start; above its end cannot happen after truncation by
        epoch, so truncate again."""
        body = {"replica_id": self.node_id, "topics": [{"name": replica.topic, "partitions": [
            {"partition_index": replica.partition, "timestamp": -2, "max_num_offsets": 1}]}]}
        response = await self.channel.request(ApiKey.LIST_OFFSETS, 1, body)
        (answer,) = response.topics[0].partitions
        if answer.error_code:
            return
        log = replica.log
        if log.log_end_offset < answer.offset:
            logger.warning("%s-%d: log end %d is below leader %d's log start %d: starting over there",
                           replica.topic, replica.partition, log.log_end_offset, self.leader_id, answer.offset)
            log.truncate_fully_and_start_at(answer.offset)
        else:
            replica.needs_truncation = True

