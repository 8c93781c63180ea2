"""KIP-320 on a single broker, over real sockets: ListOffsets v2-v5 and OffsetForLeaderEpoch
v1-v3 answer leader epochs and fence requests that name another epoch than the partition's.

A single broker leads every partition in the latest epoch its cache holds (0 from creation).
A later epoch is what a log dir brought over from a cluster holds: the tests record one in the
partition's real cache file, as a cluster's LeaderAndIsr would have."""

from __future__ import annotations

import time

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode


async def produced_in_two_epochs(broker, client, message_set, topic: str) -> int:
    """Offsets 0-2 in epoch 0, 3-4 in epoch 2 (timestamps base + 1000 * offset); returns base."""
    base = int(time.time() * 1000) - 10_000
    for i in range(3):
        await client.produce(topic, 0, message_set(b"%d" % i, timestamp=base + 1000 * i))
    broker.log_manager.get_log(topic, 0).leader_epoch_cache.assign(2, 3)
    for i in range(3, 5):
        await client.produce(topic, 0, message_set(b"%d" % i, timestamp=base + 1000 * i))
    return base


async def list_offsets(client, version: int, topic: str, timestamp: int, current_leader_epoch: int = -1):
    response = await client.request(ApiKey.LIST_OFFSETS, version, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp,
                                        "current_leader_epoch": current_leader_epoch}]}]})
    return response.topics[0].partitions[0]


async def test_list_offsets_v4_answers_the_epoch_of_the_offset_found(broker, client, message_set):
    base = await produced_in_two_epochs(broker, client, message_set, "epochs")

    async def lookup(timestamp: int, version: int = 4):
        p = await list_offsets(client, version, "epochs", timestamp)
        assert p.error_code == ErrorCode.NONE
        return p.offset, p.leader_epoch

    assert await lookup(-1) == (5, 2)  # the latest: the partition's current epoch
    assert await lookup(-2) == (0, 0)
    assert await lookup(base + 1000) == (1, 0)
    assert await lookup(base + 3500) == (4, 2)
    assert await lookup(base + 60_000) == (-1, -1)
    for version in (1, 2, 3):  # no epoch in the answer before v4
        assert await lookup(base + 3500, version) == (4, -1)


async def test_list_offsets_v4_fences_another_epoch(broker, client, message_set):
    await produced_in_two_epochs(broker, client, message_set, "fenced")
    assert (await list_offsets(client, 4, "fenced", -1, current_leader_epoch=2)).offset == 5
    assert (await list_offsets(client, 5, "fenced", -1, current_leader_epoch=1)).error_code == \
        ErrorCode.FENCED_LEADER_EPOCH
    assert (await list_offsets(client, 4, "fenced", -1, current_leader_epoch=3)).error_code == \
        ErrorCode.UNKNOWN_LEADER_EPOCH
    # Before v4 the field does not exist: nothing is checked.
    assert (await list_offsets(client, 3, "fenced", -1, current_leader_epoch=1)).offset == 5
    missing = await client.request(ApiKey.LIST_OFFSETS, 4, {"replica_id": -1, "topics": [
        {"name": "fenced", "partitions": [{"partition_index": 9, "timestamp": -1, "current_leader_epoch": 0}]}]})
    assert missing.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_list_offsets_v2_with_an_unknown_isolation_level_closes_that_connection_only(connect, client,
                                                                                          message_set):
    await client.produce("isolation", 0, message_set(b"a"))
    for level in (0, 1):
        response = await client.request(ApiKey.LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": level, "topics": [
            {"name": "isolation", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        assert response.topics[0].partitions[0].offset == 1
    bad = await connect()
    await bad.send(ApiKey.LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": 2, "topics": [
        {"name": "isolation", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert await bad.closed_by_peer()
    assert (await list_offsets(client, 1, "isolation", -1)).offset == 1


async def offset_for_epoch(client, version: int, topic: str, leader_epoch: int, current_leader_epoch: int = -1):
    response = await client.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, {"replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": leader_epoch,
                                         "current_leader_epoch": current_leader_epoch}]}]})
    p = response.topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


async def test_offset_for_leader_epoch_v1_answers_the_epoch_of_the_end_offset(broker, client, message_set):
    await produced_in_two_epochs(broker, client, message_set, "ends")
    assert await offset_for_epoch(client, 1, "ends", 0) == (0, 0, 3)
    assert await offset_for_epoch(client, 1, "ends", 1) == (0, 0, 3)  # no epoch 1: epoch 0's end
    assert await offset_for_epoch(client, 1, "ends", 2) == (0, 2, 5)
    assert await offset_for_epoch(client, 3, "ends", 3) == (0, -1, -1)
    assert await offset_for_epoch(client, 0, "ends", 2) == (0, -1, 5)  # v0 has no epoch in the answer


async def test_offset_for_leader_epoch_v2_fences_another_epoch(broker, client, message_set):
    await produced_in_two_epochs(broker, client, message_set, "fencing")
    assert await offset_for_epoch(client, 2, "fencing", 0, current_leader_epoch=2) == (0, 0, 3)
    assert await offset_for_epoch(client, 2, "fencing", 0, current_leader_epoch=0) == \
        (ErrorCode.FENCED_LEADER_EPOCH, -1, -1)
    assert await offset_for_epoch(client, 3, "fencing", 0, current_leader_epoch=5) == \
        (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1)
    assert await offset_for_epoch(client, 1, "fencing", 0, current_leader_epoch=0) == (0, 0, 3)


async def fetch_at(client, version: int, topic: str, current_leader_epoch: int = -1, **fields):
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, **fields, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": current_leader_epoch,
                                         "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
    return await client.request(ApiKey.FETCH, version, body)


def record_count(partition) -> int:
    from minikafka.protocol.records import iter_records

    return len(list(iter_records(bytes(partition.records)))) if partition.records else 0


async def test_fetch_v9_fences_another_epoch(broker, client, message_set):
    await produced_in_two_epochs(broker, client, message_set, "fetched")
    for version in (9, 10, 11):
        answer = (await fetch_at(client, version, "fetched", current_leader_epoch=2)).responses[0].partitions[0]
        assert (answer.error_code, answer.high_watermark, record_count(answer)) == (ErrorCode.NONE, 5, 5)
        assert answer.log_start_offset == 0 and answer.preferred_read_replica == -1
    assert (await fetch_at(client, 9, "fetched", 1)).responses[0].partitions[0].error_code == \
        ErrorCode.FENCED_LEADER_EPOCH
    assert (await fetch_at(client, 11, "fetched", 3)).responses[0].partitions[0].error_code == \
        ErrorCode.UNKNOWN_LEADER_EPOCH
    # Before v9 the field does not exist: nothing is checked.
    assert record_count((await fetch_at(client, 8, "fetched", 1)).responses[0].partitions[0]) == 5


async def test_fetch_v7_keeps_no_session(broker, client, message_set):
    """As a Kafka broker with no fetch session slots: full answers with session id 0, and a
    request that continues a session is told it is not there."""
    await client.produce("sessions", 0, message_set(b"a"))
    full = await fetch_at(client, 7, "sessions", session_id=0, session_epoch=0)
    assert (full.error_code, full.session_id, record_count(full.responses[0].partitions[0])) == (0, 0, 1)
    continued = await fetch_at(client, 7, "sessions", session_id=12, session_epoch=1)
    assert (continued.error_code, continued.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, [])
