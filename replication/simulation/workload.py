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
        leader = self.leaders.get(partition)
        if leader is None:
            await self.refresh_metadata()
            leader = self.leaders.get(partition)
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
        body = {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [
            {"topic": TOPIC, "partitions": [{"partition": partition, "fetch_offset": offset,
                                              "partition_max_bytes": 1 << 20}]}]}
        try:
            response = await self.channel(leader).request(ApiKey.FETCH, 3, body)
        except ChannelError:
            await self.refresh_metadata()
            return False
        (answer,) = response.responses[0].partitions
        if answer.error_code:
            await self.refresh_metadata()
            return False
        read = False
        for record in iter_records(answer.records or b""):
            if record.offset < offset:
                continue
            self.sim.checker.consumed(partition, record.offset, record.value, leader)
            positions[partition] = record.offset + 1
            read = True
        return read
