"""The transaction coordinator over real sockets, request by request (Kafka 2.8's
TransactionCoordinator): InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, FindCoordinator key type 1, their errors and ACLs, and what
``__transaction_state`` holds across a restart."""

from __future__ import annotations

import pytest
import trio

from minikafka.broker.security.acl import Acl, AclStore
from minikafka.broker.transactions.state import TxnState
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode


def init_body(transactional_id: str | None, timeout_ms: int = 60000, **kip360) -> dict:
    return {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms, **kip360}


def add_body(tid: str, pid: int, epoch: int, *partitions: tuple[str, int]) -> dict:
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


def end_body(tid: str, pid: int, epoch: int, committed: bool) -> dict:
    return {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": committed}


def add_errors(answer) -> dict:
    return {(t.name, r.partition_index): ErrorCode(r.partition_error_code)
            for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition}


async def init(client, tid: str, version: int = 1, **kw):
    answer = await client.request(ApiKey.INIT_PRODUCER_ID, version, init_body(tid, **kw))
    return ErrorCode(answer.error_code), answer.producer_id, answer.producer_epoch


async def until_not_concurrent(request):
    """Retry a request answered CONCURRENT_TRANSACTIONS, as producers do."""
    while True:
        answer = await request()
        code = answer[0] if isinstance(answer, tuple) else ErrorCode(answer.error_code)
        if code != ErrorCode.CONCURRENT_TRANSACTIONS:
            return answer
        await trio.sleep(0.02)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
async def test_init_producer_id_bumps_the_epoch_of_a_transactional_id(client, version):
    error, pid, epoch = await init(client, "tx", version)
    assert (error, epoch) == (ErrorCode.NONE, 0)
    error, again, epoch = await init(client, "tx", version)
    assert (error, again, epoch) == (ErrorCode.NONE, pid, 1)
    error, other, epoch = await init(client, "other-tx", version)
    assert error == ErrorCode.NONE and other != pid and epoch == 0


async def test_find_coordinator_names_this_broker_for_a_transactional_id(broker, client):
    answer = await client.request(ApiKey.FIND_COORDINATOR, 1, {"key": "tx", "key_type": 1})
    assert (answer.error_code, answer.node_id, answer.port) == (ErrorCode.NONE, broker.node_id, broker.advertised_port)
    batched = await client.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["a", "b"]})
    assert [(c.key, c.error_code, c.node_id) for c in batched.coordinators] == [
        ("a", 0, broker.node_id), ("b", 0, broker.node_id)]
    assert broker.partitions.topics()["__transaction_state"] == 4


async def test_a_timeout_above_the_maximum_is_refused(start_broker, connect):
    broker = await start_broker({"transaction.max.timeout.ms": "1000"})
    client = await connect(broker)
    assert (await init(client, "tx", timeout_ms=1001))[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert (await init(client, "tx", timeout_ms=1000))[0] == ErrorCode.NONE


async def test_a_bumped_epoch_fences_the_older_producer_by_version(broker, client):
    await client.request(ApiKey.CREATE_TOPICS, 0, {"topics": [
        {"name": "t", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000})
    _, pid, old = await init(client, "tx")
    _, _, new = await init(client, "tx")
    for version, expected in ((1, ErrorCode.INVALID_PRODUCER_EPOCH), (2, ErrorCode.PRODUCER_FENCED)):
        answer = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, add_body("tx", pid, old, ("t", 0)))
        assert add_errors(answer) == {("t", 0): expected}
        answer = await client.request(ApiKey.END_TXN, version, end_body("tx", pid, old, True))
        assert answer.error_code == expected
    answer = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_body("tx", pid + 1, new, ("t", 0)))
    assert add_errors(answer) == {("t", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    answer = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3,
                                  add_body("tx", pid, new, ("t", 0), ("t", 1), ("missing", 0)))
    assert add_errors(answer) == {("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                                  ("t", 1): ErrorCode.OPERATION_NOT_ATTEMPTED,
                                  ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    answer = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_body("tx", pid, new, ("t", 0), ("t", 1)))
    assert add_errors(answer) == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE}
    coordinator = await broker.transactions()
    txn = coordinator._txn("tx")
    assert (txn.state, txn.partitions) == (TxnState.ONGOING, {("t", 0), ("t", 1)})
    # EndTxn in Empty is refused; InitProducerId while Ongoing fences and aborts.
    assert (await client.request(ApiKey.END_TXN, 3, end_body("other", pid, new, True))).error_code == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    error, _, _ = await init(client, "tx", 4)
    assert error == ErrorCode.CONCURRENT_TRANSACTIONS
    error, again, epoch = await until_not_concurrent(lambda: init(client, "tx", 4))
    # One bump fenced the open transaction's producer, the retry bumped again.
    assert (error, again, epoch) == (ErrorCode.NONE, pid, new + 2)
    assert txn.state == TxnState.EMPTY and not txn.partitions


async def test_end_txn_refuses_what_the_state_does_not_allow(broker, client):
    _, pid, epoch = await init(client, "tx")
    answer = await client.request(ApiKey.END_TXN, 3, end_body("tx", pid, epoch, True))
    assert answer.error_code == ErrorCode.INVALID_TXN_STATE   # Empty: nothing to end


async def test_kip_360_a_producer_bumps_its_own_epoch_unless_another_took_over(client):
    _, pid, epoch = await init(client, "tx", 4)
    error, same, bumped = await init(client, "tx", 4, producer_id=pid, producer_epoch=epoch)
    assert (error, same, bumped) == (ErrorCode.NONE, pid, epoch + 1)
    # A retry of that bump (its answer lost) gets the same epoch again.
    assert await init(client, "tx", 4, producer_id=pid, producer_epoch=epoch) == (ErrorCode.NONE, pid, epoch + 1)
    await init(client, "tx", 4)   # another producer: no expected id
    assert (await init(client, "tx", 4, producer_id=pid, producer_epoch=epoch + 1))[0] == ErrorCode.PRODUCER_FENCED
    # Below v4 a fenced producer hears INVALID_PRODUCER_EPOCH.
    assert (await init(client, "tx", 3, producer_id=pid + 7, producer_epoch=0))[0] == ErrorCode.INVALID_PRODUCER_EPOCH


async def test_transactional_requests_need_the_transactional_id_acls(start_broker, connect):
    broker = await start_broker({"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
                                 "allow.everyone.if.no.acl.found": "false"})
    client = await connect(broker)
    store = AclStore(broker.config.log_dirs[0])
    assert (await init(client, "tx"))[0] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    find = await client.request(ApiKey.FIND_COORDINATOR, 1, {"key": "tx", "key_type": 1})
    assert find.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    store.add("TransactionalId:tx", [Acl.make("User:ANONYMOUS", "Write")])
    store.add("Topic:t", [Acl.make("User:ANONYMOUS", "All")])
    store.add("Cluster:kafka-cluster", [Acl.make("User:ANONYMOUS", "Create")])
    await client.request(ApiKey.CREATE_TOPICS, 0, {"topics": [
        {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000})
    error, pid, epoch = await init(client, "tx")
    assert error == ErrorCode.NONE
    offsets = await client.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch, "group_id": "g"})
    assert offsets.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    answer = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_body("tx", pid, epoch, ("t", 0), ("u", 0)))
    assert add_errors(answer) == {("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                                  ("u", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    markers = await client.request(ApiKey.WRITE_TXN_MARKERS, 0, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": True, "coordinator_epoch": 0,
        "topics": [{"name": "t", "partition_indexes": [0]}]}]})
    assert [p.error_code for m in markers.markers for t in m.topics for p in t.partitions] == [
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    # A transactional Produce needs Write on its transactional id too.
    produced = await client.request(ApiKey.PRODUCE, 3, {
        "transactional_id": "not-mine", "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b""}]}]})
    assert [p.error_code for t in produced.responses for p in t.partition_responses] == [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]


async def test_the_state_survives_a_restart_from_snapshot_and_log(start_broker, connect, broker_config):
    broker = await start_broker()
    client = await connect(broker)
    _, pid, _ = await init(client, "kept")
    _, _, epoch = await init(client, "kept")
    coordinator = await broker.transactions()
    coordinator.shutdown()   # what a clean stop does: a snapshot of every partition
    coordinator.active = True
    _, _, epoch = await init(client, "kept")   # an event after the snapshot
    # A second broker process on the same data: only the logs and snapshots carry over.
    from minikafka.broker.transactions.coordinator import TransactionCoordinator

    reloaded = TransactionCoordinator(broker)
    await trio.to_thread.run_sync(reloaded.startup)
    txn = reloaded._txn("kept")
    assert (txn.producer_id, txn.producer_epoch, txn.state) == (pid, epoch, TxnState.EMPTY)


async def test_a_transaction_left_prepared_is_completed_by_the_next_coordinator(broker, client, nursery):
    """What a kill -9 between writing PrepareCommit and writing its markers leaves: the next
    coordinator to load ``__transaction_state`` writes the markers and completes it."""
    import time

    from minikafka.broker.transactions.coordinator import TransactionCoordinator
    from minikafka.broker.transactions.state import txn_key, txn_value
    from minikafka.protocol.record_batch import build_record_batch

    await client.request(ApiKey.CREATE_TOPICS, 0, {"topics": [
        {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000})
    _, pid, epoch = await init(client, "tx")
    answer = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_body("tx", pid, epoch, ("t", 0)))
    assert add_errors(answer) == {("t", 0): ErrorCode.NONE}
    batch = bytes(build_record_batch([(None, b"v", int(time.time() * 1000), ())], producer_id=pid,
                                     producer_epoch=epoch, base_sequence=0, transactional=True))
    produced = await client.produce("t", 0, batch, acks=-1, version=3)
    assert produced.error_code == ErrorCode.NONE
    log = broker.log_manager.get_log("t", 0)
    assert log.last_stable_offset == 0
    # PrepareCommit in the log, no marker written: the crash.
    coordinator = await broker.transactions()
    txn = coordinator._txn("tx")
    prepared = txn.prepare(TxnState.PREPARE_COMMIT, now=txn.update_ms)
    coordinator.partitions[coordinator.partition_for("tx")].append([(txn_key("tx"), txn_value(prepared))])
    txn.pending = None
    reloaded = TransactionCoordinator(broker)
    await trio.to_thread.run_sync(reloaded.startup)
    assert reloaded._txn("tx").state == TxnState.PREPARE_COMMIT
    await nursery.start(reloaded.run)
    with trio.fail_after(10):
        while reloaded._txn("tx").state != TxnState.COMPLETE_COMMIT:
            await trio.sleep(0.01)
    assert log.last_stable_offset == log.log_end_offset == 2   # the record and its COMMIT marker


async def test_an_idle_transactional_id_expires(start_broker, connect):
    broker = await start_broker({"transactional.id.expiration.ms": "1",
                                 "transaction.remove.expired.transaction.cleanup.interval.ms": "50",
                                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "50"})
    client = await connect(broker)
    _, pid, _ = await init(client, "idle")
    coordinator = await broker.transactions()
    with trio.fail_after(10):
        while coordinator._txn("idle") is not None:
            await trio.sleep(0.02)
    # Forgotten: the id starts afresh, with a new producer id at epoch 0.
    error, new_pid, epoch = await init(client, "idle")
    assert (error, epoch) == (ErrorCode.NONE, 0) and new_pid != pid


async def test_an_open_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(start_broker, connect):
    broker = await start_broker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "50"})
    client = await connect(broker)
    await client.request(ApiKey.CREATE_TOPICS, 0, {"topics": [
        {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000})
    _, pid, epoch = await init(client, "slow", timeout_ms=100)
    await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_body("slow", pid, epoch, ("t", 0)))
    coordinator = await broker.transactions()
    with trio.fail_after(10):
        while coordinator._txn("slow").state != TxnState.COMPLETE_ABORT:
            await trio.sleep(0.02)
    assert coordinator._txn("slow").producer_epoch == epoch + 1
    answer = await client.request(ApiKey.END_TXN, 3, end_body("slow", pid, epoch, True))
    assert answer.error_code == ErrorCode.PRODUCER_FENCED


async def test_describe_and_list_transactions(broker, client):
    await client.request(ApiKey.CREATE_TOPICS, 0, {"topics": [
        {"name": "t", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000})
    _, pid, epoch = await init(client, "open", timeout_ms=30000)
    await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_body("open", pid, epoch, ("t", 1), ("t", 0)))
    _, idle_pid, _ = await init(client, "idle")
    described = await client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["open", "nobody"]})
    first, missing = described.transaction_states
    assert (first.error_code, first.transaction_state, first.transaction_timeout_ms, first.producer_id,
            first.producer_epoch) == (ErrorCode.NONE, "Ongoing", 30000, pid, epoch)
    assert first.transaction_start_time_ms > 0
    assert [(t.topic, list(t.partitions)) for t in first.topics] == [("t", [0, 1])]
    assert missing.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    listed = await client.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": [], "producer_id_filters": []})
    assert sorted((s.transactional_id, s.producer_id, s.transaction_state) for s in listed.transaction_states) == [
        ("idle", idle_pid, "Empty"), ("open", pid, "Ongoing")]
    filtered = await client.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": ["Ongoing", "Sleeping"],
                                                                  "producer_id_filters": []})
    assert [s.transactional_id for s in filtered.transaction_states] == ["open"]
    assert list(filtered.unknown_state_filters) == ["Sleeping"]


async def test_snapshots_are_written_as_state_changes_and_loaded_with_the_events_after_them(
        start_broker, connect):
    from minikafka.broker.transactions import coordinator as coordinator_module

    broker = await start_broker({"transaction.state.log.num.partitions": "1",
                                 "transaction.state.log.snapshot.interval.events": "3"})
    client = await connect(broker)
    coordinator = await broker.transactions()
    partition = coordinator.partitions[0]
    for snapshots in (1, 2):
        for _ in range(3):
            _, pid, epoch = await init(client, "busy")
        with trio.fail_after(10):   # written in a worker thread
            while len(partition.snapshot_offsets) < snapshots:
                await trio.sleep(0.01)
    _, pid, epoch = await init(client, "busy")   # an event after the newest snapshot
    reloaded = coordinator_module.TransactionCoordinator(broker)
    await trio.to_thread.run_sync(reloaded.startup)
    assert (reloaded._txn("busy").producer_id, reloaded._txn("busy").producer_epoch) == (pid, epoch) == (pid, 6)
    assert reloaded.partitions[0].snapshot_offsets == [partition.snapshot_offsets[-1]]


async def test_add_offsets_puts_the_groups_offsets_partition_in_the_transaction(broker, client):
    _, pid, epoch = await init(client, "offsets-tx")
    answer = await client.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": "offsets-tx", "producer_id": pid, "producer_epoch": epoch, "group_id": "g"})
    assert answer.error_code == ErrorCode.NONE
    groups = await broker.groups()
    offsets_partition = ("__consumer_offsets", groups.partition_for("g"))
    coordinator = await broker.transactions()
    assert coordinator._txn("offsets-tx").partitions == {offsets_partition}
    log = broker.log_manager.get_log(*offsets_partition)
    end_before = log.log_end_offset
    answer = await client.request(ApiKey.END_TXN, 3, end_body("offsets-tx", pid, epoch, True))
    assert answer.error_code == ErrorCode.NONE
    with trio.fail_after(10):
        while coordinator._txn("offsets-tx").state != TxnState.COMPLETE_COMMIT:
            await trio.sleep(0.01)
    assert log.log_end_offset == end_before + 1   # the COMMIT marker
