"""The replica fetch path: how a follower's Fetch is answered and how its answers are read.

* A follower's long-polling Fetch is answered as soon as the leader appends (Kafka's
  DelayedFetch completing on append), not at ``replica.fetch.wait.max.ms``: with a wait far
  above the produce timeout, acks=-1 produces are still acknowledged.
* ``BrokerChannel`` reads a response whole into one buffer of its announced size; large
  answers arrive intact over real sockets, and a size no broker sends, or a peer that hangs
  up mid-frame, is a ``ChannelError``, never an allocation of the announced size.
"""

from __future__ import annotations

import pytest
import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.records import build_message_set, iter_records
from minikafka.replication.channel import BrokerChannel, ChannelError
from minikafka.testing import MinikafkaCluster, kafka_request

pytestmark = pytest.mark.timeout(180)


def _produce_body(topic: str, records: bytes, acks: int, timeout_ms: int) -> dict:
    return {"acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


@pytest.mark.zookeeper
def test_a_followers_fetch_is_answered_when_the_leader_appends(tmp_path, zookeeper):
    # Followers wait up to a minute for data; each produce gives the high watermark 5 s, less
    # than replica.lag.time.max.ms (10 s), so no ISR change wakes a waiting fetch either. Were
    # a follower's fetch answered only when its wait ran out, every produce below would come
    # back REQUEST_TIMED_OUT (a healthy acknowledgement takes milliseconds).
    overrides = {"replica.fetch.wait.max.ms": "60000"}
    with MinikafkaCluster(tmp_path / "c", 3, overrides, zookeeper=zookeeper.connect_string) as cluster:
        cluster.create_topic("waiting", 1, 3)
        cluster.wait_for_full_isr(["waiting"])
        leader = cluster.broker(cluster.leader("waiting", 0))
        for i in range(5):
            body = _produce_body("waiting", build_message_set([(None, b"m%d" % i, 1)]), -1, 5000)
            answer = kafka_request(leader.bootstrap, ApiKey.PRODUCE, 2, body, timeout=30)
            partition = answer.responses[0].partition_responses[0]
            assert (partition.error_code, partition.base_offset) == (ErrorCode.NONE, i)


def _fetch_body(topic: str, max_bytes: int) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": max_bytes}]}]}


async def test_channel_reads_large_answers_whole(minikafka_broker):
    # 3 MB in a few sets, fetched back in one answer, twice on one connection: the second
    # answer is read after the first on the same socket.
    sets = [build_message_set([(None, bytes([n]) * 1000, 1)] * 1000) for n in range(3)]
    minikafka_broker.create_topic("big", message_format_version="0.10.2")  # magic 1 as stored: no down-conversion
    for records in sets:
        answer = kafka_request(minikafka_broker.bootstrap, ApiKey.PRODUCE, 2, _produce_body("big", records, 1, 5000))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    host, _, port = minikafka_broker.bootstrap.rpartition(":")
    channel = BrokerChannel(host, int(port), client_id="test", timeout_s=30)
    try:
        for _ in range(2):
            response = await channel.request(ApiKey.FETCH, 3, _fetch_body("big", 10 << 20))
            records = bytes(response.responses[0].partitions[0].records)
            entries = list(iter_records(records))
            assert [e.offset for e in entries] == list(range(3000))
            assert {e.value for e in entries} == {bytes([n]) * 1000 for n in range(3)}
    finally:
        await channel.aclose()


async def _one_answer_peer(answer: bytes, task_status=trio.TASK_STATUS_IGNORED):
    """A TCP peer that reads a request, writes ``answer`` (a broken response) and hangs up."""

    async def serve(stream):
        await stream.receive_some(1 << 16)
        await stream.send_all(answer)
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(serve, listeners)


@pytest.mark.parametrize("answer", [
    (-1).to_bytes(4, "big", signed=True),  # a negative size
    (2**31 - 1).to_bytes(4, "big"),  # 2 GiB: far above the frame limit, never allocated
    (100).to_bytes(4, "big") + b"\0\0\0\0 half a frame",  # the peer hangs up inside the frame
    b"\0\0",  # ... or inside the size prefix
], ids=["negative-size", "oversized", "short-frame", "short-prefix"])
async def test_channel_refuses_a_response_no_broker_sends(nursery, answer):
    port = await nursery.start(_one_answer_peer, answer)
    channel = BrokerChannel("127.0.0.1", port, client_id="test", timeout_s=10)
    with pytest.raises(ChannelError):
        await channel.request(ApiKey.API_VERSIONS, 0, {})
    await channel.aclose()


@pytest.mark.zookeeper
def test_a_partition_with_a_backlog_does_not_starve_the_ones_after_it(tmp_path, zookeeper):
    """A follower asks for its partitions in one Fetch whose answer only the first partition
    with data may overrun (KIP-74). Asked in a fixed order, a partition with a long backlog
    took every answer, and the one after it waited for the whole backlog before it could
    rejoin the ISR. As Kafka's fetcher, a partition that got data goes to the back of the next
    request. Here every answer holds one message (magic 1: a message is an entry), partition 0
    has 20,000 to catch up and partition 1 one: partition 1 must be back in the ISR first."""
    overrides = {"replica.fetch.max.bytes": "1", "replica.fetch.response.max.bytes": "1"}
    with MinikafkaCluster(tmp_path / "c", 2, overrides, zookeeper=zookeeper.connect_string) as cluster:
        cluster.create_topic("rotating", 2, 2, message_format_version="0.10.2")
        leader = cluster.leader("rotating", 0)
        follower = next(b for b in cluster.ids if b != leader)
        if cluster.leader("rotating", 1) != leader:
            cluster.move_leader("rotating", 1, to=leader)
        cluster.stop(follower)
        address = cluster.broker(leader).bootstrap
        for start in (0, 10_000):
            records = build_message_set([(None, b"%d" % i, 1) for i in range(start, start + 10_000)])
            answer = kafka_request(address, ApiKey.PRODUCE, 2, _produce_body("rotating", records, 1, 5000), timeout=30)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        body = {"acks": 1, "timeout_ms": 5000, "topic_data": [{"name": "rotating", "partition_data": [
            {"index": 1, "records": build_message_set([(None, b"one", 1)])}]}]}
        assert kafka_request(address, ApiKey.PRODUCE, 2, body).responses[0].partition_responses[0].error_code == 0
        cluster.restart(follower)

        def isr(metadata, partition: int) -> list[int]:
            topic = next(t for t in metadata.topics if t.name == "rotating")
            return next(p.isr_nodes for p in topic.partitions if p.partition_index == partition)

        metadata = cluster.wait_until(lambda m: follower in isr(m, 1) or follower in isr(m, 0),
                                      "the follower back in an ISR", 120, via=cluster.broker(leader))
        assert follower in isr(metadata, 1) and follower not in isr(metadata, 0), (isr(metadata, 0), isr(metadata, 1))
