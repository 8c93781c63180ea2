"""The simulator's clients, speaking the Kafka protocol over the in-memory network as a simple
producer and consumer do: Metadata to find leaders, Produce (acks=all or acks=1) of one unique
value at a time with retries, and Fetch from the leader below the high watermark.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.records import build_message_set, iter_records
from minikafka.replication.channel import BrokerChannel, ChannelError
from minikafka.replication.simulation.brokers import PORT, node_name

TOPIC = "t"
RETRIES = 3
REQUEST_TIMEOUT_S = 5.0
PRODUCE_TIMEOUT_MS = 3000


@dataclass
class Attempt:
    """One Produce request for a value, as the client saw it."""

    value: bytes
    partition: int
    acks: int
    broker: int
    sent_at: float
    answered_at: float | None = None
    error: int | None = None  # None: no answer (timeout, broken connection)
    offset: int = -1


class Client:
    def __init__(self, sim, name: str) -> None:
        self.sim = sim
        self.name = name
        self.leaders: dict[int, int] = {}
        self._channels: dict[int, BrokerChannel] = {}

    def channel(self, broker_id: int) -> BrokerChannel:
        channel = self._channels.get(broker_id)
        if channel is None:
            channel = self._channels[broker_id] = BrokerChannel(
                node_name(broker_id), PORT, client_id=self.name, timeout_s=REQUEST_TIMEOUT_S,
                dialer=self.sim.net.dialer(self.name))
        return channel

    async def refresh_metadata(self) -> None:
        ids = list(self.sim.broker_ids)
        self.sim.rng.shuffle(ids)
        for broker_id in ids:
            try:
                response = await self.channel(broker_id).request(ApiKey.METADATA, 1, {"topics": [{"name": TOPIC}]})
            except ChannelError:
                continue
            for topic in response.topics:
                for partition in topic.partitions:
                    if partition.leader_id >= 0:
                        self.leaders[partition.partition_index] = partition.leader_id
            return
        await trio.sleep(0.2)

    async def find_leader(self, partition: int) -> int | None:
        """The partition's leader as last known, else as Metadata now says (None: no leader)."""
        if partition not in self.leaders:
            await self.refresh_metadata()
        return self.leaders.get(partition)

    async def aclose(self) -> None:
        for channel in self._channels.values():
            await channel.aclose()


class Producer(Client):
    def __init__(self, sim, name: str, acks: int) -> None:
        super().__init__(sim, name)
        self.acks = acks

    async def run(self) -> None:
        rng = self.sim.rng
        sequence = 0
        while True:
            sequence += 1
            value = f"{self.name}-{sequence}".encode()
            partition = rng.randrange(self.sim.partitions)
            self.sim.checker.sent(value)
            for _ in range(RETRIES + 1):
                if await self.produce(value, partition):
                    break
                await trio.sleep(0.1)
                await self.refresh_metadata()
            await trio.sleep(rng.uniform(0.005, 0.05))

    async def produce(self, value: bytes, partition: int) -> bool:
        leader = await self.find_leader(partition)
        if leader is None:
            return False
        attempt = Attempt(value, partition, self.acks, leader, trio.current_time())
        self.sim.checker.attempts.append(attempt)
        body = {"acks": self.acks, "timeout_ms": PRODUCE_TIMEOUT_MS, "topic_data": [{"name": TOPIC, "partition_data": [
            {"index": partition, "records": build_message_set([(None, value, self.sim.clock.time_ms())])}]}]}
        try:
            response = await self.channel(leader).request(ApiKey.PRODUCE, 2, body)
        except ChannelError:
            attempt.answered_at = trio.current_time()
            return False
        (answer,) = response.responses[0].partition_responses
        attempt.answered_at = trio.current_time()
        attempt.error = answer.error_code
        attempt.offset = answer.base_offset
        self.sim.trace("produce", f"{self.name} {value.decode()} p{partition} via {leader}: "
                                  f"{ErrorCode(answer.error_code).name} @{answer.base_offset}")
        return answer.error_code == ErrorCode.NONE


class Consumer(Client):
    """Reads every partition from the start, as far as the high watermark lets it."""

    FETCH_VERSION = 3
    ISOLATION: dict = {}  # Fetch v4+'s isolation level, where a subclass asks for one

    async def run(self) -> None:
        positions = {p: 0 for p in range(self.sim.partitions)}
        while True:
            progressed = False
            for partition in range(self.sim.partitions):
                progressed |= await self.fetch(partition, positions)
            if not progressed:
                await trio.sleep(0.05)

    async def fetch(self, partition: int, positions: dict[int, int]) -> bool:
        leader = self.leaders.get(partition)
        if leader is None:
            await self.refresh_metadata()
            return False
        offset = positions[partition]
        body = {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, **self.ISOLATION,
                "topics": [{"topic": TOPIC, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                             "partition_max_bytes": 1 << 20}]}]}
        try:
            response = await self.channel(leader).request(ApiKey.FETCH, self.FETCH_VERSION, body)
        except ChannelError:
            await self.refresh_metadata()
            return False
        (answer,) = response.responses[0].partitions
        if answer.error_code:
            await self.refresh_metadata()
            return False
        return self.take(answer, partition, offset, positions, leader)

    def take(self, answer, partition: int, offset: int, positions: dict[int, int], leader: int) -> bool:
        """Hand the answer's records from ``offset`` on to the checker; whether any were read."""
        read = False
        for record in iter_records(answer.records or b""):
            if record.offset < offset:
                continue
            self.sim.checker.consumed(partition, record.offset, record.value, leader)
            positions[partition] = record.offset + 1
            read = True
        return read


# Each group's partition of __consumer_offsets (3 partitions): g1 -> 2, g2 -> 0.
GROUPS = ("g1", "g2")
MEMBERS_PER_GROUP = 3
SESSION_TIMEOUT_MS = 3000
REBALANCE_TIMEOUT_MS = 3000
# A short retention (OffsetCommit v2) lets offsets expire within a run; partition 0 always
# commits with the broker's (a day), so a group that has committed it never dies and its
# generations only go up.
SHORT_RETENTION_MS = (1500, 6000)


def encode_assignment(partitions: list[int]) -> bytes:
    return ",".join(map(str, partitions)).encode()


def decode_assignment(data: bytes) -> list[int]:
    return [int(p) for p in data.decode().split(",")] if data else []


class GroupMember(Client):
    """A consumer group member as a client library runs one: FindCoordinator, JoinGroup and
    SyncGroup (the leader assigns the topic's partitions round-robin), OffsetFetch of where
    to start, then heartbeats, commits of its partitions (each commit a new value, increasing
    per group and partition) and OffsetFetches; it rejoins when told to, and now and then
    leaves, or vanishes and lets its session expire."""

    def __init__(self, sim, name: str, group: str) -> None:
        super().__init__(sim, name)
        self.group = group
        self.member_id = ""
        self.generation = -1
        self.owned: list[int] = []
        self.coordinator: int | None = None

    async def run(self) -> None:
        rng = self.sim.rng
        while True:
            if not await self.join():
                await trio.sleep(rng.uniform(0.1, 0.4))
                continue
            await self.fetch_offsets()
            while await self.step():
                pass

    async def call(self, api_key: int, version: int, body: dict):
        """A request to the coordinator: (answer, broker, sent at), or None when there is no
        coordinator or no answer (the coordinator is looked up again next time)."""
        if self.coordinator is None:
            await self.find_coordinator()
            if self.coordinator is None:
                return None
        broker, sent_at = self.coordinator, trio.current_time()
        try:
            response = await self.channel(broker).request(api_key, version, body)
        except ChannelError:
            self.coordinator = None
            return None
        return response, broker, sent_at

    async def find_coordinator(self) -> None:
        broker = self.sim.rng.choice(self.sim.broker_ids)
        try:
            response = await self.channel(broker).request(ApiKey.FIND_COORDINATOR, 0, {"key": self.group})
        except ChannelError:
            response = None
        if response is None or response.error_code:
            await trio.sleep(0.2)
            return
        self.coordinator = response.node_id

    def lost_coordinator(self, error: int) -> bool:
        if error in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            self.coordinator = None
            return True
        return False

    async def join(self) -> bool:
        checker = self.sim.checker.groups
        answered = await self.call(ApiKey.JOIN_GROUP, 1, {
            "group_id": self.group, "session_timeout_ms": SESSION_TIMEOUT_MS,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS, "member_id": self.member_id,
            "protocol_type": "consumer", "protocols": [{"name": "roundrobin", "metadata": TOPIC.encode()}]})
        if answered is None:
            return False
        response, broker, sent_at = answered
        error = response.error_code
        self.sim.trace("group", f"{self.name} join {self.group} via {broker}: {ErrorCode(error).name} "
                                f"generation {response.generation_id}")
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if error:
            self.lost_coordinator(error)
            return False
        self.member_id, self.generation = response.member_id, response.generation_id
        checker.generation_seen(self.group, self.generation, broker, sent_at, "JoinGroup")
        assignments = []
        if response.leader == self.member_id:
            members = sorted(member.member_id for member in response.members)
            plan = {m: [p for p in range(self.sim.partitions) if p % len(members) == i] for i, m in enumerate(members)}
            checker.proposed(self.group, self.generation, plan, sent_at)
            assignments = [{"member_id": m, "assignment": encode_assignment(ps)} for m, ps in plan.items()]
        answered = await self.call(ApiKey.SYNC_GROUP, 0, {
            "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
            "assignments": assignments})
        if answered is None:
            return False
        response, broker, sent_at = answered
        error = response.error_code
        self.owned = decode_assignment(bytes(response.assignment)) if not error else []
        self.sim.trace("group", f"{self.name} sync {self.group} generation {self.generation} via {broker}: "
                                f"{ErrorCode(error).name} {self.owned}")
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if error:
            self.lost_coordinator(error)
            return False
        checker.synced(self.group, self.generation, self.member_id, self.owned, broker, sent_at)
        return True

    async def step(self) -> bool:
        """One heartbeat interval: False when the member must join again."""
        rng = self.sim.rng
        await trio.sleep(rng.uniform(0.3, 1.0))
        roll = rng.random()
        if roll < 0.02:
            await self.leave()
            return False
        if roll < 0.03:
            self.sim.trace("group", f"{self.name} vanishes from {self.group}")
            self.member_id, self.coordinator = "", None
            await trio.sleep(SESSION_TIMEOUT_MS / 1000 + 1)
            return False
        if not await self.heartbeat():
            return False
        if self.owned and rng.random() < 0.7:
            await self.commit()
        if rng.random() < 0.25:
            await self.fetch_offsets()
        return True

    async def heartbeat(self) -> bool:
        answered = await self.call(ApiKey.HEARTBEAT, 0, {"group_id": self.group, "generation_id": self.generation,
                                                         "member_id": self.member_id})
        if answered is None:
            return True  # the next interval finds the coordinator again
        response, broker, sent_at = answered
        error = response.error_code
        if error == ErrorCode.NONE:
            self.sim.checker.groups.generation_seen(self.group, self.generation, broker, sent_at, "Heartbeat")
            return True
        if self.lost_coordinator(error):
            return True
        self.sim.trace("group", f"{self.name} heartbeat {self.group} generation {self.generation} via {broker}: "
                                f"{ErrorCode(error).name}")
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self.member_id = ""
        return False

    async def leave(self) -> None:
        self.sim.trace("group", f"{self.name} leaves {self.group}")
        member_id, self.member_id = self.member_id, ""
        await self.call(ApiKey.LEAVE_GROUP, 0, {"group_id": self.group, "member_id": member_id})

    async def commit(self) -> None:
        rng = self.sim.rng
        checker = self.sim.checker.groups
        retention = {p: -1 if p == 0 or rng.random() < 0.5 else rng.randint(*SHORT_RETENTION_MS) for p in self.owned}
        # One request per retention: OffsetCommit v2's retention is request-wide.
        for retention_ms in sorted(set(retention.values())):
            partitions = [p for p in self.owned if retention[p] == retention_ms]
            values = {p: checker.next_value(self.group, p) for p in partitions}
            commit = checker.committing(self.group, self.generation, values, retention_ms)
            answered = await self.call(ApiKey.OFFSET_COMMIT, 2, {
                "group_id": self.group, "generation_id_or_member_epoch": self.generation,
                "member_id": self.member_id, "retention_time_ms": retention_ms,
                "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": p, "committed_offset": v, "committed_metadata": ""}
                    for p, v in values.items()]}]})
            if answered is None:
                continue
            response, broker, _ = answered
            errors = {answer.partition_index: answer.error_code for answer in response.topics[0].partitions}
            checker.commit_answered(commit, errors, broker)
            error = next(iter(errors.values()))
            self.sim.trace("group", f"{self.name} commit {self.group} {values} retention {retention_ms} via {broker}: "
                                    f"{ErrorCode(error).name}")
            self.lost_coordinator(error)

    async def fetch_offsets(self) -> None:
        answered = await self.call(ApiKey.OFFSET_FETCH, 1, {
            "group_id": self.group, "topics": [{"name": TOPIC, "partition_indexes": list(range(self.sim.partitions))}]})
        if answered is None:
            return
        response, broker, sent_at = answered
        found = {answer.partition_index: (answer.committed_offset, answer.error_code)
                 for topic in response.topics for answer in topic.partitions}
        if any(error for _, error in found.values()):
            self.lost_coordinator(next(error for _, error in found.values() if error))
            return
        offsets = {p: offset for p, (offset, _) in found.items()}
        self.sim.trace("group", f"{self.name} fetch {self.group} via {broker}: {offsets}")
        self.sim.checker.groups.fetched(self.group, offsets, broker, sent_at)
