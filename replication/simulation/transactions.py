"""The simulator's transactional workload (issue 26, ``--transactions``), and what it checks.

:class:`TxnProducer` runs transactions on the workload's topic (record batches): each takes a
fresh producer id (InitProducerId), writes one transactional batch of a few values to each of
one or two partitions with acks=all, then decides: commit if every batch was acknowledged (and
at random even then abort), abort otherwise. As a transaction coordinator does with
WriteTxnMarkers, it then has each partition's leader append the COMMIT or ABORT marker
(``Partitions.append_txn_marker``, called on the leader's broker in-process: the coordinator
is not simulated, so its links to the leaders see no network faults) and retries each until
one is written; the brokers themselves crash, lose their unflushed data and fail over as the
faults say. An abort's markers carry the next producer epoch, as Kafka's coordinator bumps it
to abort a transaction whose produce may still be in flight: a late batch is fenced instead
of opening a transaction no marker would end.

:class:`ReadCommittedConsumer` reads every partition from the start with Fetch v4
READ_COMMITTED and drops aborted records as a client does (the aborted transactions of each
answer, the ABORT markers).

:class:`TxnChecker` holds the invariants:

* a value the consumer is handed belongs to no transaction, or to one already decided to
  commit, and lies below the answer's last stable offset, which is at most its high watermark;
* (``Checker.final_check``) every acknowledged value of a transaction is in its log at its
  offset, committed or aborted (its attempts are acks=all attempts like any other);
* after the run, the replicas of a partition that hold the leader's whole log agree with it on
  the transactions still open and on the aborted transactions (producer, first and last offset)
  their transaction indexes list.
"""

from __future__ import annotations

import random
from collections import Counter

import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.entries import iter_entries
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.record_batch import batch_records, build_record_batch, end_txn_marker, iter_batches
from minikafka.replication.channel import ChannelError
from minikafka.replication.simulation.workload import PRODUCE_TIMEOUT_MS, TOPIC, Attempt, Client

COMMIT_SHARE = 0.7  # of the transactions whose batches were all acknowledged
READ_COMMITTED = 1


class TxnProducer(Client):
    def __init__(self, sim, name: str) -> None:
        super().__init__(sim, name)
        # Its own generator for its choices (a seed still replays: this one is seeded too).
        self.rng = random.Random(f"{sim.seed}-{name}")

    async def run(self) -> None:
        checker = self.sim.checker.transactions
        number = 0
        while True:
            producer_id = await self.init_producer_id()
            if producer_id is None:
                await trio.sleep(0.2)
                continue
            number += 1
            txn = f"{self.name}{number}"
            partitions = self.rng.sample(range(self.sim.partitions), self.rng.randint(1, 2))
            acknowledged = True
            for partition in partitions:
                values = [f"{txn}-p{partition}-{i}".encode() for i in range(self.rng.randint(1, 3))]
                checker.started(txn, values)
                acknowledged &= await self.produce(producer_id, partition, values)
            commit = acknowledged and self.rng.random() < COMMIT_SHARE
            checker.decided(txn, commit)
            self.sim.trace("txn", f"{txn} (producer {producer_id}) {'commits' if commit else 'aborts'} "
                                  f"on p{partitions}")
            for partition in partitions:
                await self.write_marker(producer_id, partition, commit)
            await trio.sleep(self.rng.uniform(0.05, 0.2))

    async def init_producer_id(self) -> int | None:
        broker = self.rng.choice(self.sim.broker_ids)
        try:
            response = await self.channel(broker).request(ApiKey.INIT_PRODUCER_ID, 0, {
                "transactional_id": None, "transaction_timeout_ms": 60000})
        except ChannelError:
            return None
        return None if response.error_code else response.producer_id

    async def produce(self, producer_id: int, partition: int, values: list[bytes]) -> bool:
        """One attempt, no retry: a transaction whose batch is not acknowledged aborts."""
        leader = self.leaders.get(partition)
        if leader is None:
            await self.refresh_metadata()
            leader = self.leaders.get(partition)
            if leader is None:
                return False
        now = self.sim.clock.time_ms()
        attempts = [Attempt(value, partition, -1, leader, trio.current_time()) for value in values]
        for value in values:
            self.sim.checker.sent(value)
        self.sim.checker.attempts.extend(attempts)
        batch = build_record_batch([(None, value, now, ()) for value in values], producer_id=producer_id,
                                   producer_epoch=0, base_sequence=0, transactional=True)
        body = {"transactional_id": None, "acks": -1, "timeout_ms": PRODUCE_TIMEOUT_MS, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": partition, "records": bytes(batch)}]}]}
        try:
            response = await self.channel(leader).request(ApiKey.PRODUCE, 3, body)
        except ChannelError:
            for attempt in attempts:
                attempt.answered_at = trio.current_time()
            await self.refresh_metadata()
            return False
        (answer,) = response.responses[0].partition_responses
        for i, attempt in enumerate(attempts):
            attempt.answered_at = trio.current_time()
            attempt.error = answer.error_code
            attempt.offset = answer.base_offset + i if answer.base_offset >= 0 else -1
        self.sim.trace("produce", f"{self.name} {values[0].decode()}.. p{partition} via {leader}: "
                                  f"{ErrorCode(answer.error_code).name} @{answer.base_offset}")
        if answer.error_code:
            await self.refresh_metadata()
        return answer.error_code == ErrorCode.NONE

    async def write_marker(self, producer_id: int, partition: int, commit: bool) -> None:
        """Until a leader has it committed, as the coordinator retries WriteTxnMarkers."""
        while True:
            leader = self.sim.brokers.get(self.leaders.get(partition))
            if leader is not None and leader.alive:
                code = await leader.broker.partitions.append_txn_marker(
                    TOPIC, partition, producer_id=producer_id, producer_epoch=0 if commit else 1,
                    coordinator_epoch=0, commit=commit, timeout_ms=PRODUCE_TIMEOUT_MS)
                self.sim.trace("txn", f"marker {'COMMIT' if commit else 'ABORT'} of producer {producer_id} "
                                      f"on p{partition} via {leader.node_id}: {ErrorCode(code).name}")
                if code == ErrorCode.NONE:
                    self.sim.checker.transactions.figures["markers written"] += 1
                    return
            await trio.sleep(0.1)
            await self.refresh_metadata()


class ReadCommittedConsumer(Client):
    """Reads every partition from the start with READ_COMMITTED, as a client does."""

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
        body = {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": READ_COMMITTED, "topics": [
                    {"topic": TOPIC, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                      "partition_max_bytes": 1 << 20}]}]}
        try:
            response = await self.channel(leader).request(ApiKey.FETCH, 4, body)
        except ChannelError:
            await self.refresh_metadata()
            return False
        (answer,) = response.responses[0].partitions
        if answer.error_code:
            await self.refresh_metadata()
            return False
        checker = self.sim.checker.transactions
        stable = answer.last_stable_offset
        if stable > answer.high_watermark:
            checker.violation(("lso-above-hw", partition, stable),
                              f"p{partition}: last stable offset {stable} above the high watermark "
                              f"{answer.high_watermark} from broker {leader}")
        data = bytes(answer.records or b"")
        whole = max((e.position + e.size for e in iter_entries(data)), default=0) if data else 0
        pending = sorted((t.first_offset, t.producer_id) for t in answer.aborted_transactions or ())
        aborted_producers: set[int] = set()
        read = False
        for batch in iter_batches(data[:whole]) if whole else ():
            while pending and pending[0][0] <= batch.base_offset + batch.last_offset_delta:
                aborted_producers.add(pending.pop(0)[1])
            if batch.is_control:
                marker = end_txn_marker(data[batch.position:batch.position + batch.size])
                if marker is not None and not marker.commit:
                    aborted_producers.discard(batch.producer_id)
            elif not (batch.is_transactional and batch.producer_id in aborted_producers):
                for record in batch_records(data, batch):
                    if record.offset >= offset:
                        checker.delivered(partition, record.offset, record.value, stable, leader)
                        self.sim.checker.consumed(partition, record.offset, record.value, leader)
            last = batch.base_offset + batch.last_offset_delta
            if last >= offset:
                positions[partition] = last + 1
                read = True
        return read


class TxnChecker:
    def __init__(self, checker) -> None:
        self.checker = checker
        self.transaction_of: dict[bytes, str] = {}
        self.decisions: dict[str, bool] = {}
        self.figures: Counter[str] = Counter()

    def violation(self, key: tuple, message: str) -> None:
        self.checker.violation(("txn", *key), message)

    def started(self, txn: str, values: list[bytes]) -> None:
        for value in values:
            self.transaction_of[value] = txn

    def decided(self, txn: str, commit: bool) -> None:
        self.decisions[txn] = commit
        self.figures["transactions committed" if commit else "transactions aborted"] += 1

    def delivered(self, partition: int, offset: int, value: bytes, stable: int, broker: int) -> None:
        if offset >= stable:
            self.violation(("above-lso", partition, offset),
                           f"p{partition}@{offset}: READ_COMMITTED answer from broker {broker} holds {value!r} at or "
                           f"above its last stable offset {stable}")
        txn = self.transaction_of.get(value)
        if txn is None:
            return
        decision = self.decisions.get(txn)
        if decision is not True:
            self.violation(("uncommitted", value),
                           f"p{partition}@{offset}: READ_COMMITTED read {value!r} from broker {broker}, of transaction "
                           f"{txn}, {'aborted' if decision is False else 'not decided yet'}")
        else:
            self.figures["committed values read"] += 1

    def final_check(self, partition: int, leader_replica, replicas) -> None:
        """The replicas holding the leader's whole log agree with it on its transactions."""
        expected = _transactions(leader_replica.log)
        for name, replica in replicas:
            if replica.log.log_end_offset != leader_replica.log.log_end_offset:
                continue
            found = _transactions(replica.log)
            if found != expected:
                self.violation(("replica-txns", name, partition),
                               f"p{partition}: {name} has open transactions {found[0]} and aborted {found[1]}, the "
                               f"leader {expected[0]} and {expected[1]}")
            self.figures["replicas compared"] += 1


def _transactions(log) -> tuple[dict[int, int], list[tuple[int, int, int]]]:
    """The open transactions (first offset -> producer) and the aborted ones a log's
    transaction indexes list."""
    state = log.producer_state
    open_txns = {entry.current_txn_first_offset: entry.producer_id for entry in state.producers.values()
                 if entry.current_txn_first_offset is not None}
    aborted = [(txn.producer_id, txn.first_offset, txn.last_offset) for txn in log.aborted_transactions()]
    return open_txns, aborted

