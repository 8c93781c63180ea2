"""Metadata, CreateTopics, DeleteTopics, ListOffsets, OffsetForLeaderEpoch and ApiVersions
over real sockets, with every error answer."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trio

from minikafka.broker.handlers import HANDLERS
from minikafka.broker.server import Broker
from minikafka.protocol.apis import ApiKey, api_versions_table
from minikafka.protocol.errors import ErrorCode


def user_topics(broker) -> dict[str, int]:
    return {name: count for name, count in broker.partitions.topics().items() if not broker.is_internal(name)}


async def use_a_group(client) -> None:
    """A group request: the broker creates ``__consumer_offsets`` for the first one (Kafka does
    at the first FindCoordinator, which here is answered without it)."""
    assert (await client.request(ApiKey.LIST_GROUPS, 0, {})).error_code == 0


def create_body(*topics: dict, validate_only: bool = False) -> dict:
    return {"topics": [{"num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": [], **t}
                       for t in topics], "timeout_ms": 1000, "validate_only": validate_only}


async def test_api_versions_advertises_exactly_the_served_apis(client):
    for version in (0, 1, 2, 3):
        response = await client.request(ApiKey.API_VERSIONS, version, {})
        assert response.error_code == 0
        advertised = {(e.api_key, e.min_version, e.max_version) for e in response.api_keys}
        assert advertised == {row for row in api_versions_table() if row[0] in HANDLERS}
        assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS} <= {e.api_key for e in response.api_keys}
        # As Kafka 0.10.2, the controller's APIs are advertised too (a single broker answers
        # them with STALE_CONTROLLER_EPOCH / NOT_CONTROLLER: it has no controller).
        assert {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
                ApiKey.CONTROLLED_SHUTDOWN} <= {e.api_key for e in response.api_keys}


async def test_metadata_describes_the_broker_and_auto_creates(start_broker, connect):
    broker = await start_broker(num_partitions=3)
    client = await connect(broker)
    response = await client.request(ApiKey.METADATA, 2, {"topics": [{"name": "auto"}]})
    assert [(b.node_id, b.host, b.port, b.rack) for b in response.brokers] == [
        (0, "127.0.0.1", broker.advertised_port, None)]
    assert response.controller_id == 0
    assert response.cluster_id and len(response.cluster_id) == 22
    [topic] = response.topics
    assert (topic.error_code, topic.name, topic.is_internal) == (0, "auto", False)
    assert [(p.error_code, p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
            for p in topic.partitions] == [(0, i, 0, [0], [0]) for i in range(3)]
    # v0: an empty list means every topic; v1+: null means every topic, empty means none
    assert [t.name for t in (await client.request(ApiKey.METADATA, 0, {"topics": []})).topics] == ["auto"]
    assert [t.name for t in (await client.request(ApiKey.METADATA, 1, {"topics": None})).topics] == ["auto"]
    assert (await client.request(ApiKey.METADATA, 1, {"topics": []})).topics == []


async def test_metadata_errors_without_auto_create(start_broker, connect):
    broker = await start_broker(auto_create_topics_enable="false")
    client = await connect(broker)
    response = await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "nope"}, {"name": "bad name!"}]})
    assert [(t.name, t.error_code, list(t.partitions)) for t in response.topics] == [
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []), ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION, [])]
    assert user_topics(broker) == {}


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_all_topics_include_internal_ones_flagged_as_kafka_does(broker, client, version):
    # Kafka 0.10.2 answers every version's all-topics request from getAllTopics, internal
    # topics included; v1+ carries is_internal so clients can filter them.
    await use_a_group(client)
    assert "__consumer_offsets" in broker.partitions.topics()  # the group coordinator's
    await broker.partitions.create_topic("visible", 1, 1, {}, {})
    everything = await client.request(ApiKey.METADATA, version, {"topics": [] if version == 0 else None})
    assert [t.name for t in everything.topics] == ["__consumer_offsets", "visible"]
    if version:
        assert [t.is_internal for t in everything.topics] == [True, False]


async def test_internal_topics_can_be_asked_for_by_name(broker, client):
    await use_a_group(client)
    by_name = await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "__consumer_offsets"}]})
    assert [(t.name, t.error_code, t.is_internal) for t in by_name.topics] == [("__consumer_offsets", 0, True)]
    assert by_name.topics[0].partitions


async def test_consumer_offsets_is_created_by_the_first_group_request(broker, client):
    """Like Kafka, a broker whose clients never use a group has no ``__consumer_offsets`` (nor
    its partitions' files, nor the coordinator loaded); the first group request creates it,
    and other requests are served meanwhile."""
    assert broker.partitions.topics() == {} and broker._group_coordinator is None
    everything = await client.request(ApiKey.METADATA, 1, {"topics": None})
    assert everything.topics == []
    refused = await client.request(ApiKey.CREATE_TOPICS, 1, create_body({"name": "__consumer_offsets"}))
    assert [(t.name, t.error_code) for t in refused.topics] == [("__consumer_offsets", ErrorCode.INVALID_REQUEST)]
    listed = await client.request(ApiKey.LIST_GROUPS, 0, {})
    assert (listed.error_code, list(listed.groups)) == (0, [])
    assert broker.partitions.topics() == {"__consumer_offsets": broker.group_coordinator.config.offsets_topic_num_partitions}
    await use_a_group(client)  # started once only
    assert broker.partitions.topics() == {"__consumer_offsets": broker.group_coordinator.config.offsets_topic_num_partitions}


async def test_find_coordinator_answers_without_starting_the_coordinator(start_broker, connect):
    """FindCoordinator is answered at once (this broker, whatever the coordinator's state): a
    consumer that only fetches never makes the broker create ``__consumer_offsets``; the
    group's first request that needs the coordinator starts it."""
    broker = await start_broker({"offsets.topic.num.partitions": "2"})
    client = await connect(broker)
    found = await client.request(ApiKey.FIND_COORDINATOR, 0, {"key": "early"})
    assert (found.error_code, found.node_id, found.port) == (0, 0, broker.advertised_port)
    assert broker.partitions.topics() == {} and broker._group_coordinator is None
    fetched = await client.request(ApiKey.OFFSET_FETCH, 1, {"group_id": "early", "topics": [
        {"name": "t", "partition_indexes": [0]}]})
    assert fetched.topics[0].partitions[0].committed_offset == -1
    assert broker.partitions.topics() == {"__consumer_offsets": 2}


async def test_cluster_id_is_stable_per_data_dir(broker_config):
    ids = []
    for _ in range(2):
        broker = Broker(broker_config())
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.serve)
            ids.append(broker.cluster_id)
            nursery.cancel_scope.cancel()
    assert ids[0] == ids[1]


async def test_create_topics_and_every_error(broker, client):
    await use_a_group(client)
    response = await client.request(ApiKey.CREATE_TOPICS, 1, create_body(
        {"name": "created", "num_partitions": 4, "configs": [
            {"name": "retention.ms", "value": "1000"}, {"name": "segment.bytes", "value": "4096"},
            {"name": "message.timestamp.type", "value": "LogAppendTime"}]},
        {"name": "defaults", "num_partitions": -1, "replication_factor": -1},
        {"name": "assigned", "num_partitions": -1, "replication_factor": -1,
         "assignments": [{"partition_index": 0, "broker_ids": [0]}, {"partition_index": 1, "broker_ids": [0]}]},
        {"name": "rf3", "replication_factor": 3},
        {"name": "rf0", "replication_factor": 0},
        {"name": "p0", "num_partitions": 0},
        {"name": "bad config", "num_partitions": 1},
        {"name": "badconfig", "configs": [{"name": "retention.ms", "value": "soon"}]},
        {"name": "unknownconfig", "configs": [{"name": "no.such.config", "value": "1"}]},
        {"name": "elsewhere", "num_partitions": -1, "replication_factor": -1,
         "assignments": [{"partition_index": 0, "broker_ids": [1]}]},
        {"name": "twice"}, {"name": "twice"},
        {"name": "__consumer_offsets"},
    ))
    codes = {t.name: t.error_code for t in response.topics}
    assert codes == {
        "created": 0, "defaults": 0, "assigned": 0,
        "rf3": ErrorCode.INVALID_REPLICATION_FACTOR, "rf0": ErrorCode.INVALID_REPLICATION_FACTOR,
        "p0": ErrorCode.INVALID_PARTITIONS, "bad config": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "badconfig": ErrorCode.INVALID_CONFIG, "unknownconfig": ErrorCode.INVALID_CONFIG,
        "elsewhere": ErrorCode.INVALID_REPLICA_ASSIGNMENT, "twice": ErrorCode.INVALID_REQUEST,
        "__consumer_offsets": ErrorCode.TOPIC_ALREADY_EXISTS,
    }
    messages = {t.name: t.error_message for t in response.topics}
    assert messages["created"] is None and "larger than available brokers" in messages["rf3"]
    assert user_topics(broker) == {"created": 4, "defaults": 1, "assigned": 2}
    created = broker.log_manager.get_log("created", 3).config
    assert (created.retention_ms, created.segment_bytes, created.message_timestamp_type) == (
        1000, 4096, "LogAppendTime")
    assert broker.log_manager.get_log("defaults", 0).config.segment_bytes == 1 << 30
    again = await client.request(ApiKey.CREATE_TOPICS, 0, create_body({"name": "created"}))
    assert [(t.name, t.error_code) for t in again.topics] == [("created", ErrorCode.TOPIC_ALREADY_EXISTS)]


async def test_more_partitions_than_descriptors_allow_are_refused_up_front(start_broker, connect, open_file_limit):
    broker = await start_broker(num_partitions=20)
    client = await connect(broker)
    # An active partition holds three descriptors (its log and two mapped indexes); with few
    # to spare neither an explicit nor an auto-created topic of 20 partitions fits.
    with open_file_limit(spare=20):
        created = await client.request(ApiKey.CREATE_TOPICS, 1, create_body({"name": "wide", "num_partitions": 20}))
        auto = await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "auto"}]})
    [topic] = created.topics
    assert topic.error_code == ErrorCode.INVALID_PARTITIONS
    assert re.search(r"Number of partitions 20 is more than this broker can open: 0 more partitions fit, as "
                     r"each keeps 3 files open .* of the open-file limit \d+ are in use", topic.error_message)
    assert [(t.name, t.error_code, list(t.partitions)) for t in auto.topics] == [
        ("auto", ErrorCode.INVALID_PARTITIONS, [])]
    # Nothing of either topic is left, in the broker or on disk for the next start to load.
    assert user_topics(broker) == {}
    assert [p.name for p in broker.config.log_dirs[0].iterdir()
            if p.name.startswith(("wide", "auto"))] == []
    # The same connection goes on, and with descriptors to spare both topics are made whole.
    created = await client.request(ApiKey.CREATE_TOPICS, 1, create_body({"name": "wide", "num_partitions": 20}))
    auto = await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "auto"}]})
    assert [(t.name, t.error_code) for t in created.topics] == [("wide", 0)]
    assert [(t.name, t.error_code, len(t.partitions)) for t in auto.topics] == [("auto", 0, 20)]
    assert user_topics(broker) == {"wide": 20, "auto": 20}


@pytest.mark.parametrize("validate_only", [False, True])
async def test_a_bit_flipped_partition_count_is_refused_at_once(broker, client, validate_only):
    response = await client.request(ApiKey.CREATE_TOPICS, 1, create_body(
        {"name": "flipped", "num_partitions": 1 << 30}, validate_only=validate_only))
    [topic] = response.topics
    assert topic.error_code == ErrorCode.INVALID_PARTITIONS
    assert topic.error_message.startswith(f"Number of partitions {1 << 30} is more than this broker can open: ")
    assert "open-file limit" in topic.error_message or "vm.max_map_count" in topic.error_message
    assert [p for p in broker.config.log_dirs[0].iterdir() if p.name.startswith("flipped")] == []


async def test_other_connections_are_served_while_a_big_topic_is_created(broker, connect, message_set):
    """The disk work runs in a thread that holds no lock the event loop waits for: Metadata
    (which lists partition counts) and Produce on other connections are answered before the
    CreateTopics of a big topic is."""
    admin, other = await connect(broker), await connect(broker)
    assert (await other.produce("busy", 0, message_set(b"first"))).error_code == 0
    events = []

    async def create():
        body = create_body({"name": "big", "num_partitions": 2000})
        body["timeout_ms"] = 600_000
        response = await admin.request(ApiKey.CREATE_TOPICS, 1, body)
        assert [(t.name, t.error_code) for t in response.topics] == [("big", 0)]
        events.append("created")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(create)
        while not any(p.name.startswith("big-") for p in broker.config.log_dirs[0].iterdir()):
            await trio.sleep(0.005)  # creation is under way on disk
        metadata = await other.request(ApiKey.METADATA, 1, {"topics": [{"name": "busy"}]})
        assert [(t.name, t.error_code) for t in metadata.topics] == [("busy", 0)]
        events.append("metadata")
        assert (await other.produce("busy", 0, message_set(b"second"))).base_offset == 1
        events.append("produce")
    assert events == ["metadata", "produce", "created"]
    assert user_topics(broker)["big"] == 2000


async def test_create_topics_validate_only_creates_nothing(broker, client):
    response = await client.request(ApiKey.CREATE_TOPICS, 1, create_body(
        {"name": "dry", "num_partitions": 2}, {"name": "dry-bad", "replication_factor": 2}, validate_only=True))
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("dry", 0), ("dry-bad", ErrorCode.INVALID_REPLICATION_FACTOR)]
    assert user_topics(broker) == {}


async def test_delete_topics_removes_data(broker, client, message_set):
    await use_a_group(client)
    await client.produce("doomed", 0, message_set(b"x"))
    partition_dir = broker.log_manager.get_log("doomed", 0).dir
    assert partition_dir.exists()
    response = await client.request(ApiKey.DELETE_TOPICS, 0, {
        "topic_names": ["doomed", "never-existed", "__consumer_offsets"], "timeout_ms": 1000})
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("doomed", 0), ("never-existed", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("__consumer_offsets", ErrorCode.INVALID_TOPIC_EXCEPTION)]
    assert not partition_dir.exists()
    assert "doomed" not in broker.partitions.topics()
    assert (await client.fetch("doomed", 0, 0)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # the name is free again: a client's next Metadata creates it anew
    await client.metadata("doomed")
    recreated = await client.produce("doomed", 0, message_set(b"y"))
    assert (recreated.error_code, recreated.base_offset) == (0, 0)


async def test_list_offsets_v1_earliest_latest_and_by_time(client, message_set):
    base = int(time.time() * 1000) - 10_000
    for i in range(5):
        await client.produce("times", 0, message_set(b"%d" % i, timestamp=base + 1000 * i))

    async def lookup(timestamp: int):
        response = await client.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
            {"name": "times", "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
        p = response.topics[0].partitions[0]
        return p.error_code, p.timestamp, p.offset

    assert await lookup(-2) == (0, -1, 0)
    assert await lookup(-1) == (0, -1, 5)
    assert await lookup(base + 2000) == (0, base + 2000, 2)
    assert await lookup(base + 2500) == (0, base + 3000, 3)
    assert await lookup(base) == (0, base, 0)
    assert await lookup(base + 60_000) == (0, -1, -1)
    missing = await client.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": "times", "partitions": [{"partition_index": 7, "timestamp": -1}]}]})
    assert missing.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_list_offsets_v0_old_style(start_broker, connect, message_set):
    broker = await start_broker(log_segment_bytes=200)
    client = await connect(broker)
    for i in range(6):
        await client.produce("old", 0, message_set(b"%d" % i + b"." * 60))
    segment_bases = sorted(s.base_offset for s in broker.log_manager.get_log("old", 0).closed_segments())
    assert len(segment_bases) >= 2

    async def lookup(timestamp: int, max_num_offsets: int):
        response = await client.request(ApiKey.LIST_OFFSETS, 0, {"replica_id": -1, "topics": [
            {"name": "old", "partitions": [{"partition_index": 0, "timestamp": timestamp,
                                            "max_num_offsets": max_num_offsets}]}]})
        p = response.topics[0].partitions[0]
        assert p.error_code == 0
        return list(p.old_style_offsets)

    assert await lookup(-1, 1) == [6]
    assert await lookup(-2, 1) == [0]
    everything = await lookup(-1, 100)
    assert everything[0] == 6 and everything == sorted(everything, reverse=True)
    assert set(segment_bases) <= set(everything)
    assert await lookup(0, 10) == []  # nothing that old
    assert await lookup(2**62, 100) == everything  # every segment was written before then
    assert await lookup(2**62, 2) == everything[:2]


async def test_offset_for_leader_epoch(client, message_set):
    await client.produce("epochs", 0, message_set(b"a", b"b", b"c"))
    response = await client.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, {"topics": [
        {"topic": "epochs", "partitions": [{"partition": 0, "leader_epoch": 0}, {"partition": 4, "leader_epoch": 0}]}]})
    partitions = response.topics[0].partitions
    assert (partitions[0].error_code, partitions[0].end_offset) == (0, 3)
    assert (partitions[1].error_code, partitions[1].end_offset) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)


async def test_concurrent_auto_creation_creates_once(start_broker, connect, message_set):
    broker = await start_broker(num_partitions=3)
    clients = [await connect(broker) for _ in range(8)]
    answers = []

    async def ask(client):
        answers.append(await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "racy"}]}))
        answers.append(await client.request(ApiKey.PRODUCE, 2, {"acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "racy", "partition_data": [{"index": 2, "records": message_set(b"x")}]}]}))

    async with trio.open_nursery() as nursery:
        for client in clients:
            nursery.start_soon(ask, client)
    metadata = [a for a in answers if hasattr(a, "brokers")]
    produced = [a for a in answers if hasattr(a, "responses")]
    assert {(t.error_code, len(t.partitions)) for a in metadata for t in a.topics} == {(0, 3)}
    assert sorted(a.responses[0].partition_responses[0].base_offset for a in produced) == list(range(8))
    assert broker.log_manager.get_log("racy", 2).log_end_offset == 8


async def test_metadata_lists_every_partition_of_topics_sharing_a_size(broker, client):
    # Answers for topics of one size share their partition list (built once per size): each
    # topic still gets all of its partitions, by name and in an all-topics answer, every time.
    await broker.partitions.create_topic("wide-a", 1000, 1, {}, {})
    await broker.partitions.create_topic("wide-b", 1000, 1, {}, {})
    await broker.partitions.create_topic("narrow", 2, 1, {}, {})
    for _ in range(2):
        by_name = await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "wide-b"}, {"name": "narrow"}]})
        everything = await client.request(ApiKey.METADATA, 0, {"topics": []})
        for topics in (by_name.topics, [t for t in everything.topics if t.name != "__consumer_offsets"]):
            for topic in topics:
                count = 2 if topic.name == "narrow" else 1000
                assert [(p.error_code, p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
                        for p in topic.partitions] == [(0, i, 0, [0], [0]) for i in range(count)]
        # __consumer_offsets appears with the first group request, not before (lazy coordinator)
        assert [t.name for t in everything.topics] == ["narrow", "wide-a", "wide-b"]


def test_bench_topics_runs_and_leaves_only_the_broker_data(tmp_path):
    """bench/bench_topics.py end to end on a small topic: it reports the rate and the Metadata
    answers, and removes its reference directories (the broker's data stays under --dir)."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_topics.py"
    result = subprocess.run([sys.executable, str(bench), "--partitions", "200", "--metadata-clients", "2",
                             "--then-topics", "3", "--dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    created, metadata, small = result.stdout.splitlines()
    assert re.fullmatch(r"created 200 partitions in [\d.]+ s: [\d,]+ partitions/s \(reference on this "
                        r"filesystem: [\d,]+ directories of five files/s, \d+ us per file creation\)", created)
    assert re.fullmatch(r"2 Metadata clients, one request each every 10 ms: answered \d+ times meanwhile "
                        r"\([\d,]+/s\); median ([\d.]+|nan) ms, slowest ([\d.]+|nan) ms", metadata)
    assert re.fullmatch(r"then 3 one-partition topics, one CreateTopics each: median [\d.]+ ms, slowest [\d.]+ ms",
                        small)
    assert not (tmp_path / "reference").exists()
    assert len([d for d in (tmp_path / "data").iterdir() if d.name.startswith("big-")]) == 200
    assert len([d for d in (tmp_path / "data").iterdir() if d.name.startswith("small-")]) == 3
