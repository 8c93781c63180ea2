"""The connection loop over real sockets: pipelining, acks=0, bad bytes, idle timeout."""

from __future__ import annotations

import logging
import os
import struct

import pytest
import trio

from minikafka.broker.connection import MAX_QUEUED_REQUESTS
from minikafka.broker.handlers import HANDLERS
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.framing import encode_request
from minikafka.protocol.records import iter_records


async def produce_and_consume_work(client, topic: str, message_set) -> None:
    """The healthy connection's job while another connection misbehaves."""
    result = await client.produce(topic, 0, message_set(b"still-alive"))
    assert result.error_code == 0
    fetched = await client.fetch(topic, 0, result.base_offset)
    assert fetched.error_code == 0
    assert b"still-alive" in bytes(fetched.records)


async def test_pipelined_requests_are_answered_in_order(client, message_set):
    """Many requests sent before reading anything, a long-polling Fetch among them: every
    response comes back in request order."""
    topic = "pipelined"
    await client.produce(topic, 0, message_set(b"first"))
    sent = []
    sent.append(await client.send(ApiKey.FETCH, 2, {
        "replica_id": -1, "max_wait_ms": 300, "min_bytes": 1 << 20,
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}))
    for i in range(20):
        sent.append(await client.send(ApiKey.API_VERSIONS, i % 2, {}))
        sent.append(await client.send(ApiKey.METADATA, 1, {"topics": [{"name": topic}]}))
    received = [await client.receive() for _ in sent]
    assert [r.correlation_id for r in received] == sent
    assert received[0].api_key == ApiKey.FETCH
    assert bytes(received[0].body.responses[0].partitions[0].records)  # waited, then returned data


async def test_pipelined_produces_append_in_order(client, message_set):
    topic = "ordered"
    await client.metadata(topic)
    ids = []
    for i in range(30):
        ids.append(await client.send(ApiKey.PRODUCE, 2, {
            "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": message_set(b"%d" % i)}]}]}))
    offsets = [(await client.receive()).body.responses[0].partition_responses[0].base_offset for _ in ids]
    assert offsets == list(range(30))


async def test_acks_zero_gets_no_response(client, message_set):
    topic = "fire-and-forget"
    await client.produce(topic, 0, message_set(b"a"), acks=1)
    for value in (b"b", b"c"):
        assert await client.produce(topic, 0, message_set(value), acks=0) is None
    # The next response on the connection is the ListOffsets, not a produce acknowledgement.
    offsets = await client.request(ApiKey.LIST_OFFSETS, 1, {
        "replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert offsets.topics[0].partitions[0].offset == 3


async def test_failed_acks_zero_produce_closes_the_connection(broker, client, connect, message_set):
    await client.produce("acks0-refused", 0, b"\x00garbage-not-a-message-set", acks=0)
    assert await client.closed_by_peer()
    await produce_and_consume_work(await connect(), "after-acks0", message_set)


async def _assert_closed_while_other_works(connect, message_set, payload: bytes, name: str) -> None:
    healthy = await connect(client_id="healthy")
    await produce_and_consume_work(healthy, f"{name}-before", message_set)
    bad = await connect(client_id="bad")
    await bad.send_raw(payload)
    with trio.fail_after(10):
        assert await bad.closed_by_peer()
    await produce_and_consume_work(healthy, f"{name}-after", message_set)


async def test_garbage_closes_only_that_connection(broker, connect, message_set):
    await _assert_closed_while_other_works(connect, message_set, b"\x00\x00\x00\x10" + b"\xff" * 16, "garbage")


async def test_huge_size_prefix_closes_only_that_connection(broker, connect, message_set):
    await _assert_closed_while_other_works(connect, message_set, struct.pack(">i", 2**31 - 1) + b"x" * 100, "huge")


async def test_negative_size_prefix_closes_only_that_connection(broker, connect, message_set):
    await _assert_closed_while_other_works(connect, message_set, struct.pack(">i", -5), "negative")


async def test_unknown_api_key_closes_only_that_connection(broker, connect, message_set):
    frame = struct.pack(">hhih", 999, 0, 7, 4) + b"test"
    await _assert_closed_while_other_works(connect, message_set, struct.pack(">i", len(frame)) + frame, "unknown-key")


async def test_unsupported_version_closes_only_that_connection(broker, connect, message_set):
    frame = struct.pack(">hhih", ApiKey.FETCH, 99, 7, 4) + b"test"
    await _assert_closed_while_other_works(connect, message_set, struct.pack(">i", len(frame)) + frame, "bad-version")


async def test_well_framed_broken_body_closes_only_that_connection(broker, connect, message_set):
    good = encode_request(ApiKey.METADATA, 1, 1, "bad", {"topics": [{"name": "x"}]})
    # claim 1000 topics in an otherwise well-framed request
    header_end = 4 + 2 + 2 + 4 + 2 + len(b"bad")
    body = struct.pack(">i", 1000) + good[header_end + 4:]
    frame = good[4:header_end] + body
    await _assert_closed_while_other_works(connect, message_set, struct.pack(">i", len(frame)) + frame, "broken-body")


async def test_truncated_request_then_eof_closes_only_that_connection(broker, connect, message_set):
    frame = encode_request(ApiKey.METADATA, 1, 1, "bad", {"topics": [{"name": "x"}]})
    healthy = await connect()
    bad = await connect()
    await bad.send_raw(frame[: len(frame) // 2])
    await bad.stream.send_eof()
    with trio.fail_after(10):
        assert await bad.closed_by_peer()
    await produce_and_consume_work(healthy, "truncated", message_set)


async def test_requests_before_bad_bytes_are_answered(client):
    good = encode_request(ApiKey.API_VERSIONS, 0, 41, "c", {})
    await client.send_raw(good + b"\x00\x00\x00\x05hello")
    data = b""
    with trio.fail_after(10):
        while True:
            chunk = await client.stream.receive_some(65536)
            if not chunk:
                break
            data += chunk
    size, correlation_id = struct.unpack_from(">ii", data)
    assert correlation_id == 41 and len(data) == 4 + size


async def test_handler_crash_closes_only_that_connection(broker, connect, message_set, monkeypatch, caplog):
    async def crash(broker, request):
        raise ZeroDivisionError("handler bug")

    healthy = await connect()
    monkeypatch.setitem(HANDLERS, ApiKey.OFFSET_FOR_LEADER_EPOCH, crash)
    bad = await connect()
    await bad.send(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, {"topics": []})
    with trio.fail_after(10):
        assert await bad.closed_by_peer()
    await produce_and_consume_work(healthy, "after-crash", message_set)
    # The bug is logged with its cause, as the one unexpected error.
    [error] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "after an unexpected error" in error.getMessage()
    assert "handler bug" in caplog.text


async def wait_for_log(caplog, fragment: str) -> None:
    with trio.fail_after(10):
        while not any(fragment in record.getMessage() for record in caplog.records):
            await trio.sleep(0.01)


async def test_a_client_hanging_up_is_not_an_error(broker, connect, caplog):
    caplog.set_level(logging.DEBUG, logger="minikafka.broker.connection")
    client = await connect()
    await client.request(ApiKey.METADATA, 1, {"topics": []})
    await client.aclose()
    await wait_for_log(caplog, "lost")
    bad = await connect()
    await bad.send_raw(b"\x00\x00\x00\x01\x00")  # a frame too short for a request header
    await wait_for_log(caplog, "bad request from")
    await wait_for_log(caplog, "closed")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_idle_connection_is_closed(start_broker, connect):
    broker = await start_broker(connections_max_idle_ms=1000)
    idle = await connect(broker)
    busy = await connect(broker)
    # A request every 100 ms keeps a connection open well past the idle limit...
    with trio.fail_after(30):
        for _ in range(25):
            await busy.request(ApiKey.METADATA, 1, {"topics": []})
            await trio.sleep(0.1)
        # ...while the one that said nothing has been closed.
        assert await idle.closed_by_peer()
    await busy.request(ApiKey.METADATA, 1, {"topics": []})


async def test_connection_waiting_on_a_long_poll_is_not_idle(start_broker, connect):
    broker = await start_broker(connections_max_idle_ms=1000)
    client = await connect(broker)
    await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "long-poll-idle"}]})
    response = await client.fetch("long-poll-idle", 0, 0, max_wait_ms=1500, min_bytes=1)
    assert response.error_code == 0


async def test_unsupported_api_versions_version_gets_the_v0_fallback(client):
    await client.send(ApiKey.API_VERSIONS, 9, {})
    response = (await client.receive()).body
    assert response.error_code == 35  # UNSUPPORTED_VERSION
    assert any(entry.api_key == ApiKey.FETCH for entry in response.api_keys)


async def test_closing_the_client_ends_its_long_poll(broker, client):
    await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "abandoned"}]})
    await client.send(ApiKey.FETCH, 2, {
        "replica_id": -1, "max_wait_ms": 600_000, "min_bytes": 1,
        "topics": [{"topic": "abandoned", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]})
    with trio.fail_after(10):
        while not broker.append_waiters._waiters:
            await trio.sleep(0.01)
        await client.stream.aclose()
        while broker.append_waiters._waiters:  # the fetch was cancelled with its connection
            await trio.sleep(0.01)


async def test_out_of_descriptors_accept_waits_with_one_line_then_serves(broker, open_file_limit, caplog):
    caplog.set_level(logging.INFO, logger="minikafka.broker.server")
    sock = trio.socket.socket()  # made while there is a descriptor for it
    with open_file_limit(spare=0):
        await sock.connect((broker.advertised_host, broker.advertised_port))
        await wait_for_log(caplog, "cannot accept connections")
        await trio.sleep(0.3)  # several accept attempts
    # Descriptors are back: the waiting client is accepted and served.
    with sock:
        await sock.send(encode_request(ApiKey.API_VERSIONS, 0, 7, "waiting", {}))
        with trio.fail_after(10):
            answer = await sock.recv(65536)
    assert struct.unpack_from(">ii", answer)[1] == 7  # size, then our correlation id
    await wait_for_log(caplog, "accepting connections again")
    # One line per stall, no traceback. A descriptor another test's broker frees while the
    # limit holds (fixtures shut down in the background) can end a stall early and start a
    # second one (which may end without a client to accept): each stall says so once.
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and all("Too many open files" in r.getMessage() and r.exc_info is None for r in errors)
    levels = [r.levelno for r in caplog.records if "accept" in r.getMessage()]
    assert set(levels[0::2]) == {logging.ERROR} and set(levels[1::2]) == {logging.INFO}, levels


async def test_queued_request_bytes_pause_reading_then_resume_losing_nothing(start_broker, connect, message_set):
    """queued.max.request.bytes (KIP-72): once frames being read or handled reach the bound,
    a connection starting another frame is not read from until memory is freed."""
    broker = await start_broker({"queued.max.request.bytes": "300000"})
    memory = broker.request_memory
    first, second, bystander = await connect(broker), await connect(broker), await connect(broker)

    def produce_frame(client, value: bytes) -> bytes:
        body = {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": "bounded", "partition_data": [{"index": 0, "records": message_set(value)}]}]}
        return client.conn.send_request(ApiKey.PRODUCE, 2, body)[1]

    async def wait_for(condition):
        with trio.fail_after(10):
            while not condition():
                await trio.sleep(0.005)

    await bystander.metadata("bounded")
    frame_1 = produce_frame(first, b"1" * 200_000)
    frame_2 = produce_frame(second, b"2" * 200_000)
    answered = []

    async def answer(client, name):
        response = await client.receive()
        answered.append((name, response.body.responses[0].partition_responses[0].error_code))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer, first, "first")
        nursery.start_soon(answer, second, "second")
        await first.send_raw(frame_1[:100_000])  # half a frame: its whole length is reserved
        await wait_for(lambda: memory.used == len(frame_1))
        nursery.start_soon(second.send_raw, frame_2)  # does not fit beside it: not read
        await wait_for(lambda: memory.waiting == 1)
        # A small request elsewhere still fits and is served meanwhile.
        metadata = await bystander.request(ApiKey.METADATA, 1, {"topics": []})
        assert metadata.brokers and answered == []
        assert memory.used == len(frame_1) and memory.waiting == 1
        await first.send_raw(frame_1[100_000:])  # the first frame completes and is handled
        await wait_for(lambda: len(answered) == 2)
    assert answered == [("first", 0), ("second", 0)]
    assert memory.peak <= 300_000 and memory.used == 0 and memory.waiting == 0
    fetched = await bystander.fetch("bounded", 0, 0, partition_max_bytes=1 << 20)
    values = [record.value for record in iter_records(bytes(fetched.records))]
    assert values == [b"1" * 200_000, b"2" * 200_000]


def long_poll_body(topic: str, offset: int, max_wait_ms: int = 300) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


def produce_body(topic: str, records: bytes) -> dict:
    return {"acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


async def test_answers_stay_in_order_from_one_at_a_time_to_queued_and_back(client, message_set):
    """Requests sent one at a time (each answered by the task that read it), then a burst of
    more than the queue holds behind a long poll (queued; reading pauses), then one at a time
    again: every answer in request order, every produce appended in that order."""
    topic = "mixed"
    for i in range(5):
        assert (await client.produce(topic, 0, message_set(b"%d" % i))).base_offset == i
    sent = [await client.send(ApiKey.FETCH, 2, long_poll_body(topic, 5))]
    for i in range(2 * MAX_QUEUED_REQUESTS):
        sent.append(await client.send(ApiKey.PRODUCE, 2, produce_body(topic, message_set(b"burst-%d" % i))))
        sent.append(await client.send(ApiKey.METADATA, 1, {"topics": [{"name": topic}]}))
    with trio.fail_after(30):
        received = [await client.receive() for _ in sent]
    assert [r.correlation_id for r in received] == sent
    # The long poll waited out its time: the produces behind it had not been handled yet.
    assert bytes(received[0].body.responses[0].partitions[0].records) == b""
    offsets = [r.body.responses[0].partition_responses[0].base_offset for r in received[1::2]]
    assert offsets == list(range(5, 5 + 2 * MAX_QUEUED_REQUESTS))
    for i in range(3):
        assert (await client.produce(topic, 0, message_set(b"after"))).base_offset == 5 + 2 * MAX_QUEUED_REQUESTS + i


@pytest.mark.magic_1_topics
async def test_a_client_slow_to_read_gets_every_answer_in_order(client, connect, message_set):
    """Pipelined fetches whose answers outgrow the socket buffers, read only after a pause:
    the broker waits for room (sendfile for v2, in-memory down-converted bytes for v1), keeps
    the order, and serves other connections meanwhile."""
    topic = "slow-reader"
    await client.produce(topic, 0, message_set(os.urandom(300_000)))
    versions = [2, 1] * 12  # some 7 MB of answers
    sent = [await client.send(ApiKey.FETCH, version, long_poll_body(topic, 0, max_wait_ms=0)) for version in versions]
    other = await connect()
    with trio.fail_after(10):
        assert (await other.request(ApiKey.METADATA, 1, {"topics": []})).brokers
    await trio.sleep(0.3)
    with trio.fail_after(30):
        received = [await client.receive() for _ in sent]
    assert [(r.correlation_id, r.api_version) for r in received] == list(zip(sent, versions))
    records = {version: {bytes(r.body.responses[0].partitions[0].records) for r in received if r.api_version == version}
               for version in (1, 2)}
    assert all(len(sets) == 1 and len(next(iter(sets))) > 300_000 for sets in records.values())


async def test_bad_bytes_behind_a_long_poll_close_after_the_requests_before_them(broker, connect, message_set):
    healthy = await connect(client_id="healthy")
    bad = await connect(client_id="bad")
    await bad.request(ApiKey.METADATA, 1, {"topics": [{"name": "behind"}]})
    sent = [await bad.send(ApiKey.FETCH, 2, long_poll_body("behind", 0)),
            await bad.send(ApiKey.API_VERSIONS, 0, {})]
    frame = struct.pack(">hhih", 999, 0, 7, 4) + b"test"  # an unknown api key
    await bad.send_raw(struct.pack(">i", len(frame)) + frame)
    with trio.fail_after(10):
        assert [(await bad.receive()).correlation_id for _ in sent] == sent
        assert await bad.closed_by_peer()
    await produce_and_consume_work(healthy, "after-bad-behind", message_set)


def test_every_handler_module_is_named_after_the_api_it_serves():
    # HANDLERS is built from the file names; each module, loaded, must agree.
    from minikafka.broker.handlers import load

    for api_key in list(HANDLERS):
        handle = load(api_key)
        assert handle.__module__ == f"minikafka.broker.handlers.{api_key.name.lower()}"
        assert HANDLERS[api_key] is handle
