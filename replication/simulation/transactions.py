"""The simulator's transactional workload (issue 26, ``--transactions``), and what it checks.

:class:`TxnProducer` runs transactions on the workload's topic (record batches) through the
brokers' real transaction coordinator, as a transactional client does: it finds the
coordinator of its transactional id (FindCoordinator, key type 1), starts each transaction
with InitProducerId (an epoch bump, which also fences and aborts whatever an earlier attempt
left open), adds one or two partitions (AddPartitionsToTxn), writes one transactional batch of
a few values to each with acks=all, then decides: commit if every batch was acknowledged (and
at random even then abort), abort otherwise, and sends EndTxn. Some EndTxns are abandoned a
moment after they are sent (the application killed: its connection closes with the request in
flight); the next transaction starts over with InitProducerId, which fences what is left. The coordinator writes the
markers to the partitions' leaders over the simulated network (WriteTxnMarkers), its
``__transaction_state`` partition fails over with the brokers, and its requests are retried
on the coordinator errors a client retries.

:class:`ReadCommittedConsumer` reads every partition from the start with Fetch v4
READ_COMMITTED and drops aborted records as a client does (the aborted transactions of each
answer, the ABORT markers).

:class:`TxnChecker` holds the invariants:

* a value the consumer is handed belongs to no transaction, or to one already decided to
  commit, and lies below the answer's last stable offset, which is at most its high watermark;
* (``Checker.final_check``) every acknowledged value of a transaction is in its log at its
  offset, committed or aborted (its attempts are acks=all attempts like any other);
* at the end of the run, the cluster long settled, the transactional id is usable: an
  InitProducerId was answered NONE in the last few seconds (a coordinator that left a
  transition pending when a client went away answers CONCURRENT_TRANSACTIONS for good);
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
from minikafka.replication.simulation.workload import PRODUCE_TIMEOUT_MS, TOPIC, Attempt, Client, Consumer

COMMIT_SHARE = 0.7  # of the transactions whose batches were all acknowledged
READ_COMMITTED = 1
TRANSACTION_TIMEOUT_MS = 60000
# How long (virtual seconds) a transactional request is retried before the client gives up on it.
COORDINATOR_PATIENCE_S = 30.0
COORDINATOR_ERRORS = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
RETRIED = COORDINATOR_ERRORS | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS}
# Of the EndTxns, the share abandoned (virtual seconds) after sending, as a killed application's.
ABANDON_SHARE = 0.3
ABANDON_AFTER_S = (0.0, 0.004)
# At the end of the run, the id's InitProducerId was answered NONE this recently (virtual s).
USABLE_WITHIN_S = 5.0


class TxnProducer(Client):
    def __init__(self, sim, name: str) -> None:
        super().__init__(sim, name)
        # Its own generator for its choices (a seed still replays: this one is seeded too).
        self.rng = random.Random(f"{sim.seed}-{name}")
        self.coordinator: int | None = None
        # When an InitProducerId was last answered NONE (virtual time).
        self.last_initialized = float("-inf")

    async def run(self) -> None:
        checker = self.sim.checker.transactions
        number = 0
        while True:
            answer = await self.to_coordinator(ApiKey.INIT_PRODUCER_ID, 0, {
                "transactional_id": self.name, "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS})
            if answer is None or answer.error_code:
                self.sim.trace("txn", f"{self.name} InitProducerId: "
                                      f"{'no answer' if answer is None else ErrorCode(answer.error_code).name}")
                await trio.sleep(0.2)
                continue
            producer_id, epoch = answer.producer_id, answer.producer_epoch
            self.last_initialized = trio.current_time()
            number += 1
            txn = f"{self.name}{number}"
            partitions = self.rng.sample(range(self.sim.partitions), self.rng.randint(1, 2))
            added = await self.to_coordinator(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
                "v3_and_below_transactional_id": self.name, "v3_and_below_producer_id": producer_id,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": TOPIC, "partitions": partitions}]})
            acknowledged = added is not None and not any(
                p.partition_error_code for t in added.results_by_topic_v3_and_below for p in t.results_by_partition)
            if acknowledged:
                for partition in partitions:
                    values = [f"{txn}-p{partition}-{i}".encode() for i in range(self.rng.randint(1, 3))]
                    checker.started(txn, values)
                    acknowledged &= await self.produce(producer_id, epoch, partition, values)
            commit = acknowledged and self.rng.random() < COMMIT_SHARE
            checker.decided(txn, commit)
            abandon_after = self.rng.uniform(*ABANDON_AFTER_S) if self.rng.random() < ABANDON_SHARE else None
            ended = await self.to_coordinator(ApiKey.END_TXN, 0, {
                "transactional_id": self.name, "producer_id": producer_id, "producer_epoch": epoch,
                "committed": commit}, abandon_after=abandon_after)
            outcome = "no answer" if ended is None else ErrorCode(ended.error_code).name
            if ended is None and abandon_after is not None:
                outcome = "abandoned"
            checker.figures["EndTxn abandoned" if outcome == "abandoned" else f"EndTxn answered {outcome}"] += 1
            if ended is not None and ended.error_code == ErrorCode.NONE:
                checker.ended[txn] = producer_id
            self.sim.trace("txn", f"{txn} (producer {producer_id} epoch {epoch}) {'commits' if commit else 'aborts'} "
                                  f"on p{partitions}: {outcome}")
            await trio.sleep(self.rng.uniform(0.05, 0.2))

    async def to_coordinator(self, api_key: int, version: int, body: dict, *, abandon_after: float | None = None):
        """The answer of the transactional id's coordinator, looked up again and retried on
        the errors a client retries (a coordinator moving, loading, or busy ending the last
        transaction); None if there is none within the client's patience. ``abandon_after``:
        the request is sent once and its connection closed if no answer came that soon."""
        deadline = trio.current_time() + COORDINATOR_PATIENCE_S
        while trio.current_time() < deadline:
            if self.coordinator is None:
                broker = self.rng.choice(self.sim.broker_ids)
                try:
                    found = await self.channel(broker).request(ApiKey.FIND_COORDINATOR, 1,
                                                               {"key": self.name, "key_type": 1})
                except ChannelError:
                    await trio.sleep(0.1)
                    continue
                if found.error_code:
                    self.sim.trace("txn", f"{self.name} FindCoordinator via {broker}: {ErrorCode(found.error_code).name}")
                    await trio.sleep(0.1)
                    continue
                self.coordinator = found.node_id
            try:
                answer = await self.channel(self.coordinator).request(api_key, version, body, timeout_s=abandon_after)
            except ChannelError:
                self.coordinator = None
                if abandon_after is not None:
                    return None
                continue
            if abandon_after is not None:
                return answer
            errors = _error_codes(answer)
            self.sim.trace("txn", f"{self.name} {ApiKey(api_key).name} via {self.coordinator}: "
                                  f"{[ErrorCode(e).name for e in errors]}")
            if errors & COORDINATOR_ERRORS:
                self.coordinator = None
            if errors & RETRIED:
                await trio.sleep(0.1)
                continue
            return answer
        return None

    async def produce(self, producer_id: int, epoch: int, partition: int, values: list[bytes]) -> bool:
        """One attempt, no retry: a transaction whose batch is not acknowledged aborts."""
        leader = await self.find_leader(partition)
        if leader is None:
            return False
        now = self.sim.clock.time_ms()
        attempts = [Attempt(value, partition, -1, leader, trio.current_time()) for value in values]
        for value in values:
            self.sim.checker.sent(value)
        self.sim.checker.attempts.extend(attempts)
        batch = build_record_batch([(None, value, now, ()) for value in values], producer_id=producer_id,
                                   producer_epoch=epoch, base_sequence=0, transactional=True)
        body = {"transactional_id": self.name, "acks": -1, "timeout_ms": PRODUCE_TIMEOUT_MS, "topic_data": [
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


def _error_codes(answer) -> set[int]:
    if hasattr(answer, "results_by_topic_v3_and_below"):
        return {p.partition_error_code for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}
    return {answer.error_code}


class ReadCommittedConsumer(Consumer):
    """Reads every partition from the start with READ_COMMITTED, as a client does."""

    FETCH_VERSION = 4
    ISOLATION = {"isolation_level": READ_COMMITTED}

    def take(self, answer, partition: int, offset: int, positions: dict[int, int], leader: int) -> bool:
        """As the Java consumer: the aborted transactions of the answer from their first
        offsets on, until their ABORT markers, and every marker, are dropped."""
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
        # Transactions whose EndTxn the coordinator answered NONE -> their producer id: their
        # markers must follow, and a commit's must be COMMIT markers.
        self.ended: dict[str, int] = {}
        self.figures: Counter[str] = Counter()

    def violation(self, key: tuple, message: str) -> None:
        self.checker.violation(("txn", *key), message)

    def check_usable(self, producer: TxnProducer) -> None:
        """At the end of the workload, long after the cluster settled: the id's InitProducerId
        was answered NONE within the last ``USABLE_WITHIN_S`` (healthy, the producer starts a
        transaction every few tenths of a second)."""
        quiet = trio.current_time() - producer.last_initialized
        if quiet > USABLE_WITHIN_S:
            last = "never" if producer.last_initialized == float("-inf") else f"at {producer.last_initialized:.1f} s"
            self.violation(("stuck", producer.name),
                           f"{producer.name}: no InitProducerId answered NONE for {quiet:.1f} virtual s at the end of "
                           f"the run, the cluster settled (last {last}): a transition left pending?")

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

    def final_check(self, partition: int, leader_replica, leader_log: dict[int, bytes], replicas) -> None:
        """Once the faults healed, every transaction the coordinator answered EndTxn for is
        closed in the leader's log by its markers: none still open, and no value of one
        answered as committed inside an aborted range of its producer. And the replicas holding
        the leader's whole log agree with it on its transactions."""
        expected = _transactions(leader_replica.log)
        open_txns, aborted = expected
        for first_offset, producer_id in open_txns.items():
            txn = self.transaction_of.get(leader_log.get(first_offset))
            if txn in self.ended:
                self.violation(("open-after-end", partition, first_offset),
                               f"p{partition}: transaction {txn} (producer {producer_id}, from offset {first_offset}) "
                               f"is still open after its EndTxn was answered and the faults healed")
        for offset, value in leader_log.items():
            txn = self.transaction_of.get(value)
            if txn not in self.ended or self.decisions.get(txn) is not True:
                continue
            producer_id = self.ended[txn]
            if any(p == producer_id and first <= offset <= last for p, first, last in aborted):
                self.violation(("committed-aborted", value),
                               f"p{partition}@{offset}: {value!r} of transaction {txn}, whose commit the coordinator "
                               f"answered, lies in an aborted transaction of producer {producer_id}")
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

