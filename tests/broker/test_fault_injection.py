"""Injected errors and delays (broker/fault_injection.py) on an in-process broker, over real
sockets: where each API's error lands in a well-formed response, what still gets served for
real, and the control channel (broker/control.py) that queues them."""

from __future__ import annotations

import json

import pytest
import trio

from minikafka.broker.fault_injection import FaultError, parse_api, parse_error_code
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.fixture
async def faulty(start_broker):
    """A broker started for tests (its control port on a free port); its topics are magic 1,
    which the Fetch v0 slot reads down-converted."""
    return await start_broker({"log.message.format.version": "0.10.2"}, **{"minikafka.test.control.port": "0"})


@pytest.fixture
async def faulty_client(faulty, connect):
    return await connect(faulty)


class ControlLines:
    """The control channel spoken line by line over a trio socket."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def ask(self, command) -> dict:
        line = command if isinstance(command, bytes) else json.dumps(command).encode()
        await self.stream.send_all(line + b"\n")
        while b"\n" not in self.buffer:
            data = await self.stream.receive_some(65536)
            assert data, "control channel closed"
            self.buffer += data
        answer, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(answer)


def test_names_and_numbers_of_apis_and_errors():
    assert parse_api("Produce") is ApiKey.PRODUCE
    assert parse_api("list_offsets") is parse_api("ListOffsets") is parse_api("Offsets") is ApiKey.LIST_OFFSETS
    assert parse_api("GroupCoordinator") is ApiKey.FIND_COORDINATOR
    assert parse_api(1) is parse_api("1") is ApiKey.FETCH
    assert parse_error_code("NOT_LEADER_FOR_PARTITION") == parse_error_code("not_leader_or_follower") == 6
    assert parse_error_code(6) == parse_error_code("6") == 6
    assert parse_error_code("GROUP_COORDINATOR_NOT_AVAILABLE") == 15
    assert parse_error_code(-1) == ErrorCode.UNKNOWN_SERVER_ERROR
    for bad_api in ("Produse", 99, 1000, True, None):
        with pytest.raises(FaultError):
            parse_api(bad_api)
    for bad_error in ("NOT_A_KAFKA_ERROR", 40000, True, None, 1.5):
        with pytest.raises(FaultError):
            parse_error_code(bad_error)


async def test_off_unless_started_for_tests(start_broker, tmp_path):
    broker = await start_broker(**{"log.dirs": str(tmp_path / "plain")})
    faulty = await start_broker(**{"log.dirs": str(tmp_path / "faulty"), "minikafka.test.control.port": "0"})
    assert broker.faults is None and broker.control_address is None
    assert faulty.faults is not None and faulty.control_address[0] == "127.0.0.1"
    assert faulty.control_address[1] not in (0, faulty.port)


async def test_control_channel_queues_answers_and_refuses_bad_commands(faulty):
    control = ControlLines(await trio.open_tcp_stream(*faulty.control_address))
    assert await control.ask({"op": "inject", "api": "Produce", "errors": ["NOT_LEADER_FOR_PARTITION", 19]}) == {"ok": True}
    assert await control.ask({"op": "delay", "api": "Fetch", "ms": 10, "count": 2, "topic": "t", "partition": 0}) == {"ok": True}
    status = await control.ask({"op": "status"})
    assert status["ok"] and status["served"] == []
    assert status["pending"] == [
        {"api": "Produce", "topic": None, "partition": None,
         "faults": [{"error": "NOT_LEADER_OR_FOLLOWER", "ms": 0, "drop_response": False},
                    {"error": "NOT_ENOUGH_REPLICAS", "ms": 0, "drop_response": False}]},
        {"api": "Fetch", "topic": "t", "partition": 0,
         "faults": [{"error": "NONE", "ms": 10, "drop_response": False},
                    {"error": "NONE", "ms": 10, "drop_response": False}]}]
    refused = [
        b"not json",
        b"[1, 2]",
        {"op": "explode"},
        {"op": "inject", "api": "Produce", "errors": []},
        {"op": "inject", "api": "Produce", "errors": ["NO_SUCH_ERROR"]},
        {"op": "inject", "api": "Nope", "errors": [6]},
        {"op": "inject", "api": "Heartbeat", "errors": [6], "topic": "t"},
        {"op": "inject", "api": "Produce", "errors": [6], "partition": 0},
        {"op": "inject", "api": "Produce", "errors": [6], "ms": -5},
        {"op": "inject", "api": "Produce", "errors": [6], "colour": "red"},
        {"op": "delay", "api": "Fetch", "ms": 10, "count": 0},
        {"op": "delay", "api": "Fetch"},
        {"op": "drop_response", "api": "Produce", "count": 0},
    ]
    for command in refused:
        answer = await control.ask(command)
        assert answer["ok"] is False and answer["error"], command
    assert await control.ask({"op": "clear", "api": "Fetch"}) == {"ok": True, "cleared": 2}
    assert [q["api"] for q in (await control.ask({"op": "status"}))["pending"]] == ["Produce"]
    assert await control.ask({"op": "clear"}) == {"ok": True, "cleared": 2}
    await control.stream.aclose()


async def test_an_overlong_control_line_closes_only_that_connection(faulty, faulty_client, message_set):
    stream = await trio.open_tcp_stream(*faulty.control_address)
    with trio.fail_after(10):
        try:
            await stream.send_all(b"x" * 200_000)
            # The refusal may be lost to the reset from the bytes left unread.
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
    assert (await faulty_client.produce("still-up", 0, message_set(b"v"))).error_code == 0


async def test_produce_errors_in_order_then_the_real_answer(faulty, faulty_client, message_set):
    faulty.faults.inject("Produce", ["NOT_LEADER_FOR_PARTITION", ErrorCode.REQUEST_TIMED_OUT])
    first = await faulty_client.produce("p", 0, message_set(b"a"))
    second = await faulty_client.produce("p", 0, message_set(b"a"))
    third = await faulty_client.produce("p", 0, message_set(b"a"))
    assert [(r.error_code, r.base_offset) for r in (first, second, third)] == [
        (NOT_LEADER, -1), (ErrorCode.REQUEST_TIMED_OUT, -1), (0, 0)]
    assert faulty.faults.pending() == []
    assert [entry["errors"] for entry in faulty.faults.served] == [
        [{"topic": None, "partition": None, "error": "NOT_LEADER_OR_FOLLOWER"}],
        [{"topic": None, "partition": None, "error": "REQUEST_TIMED_OUT"}]]


def _produce_body(topic: str, partitions, records: bytes, acks: int = 1) -> dict:
    return {"acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": records} for p in partitions]}]}


async def test_a_partition_error_fills_its_slot_and_the_other_partitions_are_served(
        start_broker, connect, message_set):
    broker = await start_broker(**{"minikafka.test.control.port": "0", "num.partitions": "3"})
    client = await connect(broker)
    await client.metadata("three")
    broker.faults.inject("Produce", ["NOT_ENOUGH_REPLICAS"], topic="three", partition=1)
    # A request without partition 1 does not take the fault.
    response = await client.request(ApiKey.PRODUCE, 2, _produce_body("three", [0], message_set(b"a")))
    assert response.responses[0].partition_responses[0].error_code == 0
    assert len(broker.faults.pending()) == 1
    response = await client.request(ApiKey.PRODUCE, 2, _produce_body("three", [2, 1, 0], message_set(b"b")))
    [topic] = response.responses
    assert topic.name == "three"
    assert [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses] == [
        (2, 0, 0), (1, ErrorCode.NOT_ENOUGH_REPLICAS, -1), (0, 0, 1)]
    assert (await client.fetch("three", 1, 0)).high_watermark == 0  # nothing was written there
    assert broker.faults.pending() == []


async def test_a_failed_acks_0_produce_closes_the_connection_and_writes_nothing(
        faulty, faulty_client, connect, message_set):
    await faulty_client.produce("quiet", 0, message_set(b"kept"))
    faulty.faults.inject("Produce", [NOT_LEADER])
    await faulty_client.produce("quiet", 0, message_set(b"lost"), acks=0)
    with trio.fail_after(10):
        assert await faulty_client.closed_by_peer()
    other = await connect(faulty)
    assert (await other.fetch("quiet", 0, 0)).high_watermark == 1


async def test_a_dropped_response_closes_the_connection_after_the_request_was_served(
        faulty, faulty_client, connect, message_set):
    faulty.faults.drop_responses("Produce", topic="lossy")
    await faulty_client.metadata("lossy")
    await faulty_client.send(ApiKey.PRODUCE, 2, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "lossy", "partition_data": [{"index": 0, "records": message_set(b"written")}]}]})
    with trio.fail_after(10):
        assert await faulty_client.closed_by_peer()
    other = await connect(faulty)
    assert (await other.fetch("lossy", 0, 0)).high_watermark == 1  # appended all the same
    assert [entry["drop_response"] for entry in faulty.faults.served] == [True]


# (api, version, request body, how to read the partition slots of the response)
PER_PARTITION = [
    (ApiKey.FETCH, 0, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": [
        {"topic": "pp", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]},
     lambda r: [(p.partition_index, p.error_code, p.high_watermark) for t in r.responses for p in t.partitions],
     [(0, NOT_LEADER, -1)]),
    (ApiKey.FETCH, 3, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "topics": [
        {"topic": "pp", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]},
     lambda r: [(p.partition_index, p.error_code, p.high_watermark) for t in r.responses for p in t.partitions],
     [(0, NOT_LEADER, -1)]),
    (ApiKey.LIST_OFFSETS, 0, {"replica_id": -1, "topics": [
        {"name": "pp", "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}]}]},
     lambda r: [(p.partition_index, p.error_code, p.old_style_offsets) for t in r.topics for p in t.partitions],
     [(0, NOT_LEADER, [])]),
    (ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": "pp", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
     lambda r: [(p.partition_index, p.error_code, p.offset) for t in r.topics for p in t.partitions],
     [(0, NOT_LEADER, -1)]),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, {"topics": [
        {"topic": "pp", "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
     lambda r: [(p.partition, p.error_code, p.end_offset) for t in r.topics for p in t.partitions],
     [(0, NOT_LEADER, -1)]),
    (ApiKey.OFFSET_COMMIT, 2, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                               "retention_time_ms": -1, "topics": [
        {"name": "pp", "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}]},
     lambda r: [(p.partition_index, p.error_code) for t in r.topics for p in t.partitions],
     [(0, NOT_LEADER)]),
    (ApiKey.OFFSET_FETCH, 1, {"group_id": "g", "topics": [{"name": "pp", "partition_indexes": [0]}]},
     lambda r: [(p.partition_index, p.error_code, p.committed_offset) for t in r.topics for p in t.partitions],
     [(0, NOT_LEADER, -1)]),
]


@pytest.mark.parametrize("api, version, body, slots, expected", PER_PARTITION,
                         ids=[f"{api.name}-v{version}" for api, version, *_ in PER_PARTITION])
async def test_per_partition_apis_get_the_error_in_each_slot_then_the_real_answer(
        faulty, faulty_client, message_set, api, version, body, slots, expected):
    await faulty_client.produce("pp", 0, message_set(b"x"))
    faulty.faults.inject(api.name, [NOT_LEADER])
    assert slots(await faulty_client.request(api, version, body)) == expected
    assert [error for (_, error, *_) in slots(await faulty_client.request(api, version, body))] == [0]


async def test_offset_fetch_v2_for_every_partition_gets_a_top_level_error(faulty, faulty_client):
    faulty.faults.inject("OffsetFetch", ["NOT_COORDINATOR_FOR_GROUP"])
    response = await faulty_client.request(ApiKey.OFFSET_FETCH, 2, {"group_id": "g", "topics": None})
    assert (response.error_code, response.topics) == (ErrorCode.NOT_COORDINATOR, [])
    response = await faulty_client.request(ApiKey.OFFSET_FETCH, 2, {"group_id": "g", "topics": None})
    assert response.error_code == 0


async def test_top_level_and_per_name_apis(faulty, faulty_client):
    faulty.faults.inject("FindCoordinator", ["GROUP_COORDINATOR_NOT_AVAILABLE"])
    faulty.faults.inject("Heartbeat", ["REBALANCE_IN_PROGRESS"])
    faulty.faults.inject("CreateTopics", ["POLICY_VIOLATION"])
    faulty.faults.inject("DeleteTopics", ["REQUEST_TIMED_OUT"])
    coordinator = await faulty_client.request(ApiKey.FIND_COORDINATOR, 0, {"key": "g"})
    assert (coordinator.error_code, coordinator.node_id, coordinator.port) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
    heartbeat = await faulty_client.request(ApiKey.HEARTBEAT, 0, {"group_id": "g", "generation_id": 1, "member_id": "m"})
    assert heartbeat.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    create = {"topics": [{"name": "made", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                          "configs": []}], "timeout_ms": 1000}
    created = await faulty_client.request(ApiKey.CREATE_TOPICS, 0, create)
    assert [(t.name, t.error_code) for t in created.topics] == [("made", ErrorCode.POLICY_VIOLATION)]
    assert faulty.partitions.partition_count("made") is None
    assert [t.error_code for t in (await faulty_client.request(ApiKey.CREATE_TOPICS, 0, create)).topics] == [0]
    deleted = await faulty_client.request(ApiKey.DELETE_TOPICS, 0, {"topic_names": ["made"], "timeout_ms": 1000})
    assert [(t.name, t.error_code) for t in deleted.responses] == [("made", ErrorCode.REQUEST_TIMED_OUT)]
    assert faulty.partitions.partition_count("made") == 1
    assert (await faulty_client.request(ApiKey.FIND_COORDINATOR, 0, {"key": "g"})).error_code == 0


async def test_metadata_keeps_the_brokers_and_carries_the_error(faulty, faulty_client, message_set):
    await faulty_client.produce("meta", 0, message_set(b"x"))
    faulty.faults.inject("Metadata", ["LEADER_NOT_AVAILABLE"], topic="meta")
    faulty.faults.inject("Metadata", ["NOT_LEADER_FOR_PARTITION"], topic="meta", partition=0)
    # Another topic's request does not take the faults.
    other = await faulty_client.request(ApiKey.METADATA, 1, {"topics": [{"name": "other"}]})
    assert [t.error_code for t in other.topics] == [0]
    response = await faulty_client.request(ApiKey.METADATA, 1, {"topics": [{"name": "meta"}]})
    assert [(b.node_id, b.port) for b in response.brokers] == [(faulty.node_id, faulty.advertised_port)]
    [topic] = response.topics
    assert topic.error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(0, NOT_LEADER)]
    again = await faulty_client.request(ApiKey.METADATA, 1, {"topics": [{"name": "meta"}]})
    assert again.topics[0].error_code == 0 and again.topics[0].partitions[0].error_code == 0


async def test_a_delay_holds_back_its_request_not_other_connections(faulty, connect, message_set):
    slow, fast = await connect(faulty), await connect(faulty)
    faulty.faults.delay("Produce", 3000)
    await slow.send(ApiKey.PRODUCE, 2, _produce_body("order", [0], message_set(b"slow")))
    with trio.fail_after(10):
        while faulty.faults.pending():  # the slow request has taken its delay
            await trio.sleep(0.01)
    fast_result = await fast.produce("order", 0, message_set(b"fast"))
    slow_result = (await slow.receive()).body.responses[0].partition_responses[0]
    assert (fast_result.error_code, fast_result.base_offset) == (0, 0)
    assert (slow_result.error_code, slow_result.base_offset) == (0, 1)
    assert [entry["delay_ms"] for entry in faulty.faults.served] == [3000]


async def test_a_delayed_request_keeps_its_place_on_its_connection(faulty, faulty_client, message_set):
    await faulty_client.metadata("inline")
    faulty.faults.delay("Produce", 500)
    for value in (b"first", b"second"):
        await faulty_client.send(ApiKey.PRODUCE, 2, _produce_body("inline", [0], message_set(value)))
    offsets = [(await faulty_client.receive()).body.responses[0].partition_responses[0].base_offset
               for _ in range(2)]
    assert offsets == [0, 1]


async def test_a_fetch_with_an_injected_partition_error_does_not_long_poll_the_others(
        start_broker, connect):
    broker = await start_broker(**{"minikafka.test.control.port": "0", "num.partitions": "2"})
    client = await connect(broker)
    await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "two"}]})
    broker.faults.inject("Fetch", ["OFFSET_OUT_OF_RANGE"], topic="two", partition=1)
    body = {"replica_id": -1, "max_wait_ms": 60_000, "min_bytes": 1, "topics": [
        {"topic": "two", "partitions": [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1024}
                                        for p in (0, 1)]}]}
    with trio.fail_after(30):  # well under max_wait_ms: answered at once, as Kafka does on an error
        response = await client.request(ApiKey.FETCH, 2, body)
    assert [(p.partition_index, p.error_code, p.high_watermark) for p in response.responses[0].partitions] == [
        (0, 0, 0), (1, ErrorCode.OFFSET_OUT_OF_RANGE, -1)]
