"""The group APIs at the versions old clients use, over a raw socket to a real broker."""

from __future__ import annotations

import socket
import struct

import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from minikafka.broker.groups.config import GroupConfig
from minikafka.broker.groups.records import GroupKey, decode_group_value, decode_key
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.framing import decode_response, encode_request


class RawClient:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation_id = 0

    def call(self, api_key: ApiKey, version: int, body: dict):
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "raw", body))
        size = struct.unpack(">i", self._read(4))[0]
        return decode_response(api_key, version, struct.pack(">i", size) + self._read(size))

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "broker closed the connection"
            data += chunk
        return data


@pytest.fixture
def client(minikafka_broker):
    admin = KafkaAdminClient(bootstrap_servers=minikafka_broker.bootstrap)
    admin.create_topics([NewTopic("t", 2, 1)])
    admin.close()
    raw = RawClient(minikafka_broker.bootstrap)
    yield raw
    raw.sock.close()


def commit_body(group, offset, metadata="", **extra):
    return {"group_id": group, **extra,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                      "committed_metadata": metadata}]}]}


def test_find_coordinator_is_this_broker(client, minikafka_broker):
    answer = client.call(ApiKey.FIND_COORDINATOR, 0, {"key": "g"})
    assert answer.error_code == 0 and answer.node_id == 0
    assert f"{answer.host}:{answer.port}" == minikafka_broker.bootstrap


def test_offset_commit_v0_v1_v2_and_fetch_v0_v2(client):
    assert client.call(ApiKey.OFFSET_COMMIT, 0, commit_body("g", 5, "v0")).topics[0].partitions[0].error_code == 0
    fetched = client.call(ApiKey.OFFSET_FETCH, 0, {"group_id": "g", "topics": [
        {"name": "t", "partition_indexes": [0, 1]}]})
    assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
            for p in fetched.topics[0].partitions] == [(0, 5, "v0", 0), (1, -1, "", 0)]
    body = commit_body("g", 6, "v1", generation_id_or_member_epoch=-1, member_id="")
    body["topics"][0]["partitions"][0]["commit_timestamp"] = 1234
    assert client.call(ApiKey.OFFSET_COMMIT, 1, body).topics[0].partitions[0].error_code == 0
    body = commit_body("g", 7, None, generation_id_or_member_epoch=-1, member_id="", retention_time_ms=60000)
    assert client.call(ApiKey.OFFSET_COMMIT, 2, body).topics[0].partitions[0].error_code == 0
    everything = client.call(ApiKey.OFFSET_FETCH, 2, {"group_id": "g", "topics": None})
    assert everything.error_code == 0
    assert [(t.name, p.partition_index, p.committed_offset, p.metadata)
            for t in everything.topics for p in t.partitions] == [("t", 0, 7, "")]


def test_commit_errors(client):
    unknown = commit_body("g", 1)
    unknown["topics"][0]["name"] = "missing"
    assert client.call(ApiKey.OFFSET_COMMIT, 0, unknown).topics[0].partitions[0].error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    too_big = commit_body("g", 1, "x" * 5000)
    assert client.call(ApiKey.OFFSET_COMMIT, 0, too_big).topics[0].partitions[0].error_code == \
        ErrorCode.OFFSET_METADATA_TOO_LARGE
    stale = commit_body("ghost", 1, generation_id_or_member_epoch=4, member_id="m", retention_time_ms=-1)
    assert client.call(ApiKey.OFFSET_COMMIT, 2, stale).topics[0].partitions[0].error_code == \
        ErrorCode.ILLEGAL_GENERATION
    assert client.call(ApiKey.OFFSET_COMMIT, 0, commit_body("g", 1)).topics[0].partitions[0].error_code == 0
    stranger = commit_body("g", 1, generation_id_or_member_epoch=4, member_id="m", retention_time_ms=-1)
    assert client.call(ApiKey.OFFSET_COMMIT, 2, stranger).topics[0].partitions[0].error_code == \
        ErrorCode.UNKNOWN_MEMBER_ID


def test_join_v0_sync_heartbeat_leave_describe_list(client):
    join = {"group_id": "g", "session_timeout_ms": 10000, "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"meta"}]}
    assert client.call(ApiKey.JOIN_GROUP, 0, {**join, "session_timeout_ms": 1000}).error_code == \
        ErrorCode.INVALID_SESSION_TIMEOUT
    joined = client.call(ApiKey.JOIN_GROUP, 0, join)
    assert joined.error_code == 0 and joined.generation_id == 1 and joined.leader == joined.member_id
    assert joined.member_id.startswith("raw-")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, b"meta")]
    member = joined.member_id
    synced = client.call(ApiKey.SYNC_GROUP, 0, {"group_id": "g", "generation_id": 1, "member_id": member,
                                                "assignments": [{"member_id": member, "assignment": b"mine"}]})
    assert synced.error_code == 0 and synced.assignment == b"mine"
    assert client.call(ApiKey.HEARTBEAT, 0, {"group_id": "g", "generation_id": 1, "member_id": member}).error_code == 0
    assert client.call(ApiKey.HEARTBEAT, 0, {"group_id": "g", "generation_id": 2, "member_id": member}).error_code == \
        ErrorCode.ILLEGAL_GENERATION
    described = client.call(ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["g", "nobody"]}).groups
    assert (described[0].group_state, described[0].protocol_type, described[0].protocol_data) == \
        ("Stable", "consumer", "range")
    assert [(m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment)
            for m in described[0].members] == [(member, "raw", "/127.0.0.1", b"meta", b"mine")]
    assert (described[1].error_code, described[1].group_state) == (0, "Dead")
    listed = client.call(ApiKey.LIST_GROUPS, 0, {})
    assert listed.error_code == 0 and [(g.group_id, g.protocol_type) for g in listed.groups] == [("g", "consumer")]
    assert client.call(ApiKey.LEAVE_GROUP, 0, {"group_id": "g", "member_id": member}).error_code == 0
    assert client.call(ApiKey.LEAVE_GROUP, 0, {"group_id": "g", "member_id": member}).error_code == \
        ErrorCode.UNKNOWN_MEMBER_ID
    assert client.call(ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["g"]}).groups[0].group_state == "Empty"


def test_the_empty_group_id_may_commit_and_fetch_but_not_join(client):
    # Kafka keeps the empty group id for offsets (old clients commit under it).
    assert client.call(ApiKey.OFFSET_COMMIT, 0, commit_body("", 3)).topics[0].partitions[0].error_code == 0
    fetched = client.call(ApiKey.OFFSET_FETCH, 1, {"group_id": "", "topics": [{"name": "t", "partition_indexes": [0]}]})
    assert [(p.committed_offset, p.error_code) for p in fetched.topics[0].partitions] == [(3, 0)]
    join = {"group_id": "", "session_timeout_ms": 10000, "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}
    assert client.call(ApiKey.JOIN_GROUP, 0, join).error_code == ErrorCode.INVALID_GROUP_ID


def test_join_v1_keeps_the_rebalance_timeout_apart_from_the_session_timeout(client, minikafka_broker):
    join = {"session_timeout_ms": 6500, "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"meta"}]}
    joined = {"v1": client.call(ApiKey.JOIN_GROUP, 1, {**join, "group_id": "v1", "rebalance_timeout_ms": 45000}),
              "v0": client.call(ApiKey.JOIN_GROUP, 0, {**join, "group_id": "v0"})}
    for group, answer in joined.items():
        assert answer.error_code == 0
        synced = client.call(ApiKey.SYNC_GROUP, 0, {
            "group_id": group, "generation_id": answer.generation_id, "member_id": answer.member_id,
            "assignments": [{"member_id": answer.member_id, "assignment": b"a"}]})
        assert synced.error_code == 0
    # What the coordinator stored, read back as Kafka's tools would: group metadata events
    # in __consumer_offsets, in Kafka's layout.
    consumer = KafkaConsumer(bootstrap_servers=minikafka_broker.bootstrap, enable_auto_commit=False)
    consumer.assign([TopicPartition("__consumer_offsets", p)
                     for p in range(GroupConfig().offsets_topic_num_partitions)])
    consumer.seek_to_beginning()
    stored = {}
    deadline = time.monotonic() + 30
    while len(stored) < 2 and time.monotonic() < deadline:
        for messages in consumer.poll(200).values():
            for message in messages:
                key = decode_key(message.key)
                if isinstance(key, GroupKey) and message.value is not None:
                    stored[key.group_id] = decode_group_value(message.value)
    consumer.close()
    assert [(m.member_id, m.rebalance_timeout_ms, m.session_timeout_ms, m.assignment)
            for m in stored["v1"].members] == [(joined["v1"].member_id, 45000, 6500, b"a")]
    assert [(m.rebalance_timeout_ms, m.session_timeout_ms) for m in stored["v0"].members] == [(6500, 6500)]


# ------------------------------------------------------------------------------------------
# today's versions (flexible from JoinGroup v6, SyncGroup/Heartbeat/LeaveGroup v4, OffsetFetch
# v6, FindCoordinator and ListGroups v3, DescribeGroups v5)

STATIC_JOIN = {"group_id": "s", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
               "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"meta"}]}


def _sync(client, version, member, generation, assignments=(), **extra):
    return client.call(ApiKey.SYNC_GROUP, version, {
        "group_id": "s", "generation_id": generation, "member_id": member, **extra,
        "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]})


def test_join_v4_hands_a_new_member_its_id_to_join_again_with(client):
    asked = client.call(ApiKey.JOIN_GROUP, 7, STATIC_JOIN)
    assert asked.error_code == ErrorCode.MEMBER_ID_REQUIRED and asked.member_id.startswith("raw-")
    joined = client.call(ApiKey.JOIN_GROUP, 7, {**STATIC_JOIN, "member_id": asked.member_id})
    assert (joined.error_code, joined.generation_id, joined.member_id, joined.leader) == \
        (0, 1, asked.member_id, asked.member_id)
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
    synced = _sync(client, 5, asked.member_id, 1, [(asked.member_id, b"mine")],
                   protocol_type="consumer", protocol_name="range")
    assert (synced.error_code, synced.assignment, synced.protocol_type, synced.protocol_name) == \
        (0, b"mine", "consumer", "range")
    assert _sync(client, 5, asked.member_id, 1, protocol_type="consumer",
                 protocol_name="roundrobin").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_a_static_member_joining_again_fences_its_former_self_without_a_rebalance(client):
    static = {**STATIC_JOIN, "group_instance_id": "instance-1"}
    first = client.call(ApiKey.JOIN_GROUP, 6, static)   # static members get no MEMBER_ID_REQUIRED
    assert (first.error_code, first.generation_id) == (0, 1) and first.member_id.startswith("instance-1-")
    assert [(m.member_id, m.group_instance_id) for m in first.members] == [(first.member_id, "instance-1")]
    assert _sync(client, 4, first.member_id, 1, [(first.member_id, b"mine")],
                 group_instance_id="instance-1").error_code == 0

    again = client.call(ApiKey.JOIN_GROUP, 6, static)
    assert again.error_code == 0 and again.member_id != first.member_id
    # The same generation, and the old id as leader, so the new one does not assign.
    assert (again.generation_id, again.leader, again.members) == (1, first.member_id, [])
    synced = _sync(client, 4, again.member_id, 1, group_instance_id="instance-1")
    assert (synced.error_code, synced.assignment) == (0, b"mine")

    def heartbeat(member):
        return client.call(ApiKey.HEARTBEAT, 4, {"group_id": "s", "generation_id": 1, "member_id": member,
                                                 "group_instance_id": "instance-1"}).error_code

    assert heartbeat(first.member_id) == ErrorCode.FENCED_INSTANCE_ID
    assert heartbeat(again.member_id) == ErrorCode.NONE
    fenced_commit = client.call(ApiKey.OFFSET_COMMIT, 8, commit_body(
        "s", 5, generation_id_or_member_epoch=1, member_id=first.member_id, group_instance_id="instance-1"))
    assert fenced_commit.topics[0].partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    described = client.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["s"], "include_authorized_operations": True})
    group = described.groups[0]
    assert group.group_state == "Stable" and group.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
    assert [(m.member_id, m.group_instance_id) for m in group.members] == [(again.member_id, "instance-1")]

    left = client.call(ApiKey.LEAVE_GROUP, 4, {"group_id": "s", "members": [
        {"member_id": "", "group_instance_id": "instance-1"}, {"member_id": "nobody"}]})
    assert left.error_code == 0
    assert [(m.group_instance_id, m.error_code) for m in left.members] == \
        [("instance-1", 0), (None, ErrorCode.UNKNOWN_MEMBER_ID)]
    assert client.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["s"]}).groups[0].group_state == "Empty"


def test_find_coordinator_v4_offset_fetch_v8_and_list_groups_v4_take_several(client):
    found = client.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
    assert [(c.key, c.error_code, c.node_id) for c in found.coordinators] == [("a", 0, 0), ("b", 0, 0)]
    transactional = client.call(ApiKey.FIND_COORDINATOR, 3, {"key": "tx", "key_type": 1})
    assert (transactional.error_code, transactional.node_id) == (0, 0)   # a single broker coordinates them too
    for group, offset in (("a", 7), ("b", 9)):
        client.call(ApiKey.OFFSET_COMMIT, 8, commit_body(group, offset))
    fetched = client.call(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": "a", "topics": [{"name": "t", "partition_indexes": [0]}]},
        {"group_id": "b", "topics": None}]})
    assert [(g.group_id, g.error_code, [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                                        for t in g.topics]) for g in fetched.groups] == \
        [("a", 0, [("t", [(0, 7)])]), ("b", 0, [("t", [(0, 9)])])]
    joined = client.call(ApiKey.JOIN_GROUP, 5, {**STATIC_JOIN, "group_id": "c", "group_instance_id": "c1"})
    assert joined.error_code == 0
    listed = client.call(ApiKey.LIST_GROUPS, 4, {"states_filter": ["completingrebalance"]})
    assert [(g.group_id, g.group_state) for g in listed.groups] == [("c", "CompletingRebalance")]
    everything = client.call(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    assert sorted((g.group_id, g.group_state) for g in everything.groups) == \
        [("a", "Empty"), ("b", "Empty"), ("c", "CompletingRebalance")]


def txn_commit_body(producer_id: int, offsets: dict[int, int], **fields) -> dict:
    return {"transactional_id": "tx", "group_id": "g", "producer_id": producer_id, "producer_epoch": 0,
            **fields, "topics": [{"name": "t", "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_metadata": f"m{o}"}
                for p, o in offsets.items()]}, {"name": "nope", "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": None}]}]}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_txn_offset_commit_is_pending_until_its_transaction_ends(client, version):
    fields = {"generation_id": -1, "member_id": "", "group_instance_id": None} if version >= 3 else {}
    answer = client.call(ApiKey.TXN_OFFSET_COMMIT, version, txn_commit_body(7, {0: 5}, **fields))
    assert [(t.name, p.partition_index, p.error_code) for t in answer.topics for p in t.partitions] == [
        ("t", 0, 0), ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    request = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    stable = client.call(ApiKey.OFFSET_FETCH, 7, {**request, "require_stable": True})
    assert [(p.partition_index, p.committed_offset, p.error_code) for p in stable.topics[0].partitions] == [
        (0, -1, ErrorCode.UNSTABLE_OFFSET_COMMIT), (1, -1, 0)]
    # Without require_stable (before v7 always) the committed offset is answered: none yet.
    plain = client.call(ApiKey.OFFSET_FETCH, 6, request)
    assert [(p.partition_index, p.committed_offset, p.error_code) for p in plain.topics[0].partitions] == [
        (0, -1, 0), (1, -1, 0)]


def test_the_committed_leader_epoch_is_kept_and_fetched_again_after_a_restart(client, minikafka_broker):
    # OffsetCommit v6+ carries the epoch of the record the offset follows (KIP-320); a consumer
    # restarting from the offset uses it to detect a truncated log (OffsetFetch v5+).
    body = commit_body("epochs", 11, "m", generation_id_or_member_epoch=-1, member_id="")
    body["topics"][0]["partitions"][0]["committed_leader_epoch"] = 4
    assert client.call(ApiKey.OFFSET_COMMIT, 8, body).topics[0].partitions[0].error_code == 0
    body = commit_body("epochs", 3, "", generation_id_or_member_epoch=-1, member_id="")
    body["topics"][0]["partitions"][0]["partition_index"] = 1
    assert client.call(ApiKey.OFFSET_COMMIT, 5, body).topics[0].partitions[0].error_code == 0

    def fetched(raw):
        v5 = raw.call(ApiKey.OFFSET_FETCH, 5, {"group_id": "epochs", "topics": None})
        v8 = raw.call(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "epochs", "topics": None}]})
        answers = [sorted((p.partition_index, p.committed_offset, p.committed_leader_epoch)
                          for t in topics for p in t.partitions)
                   for topics in (v5.topics, v8.groups[0].topics)]
        assert answers[0] == answers[1]
        return answers[0]

    assert fetched(client) == [(0, 11, 4), (1, 3, -1)]
    minikafka_broker.restart()
    again = RawClient(minikafka_broker.bootstrap)
    try:
        assert fetched(again) == [(0, 11, 4), (1, 3, -1)]
    finally:
        again.sock.close()
