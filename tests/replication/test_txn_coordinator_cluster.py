"""The transaction coordinator on a real 3-broker cluster (issue 26): ``__transaction_state``
is created through ZooKeeper and the controller, as ``__consumer_offsets`` is, replicated with
``transaction.state.log.replication.factor`` and its ``min.insync.replicas`` from
``transaction.state.log.min.isr`` (Kafka 2.8's TransactionStateManager / AdminZkClient)."""

from __future__ import annotations

import select
import socket
import time

import pytest

from minikafka.broker.transactions.state import TxnState, decode_txn_key, decode_txn_value
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.framing import encode_request
from minikafka.protocol.records import iter_records
from minikafka.testing import kafka_request

from .test_admin_cluster import _described

pytestmark = pytest.mark.timeout(300)

TXN_TOPIC = "__transaction_state"
TXN_PARTITIONS = 3


def find_txn_coordinator(broker, transactional_id: str):
    return kafka_request(broker.bootstrap, ApiKey.FIND_COORDINATOR, 1, {"key": transactional_id, "key_type": 1})


def test_transaction_state_topic_is_created_replicated_through_the_controller(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(3, **{"transaction.state.log.num.partitions": str(TXN_PARTITIONS),
                                               "transaction.state.log.min.isr": "2"})
    # Any broker's first FindCoordinator for a transactional id creates the topic.
    find_txn_coordinator(cluster.broker(2), "tx")
    deadline = time.monotonic() + 60
    while True:
        topics = [t for t in cluster.metadata([TXN_TOPIC], via=cluster.broker(1)).topics if t.error_code == 0]
        if topics and len(topics[0].partitions) == TXN_PARTITIONS and all(
                p.leader_id > 0 and len(p.isr_nodes) == 3 for p in topics[0].partitions):
            break
        assert time.monotonic() < deadline, "no replicated __transaction_state"
        time.sleep(0.2)
    (topic,) = topics
    assert topic.is_internal
    assert all(sorted(p.replica_nodes) == [1, 2, 3] for p in topic.partitions)
    for broker_id in cluster.ids:
        broker = cluster.broker(broker_id)
        assert _described(broker, TXN_TOPIC, "min.insync.replicas") == "2"
        assert _described(broker, TXN_TOPIC, "cleanup.policy") == "compact"
        assert _described(broker, TXN_TOPIC, "unclean.leader.election.enable") == "false"
        # Not created a second time, nor locally: every broker's answer leaves it as it is.
        assert find_txn_coordinator(broker, "tx").error_code in (
            ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


# ---------------------------------------------------------------- transactions across failures

TOPIC = "t"
PARTITIONS = 3


def txn_coordinator_of(cluster, transactional_id: str, timeout: float = 60.0) -> int:
    """The transaction coordinator's node id, once some live broker names one."""
    deadline = time.monotonic() + timeout
    while True:
        for broker in cluster.brokers:
            if broker.running:
                try:
                    answer = find_txn_coordinator(broker, transactional_id)
                except OSError:
                    continue
                if answer.error_code == ErrorCode.NONE:
                    return answer.node_id
        assert time.monotonic() < deadline, f"no coordinator for {transactional_id!r}"
        time.sleep(0.2)


class Transactions:
    """A confluent-kafka transactional producer writing numbered transactions, one record per
    partition each ("<n>-<partition>"), and what each transaction's outcome was as the client
    saw it: committed (commit_transaction returned), aborted (abort_transaction returned), or
    unknown (the producer failed fatally mid-transaction and was replaced, which fences it)."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.committed: set[int] = set()
        self.aborted: set[int] = set()
        self.unknown: set[int] = set()
        self.producer = self._new_producer()

    def _new_producer(self):
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                             "transaction.timeout.ms": 60000, "linger.ms": 5})
        producer.init_transactions(60)
        return producer

    def run(self, number: int, *, abort: bool = False, before_end=None) -> None:
        from confluent_kafka import KafkaException

        try:
            self.producer.begin_transaction()
            for partition in range(PARTITIONS):
                self.producer.produce(TOPIC, value=f"{number}-{partition}".encode(), partition=partition)
            self.producer.flush(60)
            if before_end is not None:
                before_end()
            self._end(abort)
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                self._end(True)
                self.aborted.add(number)
                return
            # Fatal for this producer instance: a new one fences it (InitProducerId aborts
            # whatever it left open, or finds it already completed).
            self.unknown.add(number)
            self.producer = self._new_producer()
            return
        (self.aborted if abort else self.committed).add(number)

    def _end(self, abort: bool) -> None:
        from confluent_kafka import KafkaException

        end = self.producer.abort_transaction if abort else self.producer.commit_transaction
        for _ in range(30):
            try:
                end(60)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                time.sleep(0.5)
        raise AssertionError("the transaction never ended")


def last_stable_offsets(cluster) -> dict[int, tuple[int, int]]:
    """Per partition of the topic: (last stable offset, high watermark) from its leader."""
    out = {}
    for partition in range(PARTITIONS):
        leader = cluster.broker(cluster.leader(TOPIC, partition))
        answers = [kafka_request(leader.bootstrap, ApiKey.LIST_OFFSETS, 2, {
            "replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
            for isolation in (1, 0)]
        entries = [answer.topics[0].partitions[0] for answer in answers]
        assert not any(entry.error_code for entry in entries)
        out[partition] = (entries[0].offset, entries[1].offset)
    return out


def committed_records(cluster) -> list[str]:
    """Every record a read_committed consumer reads, up to each partition's last stable offset
    once no transaction is open any more."""
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + 60
    while True:
        offsets = last_stable_offsets(cluster)
        if all(lso == hw for lso, hw in offsets.values()):
            break
        assert time.monotonic() < deadline, f"transactions left open: (LSO, HW) per partition {offsets}"
        time.sleep(0.5)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: list[str] = []
    positions = dict.fromkeys(range(PARTITIONS), 0)
    try:
        while any(positions[p] < offsets[p][0] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline + 60, f"read up to {positions} of {offsets}"
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    values.append(message.value().decode())
            for tp in consumer.position([TopicPartition(TOPIC, p) for p in range(PARTITIONS)]):
                if tp.offset >= 0:
                    positions[tp.partition] = tp.offset
    finally:
        consumer.close()
    return values


def check_atomic(transactions: Transactions, values: list[str]) -> None:
    """Each transaction visible whole or not at all, at most once; committed ones whole,
    aborted ones not at all."""
    assert len(values) == len(set(values)), "a record read twice"
    seen: dict[int, set[int]] = {}
    for value in values:
        number, partition = map(int, value.split("-"))
        seen.setdefault(number, set()).add(partition)
    partial = {number: parts for number, parts in seen.items() if len(parts) != PARTITIONS}
    assert not partial, f"transactions visible in part: {partial}"
    assert transactions.committed <= set(seen), f"committed but not visible: {transactions.committed - set(seen)}"
    assert not transactions.aborted & set(seen), f"aborted but visible: {transactions.aborted & set(seen)}"


def txn_cluster(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(3, **{"transaction.state.log.num.partitions": str(TXN_PARTITIONS)})
    cluster.create_topic(TOPIC, PARTITIONS, 3)
    # Kafka's assignment puts each partition's first replica, its leader, on another broker:
    # every commit has the coordinator write one marker itself and send two.
    assert sorted(cluster.leader(TOPIC, partition) for partition in range(PARTITIONS)) == cluster.ids
    return cluster


def test_transactions_commit_and_abort_on_partitions_led_by_other_brokers(minikafka_cluster_factory):
    cluster = txn_cluster(minikafka_cluster_factory)
    transactions = Transactions(cluster.bootstrap, "tx-markers")
    for number in range(20):
        transactions.run(number, abort=number % 4 == 3)
    assert len(transactions.committed) == 15 and len(transactions.aborted) == 5
    values = committed_records(cluster)
    check_atomic(transactions, values)
    assert sorted(values) == sorted(f"{n}-{p}" for n in transactions.committed for p in range(PARTITIONS))
    check_replicas(cluster)


@pytest.mark.parametrize("victim", ["coordinator", "partition leader"])
def test_a_broker_killed_mid_transaction_leaves_every_transaction_whole_or_absent(minikafka_cluster_factory, victim):
    """kill -9 of the transaction coordinator's broker, or of a partition's leader, between a
    transaction's records and its commit: the client commits through the new coordinator
    (or its markers reach the partition's new leader); every transaction the client saw
    committed is visible whole, every aborted one not at all, none in part, none twice."""
    cluster = txn_cluster(minikafka_cluster_factory)
    transactions = Transactions(cluster.bootstrap, f"tx-{victim.replace(' ', '-')}")
    for number in range(10):
        transactions.run(number, abort=number % 5 == 4)
    coordinator = txn_coordinator_of(cluster, transactions.transactional_id)
    killed = coordinator if victim == "coordinator" else next(
        cluster.leader(TOPIC, p) for p in range(PARTITIONS) if cluster.leader(TOPIC, p) != coordinator)
    transactions.run(10, before_end=lambda: cluster.kill(killed))
    for number in range(11, 30):
        transactions.run(number, abort=number % 5 == 4)
    if victim == "coordinator":
        assert txn_coordinator_of(cluster, transactions.transactional_id) != killed
    check_outcomes(cluster, transactions, 30)
    cluster.restart(killed, clean=False)
    check_replicas(cluster)


@pytest.mark.parametrize("fault", ["paused", "cut off"])
def test_a_coordinator_paused_or_cut_off_mid_transaction_is_replaced_without_splitting_one(
        minikafka_cluster_factory, fault):
    """The coordinator's broker SIGSTOPped (then resumed: a zombie that still believes it
    coordinates), or cut off from ZooKeeper and the other brokers while clients still reach it,
    between a transaction's records and its commit: its successor finishes the transactions,
    the old one commits nothing without its replicas, and no transaction is split."""
    cluster = txn_cluster(minikafka_cluster_factory)
    transactions = Transactions(cluster.bootstrap, f"tx-{fault.replace(' ', '-')}")
    for number in range(10):
        transactions.run(number, abort=number % 5 == 4)
    coordinator = txn_coordinator_of(cluster, transactions.transactional_id)
    if fault == "paused":
        transactions.run(10, before_end=lambda: cluster.pause(coordinator))
    else:
        transactions.run(10, before_end=lambda: cluster.partition([coordinator]))
    for number in range(11, 20):
        transactions.run(number, abort=number % 5 == 4)
    if fault == "paused":
        cluster.resume(coordinator)
    else:
        cluster.heal()
    for number in range(20, 30):
        transactions.run(number, abort=number % 5 == 4)
    check_outcomes(cluster, transactions, 30)
    check_replicas(cluster)


def test_a_client_gone_while_its_end_txn_awaits_replicas_leaves_nothing_pending(minikafka_cluster_factory):
    """The producer's connection closes (the application killed) while its EndTxn's
    PrepareCommit waits for the followers of ``__transaction_state``: the coordinator still
    finishes what it logged (markers, then CompleteCommit), as Kafka's append callback runs
    whatever became of the request. Before: the request's cancellation left the transition
    pending, and every InitProducerId of the id was answered CONCURRENT_TRANSACTIONS for good."""
    cluster = txn_cluster(minikafka_cluster_factory)
    transactional_id = "tx-gone"
    started = init_producer_id(cluster, transactional_id)
    assert started.error_code == ErrorCode.NONE
    producer_id, epoch = started.producer_id, started.producer_epoch
    coordinator = cluster.broker(txn_coordinator_of(cluster, transactional_id))
    added = kafka_request(coordinator.bootstrap, ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": list(range(PARTITIONS))}]})
    assert {r.partition_error_code for t in added.results_by_topic_v3_and_below for r in t.results_by_partition} == {0}
    followers = [broker_id for broker_id in cluster.ids if cluster.broker(broker_id) is not coordinator]
    state_log = next(path for path in coordinator.log_dir.glob(f"{TXN_TOPIC}-*")
                     if any(key == transactional_id for key, _ in txn_states(path)))
    for follower in followers:
        cluster.pause(follower)
    try:
        with socket.create_connection((coordinator.host, coordinator.port)) as client:
            client.sendall(encode_request(ApiKey.END_TXN, 0, 1, "gone", {
                "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": epoch,
                "committed": True}))
            deadline = time.monotonic() + 10
            while (transactional_id, TxnState.PREPARE_COMMIT) not in txn_states(state_log):
                assert time.monotonic() < deadline, "the coordinator did not log PrepareCommit"
                time.sleep(0.01)
            # Logged by the leader, not acknowledged: the followers cannot fetch it.
            assert not select.select([client], [], [], 0)[0], "EndTxn answered before its replicas had it"
    finally:
        for follower in followers:
            cluster.resume(follower)
    answer = init_producer_id(cluster, transactional_id, timeout=30)
    assert answer.error_code == ErrorCode.NONE and answer.producer_epoch == epoch + 1
    states = [state for key, state in txn_states(state_log) if key == transactional_id]
    assert states[-3:] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT, TxnState.EMPTY]


def txn_states(partition_dir) -> list[tuple[str, TxnState]]:
    """(transactional id, state) of each event in a ``__transaction_state`` replica's files."""
    states = []
    for segment in sorted(partition_dir.glob("*.log")):
        for record in iter_records(segment.read_bytes()):
            if record.value is not None:
                key = decode_txn_key(record.key)
                states.append((key, decode_txn_value(key, record.value).state))
    return states


def check_outcomes(cluster, transactions: Transactions, count: int) -> None:
    assert len(transactions.committed) + len(transactions.aborted) + len(transactions.unknown) == count
    assert len(transactions.committed) >= count * 2 // 3
    check_atomic(transactions, committed_records(cluster))


def check_replicas(cluster) -> None:
    """Every replica of the topic holds the same bytes below the high watermark."""
    cluster.wait_for_full_isr([TOPIC])
    offsets = last_stable_offsets(cluster)
    replicas = cluster.replicas_below_high_watermark({(TOPIC, p): hw for p, (_, hw) in offsets.items()})
    assert all(len(set(by_broker.values())) == 1 for by_broker in replicas.values()), "replicas differ"


def init_producer_id(cluster, transactional_id: str, timeout: float = 60.0):
    """InitProducerId at the id's coordinator, looked up again while it moves or loads."""
    deadline = time.monotonic() + timeout
    while True:
        broker = cluster.broker(txn_coordinator_of(cluster, transactional_id))
        try:
            answer = kafka_request(broker.bootstrap, ApiKey.INIT_PRODUCER_ID, 0,
                                   {"transactional_id": transactional_id, "transaction_timeout_ms": 60000})
        except OSError:
            answer = None
        if answer is not None and answer.error_code not in (
                ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.CONCURRENT_TRANSACTIONS):
            return answer
        assert time.monotonic() < deadline, f"InitProducerId: {answer and ErrorCode(answer.error_code).name}"
        time.sleep(0.2)


def test_every_replica_snapshots_the_committed_state_and_the_next_coordinator_loads_it(minikafka_cluster_factory):
    """Every replica of a ``__transaction_state`` partition, leader or follower, folds the
    committed log into a snapshot every ``transaction.state.log.snapshot.interval.events``;
    after kill -9 of the coordinator its successor loads the newest one plus the events after
    it, and the id carries on at the next epoch of the same producer id."""
    cluster = minikafka_cluster_factory(3, **{"transaction.state.log.num.partitions": "1",
                                              "transaction.state.log.snapshot.interval.events": "10"})
    for _ in range(25):
        answer = init_producer_id(cluster, "snap")
        assert answer.error_code == ErrorCode.NONE
    producer_id, epoch = answer.producer_id, answer.producer_epoch
    assert epoch == 24
    snapshot_dirs = [cluster.broker(b).log_dir / f"{TXN_TOPIC}-0" / "group-snapshots" for b in cluster.ids]
    deadline = time.monotonic() + 30
    while not all(any(d.glob("*.snapshot")) if d.is_dir() else False for d in snapshot_dirs):
        assert time.monotonic() < deadline, f"snapshots: {[sorted(p.name for p in d.glob('*')) for d in snapshot_dirs]}"
        time.sleep(0.2)
    coordinator = txn_coordinator_of(cluster, "snap")
    cluster.kill(coordinator)
    answer = init_producer_id(cluster, "snap")
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (ErrorCode.NONE, producer_id, epoch + 1)
    successor = txn_coordinator_of(cluster, "snap")
    assert successor != coordinator
    assert f"loaded {TXN_TOPIC}-0: snapshot at offset" in cluster.broker(successor).stderr_since_start()
