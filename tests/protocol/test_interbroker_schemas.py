"""The controller's inter-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown) checked against an independent encoding.

kafka-python has no classes for these APIs, so the reference is written here with kafka-python's
positional protocol types (``kafka.protocol.old``), transcribed from Kafka 0.10.2's protocol
guide (``Protocol.java``) under its names (``partition_states``, ``topic``, ``partition``, ...),
not from our declarations. Values are generated in the reference's shape, encoded by
kafka-python, and renamed field by field (by name, never by position) to our Kafka JSON names:
a field our declaration puts in the wrong place, gives the wrong type or leaves out makes the
two encodings differ.
"""

from __future__ import annotations

import struct
from io import BytesIO
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minikafka.protocol import APIS, ApiKey, ErrorCode, ProtocolError
from minikafka.protocol.framing import ClientConnection, ServerConnection, decode_response
from minikafka.protocol.schema import ArrayType, Struct
from minikafka.protocol.types import Writer

from kafka.protocol.old.types import Array, Boolean, Int16, Int32, Schema, String

# -- the reference, as Kafka 0.10.2's Protocol.java lays the messages out -------------------

_PARTITION_STATE = Schema(
    ("topic", String("utf-8")), ("partition", Int32), ("controller_epoch", Int32),
    ("leader", Int32), ("leader_epoch", Int32), ("isr", Array(Int32)), ("zk_version", Int32),
    ("replicas", Array(Int32)))
_PARTITION_ERROR = Schema(("topic", String("utf-8")), ("partition", Int32), ("error_code", Int16))


def _update_metadata_request(broker: Schema) -> Schema:
    return Schema(("controller_id", Int32), ("controller_epoch", Int32),
                  ("partition_states", Array(_PARTITION_STATE)), ("live_brokers", Array(broker)))


_END_POINT_V1 = Schema(("port", Int32), ("host", String("utf-8")), ("security_protocol_type", Int16))
_END_POINT_V3 = Schema(("port", Int32), ("host", String("utf-8")), ("listener_name", String("utf-8")),
                       ("security_protocol_type", Int16))

REFERENCE: dict[tuple[int, int], tuple[Schema, Schema]] = {
    (ApiKey.LEADER_AND_ISR, 0): (
        Schema(("controller_id", Int32), ("controller_epoch", Int32),
               ("partition_states", Array(_PARTITION_STATE)),
               ("live_leaders", Array(("id", Int32), ("host", String("utf-8")), ("port", Int32)))),
        Schema(("error_code", Int16), ("partitions", Array(_PARTITION_ERROR)))),
    (ApiKey.STOP_REPLICA, 0): (
        Schema(("controller_id", Int32), ("controller_epoch", Int32), ("delete_partitions", Boolean),
               ("partitions", Array(("topic", String("utf-8")), ("partition", Int32)))),
        Schema(("error_code", Int16), ("partitions", Array(_PARTITION_ERROR)))),
    (ApiKey.UPDATE_METADATA, 0): (
        _update_metadata_request(Schema(("id", Int32), ("host", String("utf-8")), ("port", Int32))),
        Schema(("error_code", Int16))),
    (ApiKey.UPDATE_METADATA, 1): (
        _update_metadata_request(Schema(("id", Int32), ("end_points", Array(_END_POINT_V1)))),
        Schema(("error_code", Int16))),
    (ApiKey.UPDATE_METADATA, 2): (
        _update_metadata_request(Schema(("id", Int32), ("end_points", Array(_END_POINT_V1)),
                                        ("rack", String("utf-8")))),
        Schema(("error_code", Int16))),
    (ApiKey.UPDATE_METADATA, 3): (
        _update_metadata_request(Schema(("id", Int32), ("end_points", Array(_END_POINT_V3)),
                                        ("rack", String("utf-8")))),
        Schema(("error_code", Int16))),
}
for _version in (0, 1):  # v1 is v0 with the standard request header
    REFERENCE[(ApiKey.CONTROLLED_SHUTDOWN, _version)] = (
        Schema(("broker_id", Int32)),
        Schema(("error_code", Int16),
               ("partitions_remaining", Array(("topic", String("utf-8")), ("partition", Int32)))))

# 0.10.2's name -> Kafka's JSON schema name, by path; names not listed are the same in both.
RENAMES: dict[int, dict[str, str]] = {
    ApiKey.LEADER_AND_ISR: {
        "partition_states": "ungrouped_partition_states",
        "partition_states.topic": "topic_name", "partition_states.partition": "partition_index",
        "live_leaders.id": "broker_id", "live_leaders.host": "host_name",
        "partitions": "partition_errors",
        "partitions.topic": "topic_name", "partitions.partition": "partition_index",
    },
    ApiKey.STOP_REPLICA: {
        "partitions": "ungrouped_partitions",  # the request's
        "partitions.topic": "topic_name", "partitions.partition": "partition_index",
    },
    ApiKey.UPDATE_METADATA: {
        "partition_states": "ungrouped_partition_states",
        "partition_states.topic": "topic_name", "partition_states.partition": "partition_index",
        "live_brokers.host": "v0_host", "live_brokers.port": "v0_port",
        "live_brokers.end_points": "endpoints",
        "live_brokers.end_points.listener_name": "listener",
        "live_brokers.end_points.security_protocol_type": "security_protocol",
    },
    ApiKey.CONTROLLED_SHUTDOWN: {
        "partitions_remaining": "remaining_partitions",
        "partitions_remaining.topic": "topic_name",
        "partitions_remaining.partition": "partition_index",
    },
}
_RESPONSE_RENAMES = {  # where a request and its response use one 0.10.2 name differently
    ApiKey.STOP_REPLICA: {"partitions": "partition_errors"},
}

CASES = sorted(REFERENCE)
IDS = [f"{APIS[key].name}-v{version}" for key, version in CASES]
INTER_BROKER = {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
                ApiKey.CONTROLLED_SHUTDOWN}


def _renames(key: int, direction: str) -> dict[str, str]:
    renames = dict(RENAMES[key])
    if direction == "response":
        renames.update(_RESPONSE_RENAMES.get(key, {}))
    return renames


def ours(schema: Schema, values: tuple, renames: dict[str, str], path: str = "") -> dict:
    """A reference value (positional tuples) as a dict under our names."""
    out = {}
    for name, field, value in zip(schema.names, schema.fields, values):
        where = f"{path}{name}"
        if isinstance(field, Array) and isinstance(field.array_of, Schema):
            value = [ours(field.array_of, item, renames, where + ".") for item in value]
        out[renames.get(where, name)] = value
    return out


# -- values generated from the reference ------------------------------------------------------

def _values(schema: Schema, nullable: frozenset[str] = frozenset({"rack"})) -> st.SearchStrategy:
    parts = []
    for name, field in zip(schema.names, schema.fields):
        if isinstance(field, Array):
            element = _values(field.array_of) if isinstance(field.array_of, Schema) else _scalar(field.array_of)
            strategy = st.lists(element, max_size=3)
        else:
            strategy = _scalar(field)
            if name in nullable:
                strategy = st.none() | strategy
        parts.append(strategy)
    return st.tuples(*parts)


def _scalar(field: Any) -> st.SearchStrategy:
    if field is Int16:
        return st.integers(-(2**15), 2**15 - 1)
    if field is Int32:
        return st.integers(-(2**31), 2**31 - 1)
    if field is Boolean:
        return st.booleans()
    if isinstance(field, String):
        return st.text(max_size=10)
    raise AssertionError(field)


def _encode(codec, value) -> bytes:
    w = Writer()
    codec.encode(w, value)
    return b"".join(w.finish())


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return {k: _plain(v) for k, v in vars(value).items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _subset(decoded: dict, expected: dict) -> dict:
    """``decoded`` cut down to the keys of ``expected`` at every level (a decoded struct also
    holds the defaults of fields outside its version)."""
    out = {}
    for name, value in expected.items():
        got = decoded[name]
        if isinstance(value, list) and value and isinstance(value[0], dict):
            got = [_subset(g, e) for g, e in zip(got, value)]
        out[name] = got
    return out


# -- the checks -------------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
@pytest.mark.parametrize("direction", ["request", "response"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_bytes_as_the_reference_both_ways(key, version, direction, data):
    api = APIS[key]
    schema = REFERENCE[(key, version)][0 if direction == "request" else 1]
    codec = api.request(version) if direction == "request" else api.response(version)
    reference = data.draw(_values(schema))
    theirs = schema.encode(list(reference))
    value = ours(schema, reference, _renames(key, direction))
    # Byte for byte: our encoder lays the fields out as Kafka 0.10.2 does.
    assert _encode(codec, value) == theirs
    # Our decoder reads the reference's bytes into the same values...
    assert _subset(_plain(codec.decode(memoryview(theirs))), value) == value
    # ...and the reference reads ours back to what it started from.
    assert tuple(schema.decode(BytesIO(_encode(codec, value)))) == reference


def test_every_inter_broker_version_has_a_reference():
    declared = {(key, v) for key in INTER_BROKER
                for v in range(APIS[key].min_version, APIS[key].max_version + 1)}
    assert declared == set(REFERENCE)
    # Kafka 0.10.2's broker: LeaderAndIsr v0, StopReplica v0, UpdateMetadata v0-v3,
    # ControlledShutdown v0 (header v0, served by its Scala layer) and v1.
    assert {APIS[key].name: (APIS[key].min_version, APIS[key].max_version) for key in INTER_BROKER} == {
        "LeaderAndIsr": (0, 0), "StopReplica": (0, 0), "UpdateMetadata": (0, 3),
        "ControlledShutdown": (0, 1)}


# A LeaderAndIsr request and answer as a controller and broker would exchange them.
LEADER_AND_ISR_REQUEST = {
    "controller_id": 1, "controller_epoch": 7,
    "ungrouped_partition_states": [
        {"topic_name": "orders", "partition_index": 0, "controller_epoch": 7, "leader": 2,
         "leader_epoch": 4, "isr": [2, 3], "zk_version": 11, "replicas": [2, 3, 1]},
        {"topic_name": "orders", "partition_index": 1, "controller_epoch": 6, "leader": 3,
         "leader_epoch": 0, "isr": [3], "zk_version": 0, "replicas": [3, 1]},
    ],
    "live_leaders": [{"broker_id": 2, "host_name": "b2.local", "port": 9093},
                     {"broker_id": 3, "host_name": "b3.local", "port": 9094}],
}
LEADER_AND_ISR_RESPONSE = {
    "error_code": 0,
    "partition_errors": [
        {"topic_name": "orders", "partition_index": 0, "error_code": 0},
        {"topic_name": "orders", "partition_index": 1, "error_code": ErrorCode.STALE_CONTROLLER_EPOCH},
    ],
}


def test_leader_and_isr_frame_matches_a_hand_built_one():
    # Built from the protocol guide with struct alone: one more encoder that shares nothing.
    def string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()

    def int32s(values) -> bytes:
        return struct.pack(f">i{len(values)}i", len(values), *values)

    body = struct.pack(">iii", 1, 7, 2)
    body += string("orders") + struct.pack(">iiii", 0, 7, 2, 4) + int32s([2, 3]) + struct.pack(">i", 11) + int32s([2, 3, 1])
    body += string("orders") + struct.pack(">iiii", 1, 6, 3, 0) + int32s([3]) + struct.pack(">i", 0) + int32s([3, 1])
    body += struct.pack(">i", 2) + struct.pack(">i", 2) + string("b2.local") + struct.pack(">i", 9093)
    body += struct.pack(">i", 3) + string("b3.local") + struct.pack(">i", 9094)
    header = struct.pack(">hhi", 4, 0, 0) + string("controller-1")
    _, frame = ClientConnection(client_id="controller-1").send_request(ApiKey.LEADER_AND_ISR, 0, LEADER_AND_ISR_REQUEST)
    assert frame == struct.pack(">i", len(header) + len(body)) + header + body


ROUND_TRIPS = [
    (ApiKey.LEADER_AND_ISR, 0, LEADER_AND_ISR_REQUEST, LEADER_AND_ISR_RESPONSE),
    (ApiKey.STOP_REPLICA, 0,
     {"controller_id": 1, "controller_epoch": 7, "delete_partitions": True,
      "ungrouped_partitions": [{"topic_name": "gone", "partition_index": 2}]},
     {"error_code": 0, "partition_errors": [
         {"topic_name": "gone", "partition_index": 2, "error_code": ErrorCode.NOT_LEADER_FOR_PARTITION}]}),
    (ApiKey.CONTROLLED_SHUTDOWN, 0, {"broker_id": 2},
     {"error_code": 0, "remaining_partitions": [{"topic_name": "orders", "partition_index": 0}]}),
    (ApiKey.CONTROLLED_SHUTDOWN, 1, {"broker_id": 2},
     {"error_code": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []}),
] + [
    (ApiKey.UPDATE_METADATA, version,
     {"controller_id": 1, "controller_epoch": 7,
      "ungrouped_partition_states": LEADER_AND_ISR_REQUEST["ungrouped_partition_states"],
      "live_brokers": [
          {"id": 2, "v0_host": "b2.local", "v0_port": 9093,
           "endpoints": [{"port": 9093, "host": "b2.local", "listener": "PLAINTEXT", "security_protocol": 0},
                         {"port": 9443, "host": "b2.local", "listener": "SSL", "security_protocol": 1}],
           "rack": "r1"},
          {"id": 3, "v0_host": "b3.local", "v0_port": 9094,
           "endpoints": [{"port": 9094, "host": "b3.local", "listener": "PLAINTEXT", "security_protocol": 0}],
           "rack": None}]},
     {"error_code": 0})
    for version in range(4)
]


def _at_version(fields, version: int, value: dict) -> dict:
    """``value`` without the fields its version does not carry (those decode as defaults)."""
    out = {}
    for decl in fields:
        if decl.name in value and version in decl.versions:
            item = value[decl.name]
            if isinstance(decl.type, ArrayType) and decl.type.of_structs:
                item = [_at_version(decl.type.element, version, e) for e in item]
            out[decl.name] = item
    return out


@pytest.mark.parametrize(("key", "version", "request_body", "response_body"), ROUND_TRIPS,
                         ids=[f"{APIS[k].name}-v{v}" for k, v, _, _ in ROUND_TRIPS])
def test_round_trip_through_client_and_server_connections(key, version, request_body, response_body):
    client = ClientConnection(client_id="controller-1")
    server = ServerConnection()
    correlation_id, frame = client.send_request(key, version, request_body)
    # Fed a byte at a time, as a socket may deliver it.
    for i in range(len(frame)):
        server.receive_data(frame[i:i + 1])
    request = server.next_request()
    assert (request.api_key, request.api_version, request.correlation_id) == (key, version, correlation_id)
    assert request.client_id == (None if (key, version) == (ApiKey.CONTROLLED_SHUTDOWN, 0) else "controller-1")
    assert server.next_request() is None
    sent = _at_version(APIS[key].request_fields, version, request_body)
    assert _subset(_plain(request.body), sent) == sent
    for chunk in server.encode_response(request, response_body):
        client.receive_data(chunk)
    response = client.next_response()
    assert (response.correlation_id, response.api_key, response.api_version) == (correlation_id, key, version)
    assert _subset(_plain(response.body), response_body) == response_body
    assert client.pending == 0


def test_update_metadata_fields_follow_the_version():
    api = APIS[ApiKey.UPDATE_METADATA]
    body = ROUND_TRIPS[-1][2]
    brokers = {v: api.request(v).decode(memoryview(_encode(api.request(v), body))).live_brokers[0]
               for v in range(4)}
    assert (brokers[0].v0_host, brokers[0].v0_port, brokers[0].endpoints) == ("b2.local", 9093, [])
    assert [(e.port, e.security_protocol, e.listener) for e in brokers[1].endpoints] == [(9093, 0, ""), (9443, 1, "")]
    assert brokers[1].rack is None and brokers[2].rack == "r1"
    assert [e.listener for e in brokers[3].endpoints] == ["PLAINTEXT", "SSL"]


def test_a_truncated_inter_broker_request_is_a_protocol_error_naming_it():
    _, frame = ClientConnection().send_request(ApiKey.LEADER_AND_ISR, 0, LEADER_AND_ISR_REQUEST)
    cut = frame[:-3]
    server = ServerConnection()
    server.receive_data(struct.pack(">i", len(cut) - 4) + cut[4:])
    with pytest.raises(ProtocolError, match="LeaderAndIsrRequest v0"):
        server.next_request()


def test_decode_response_reads_an_update_metadata_error():
    server = ServerConnection()
    _, frame = ClientConnection().send_request(ApiKey.UPDATE_METADATA, 3, ROUND_TRIPS[-1][2])
    server.receive_data(frame)
    parsed = server.next_request()
    response = b"".join(server.encode_response(parsed, {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH}))
    assert response == struct.pack(">iih", 6, parsed.correlation_id, 11)
    assert decode_response(ApiKey.UPDATE_METADATA, 3, response).error_code == ErrorCode.STALE_CONTROLLER_EPOCH


def test_error_codes_the_controller_and_replicas_use():
    assert {name: int(ErrorCode[name]) for name in (
        "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "REQUEST_TIMED_OUT", "BROKER_NOT_AVAILABLE",
        "REPLICA_NOT_AVAILABLE", "STALE_CONTROLLER_EPOCH", "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "INVALID_REPLICATION_FACTOR", "NOT_CONTROLLER")} == {
        "LEADER_NOT_AVAILABLE": 5, "NOT_LEADER_FOR_PARTITION": 6, "REQUEST_TIMED_OUT": 7,
        "BROKER_NOT_AVAILABLE": 8, "REPLICA_NOT_AVAILABLE": 9, "STALE_CONTROLLER_EPOCH": 11,
        "NOT_ENOUGH_REPLICAS": 19, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20,
        "INVALID_REPLICATION_FACTOR": 38, "NOT_CONTROLLER": 41}
    assert ErrorCode.NOT_LEADER_FOR_PARTITION is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_follower_fetch_and_metadata_carry_the_replication_fields():
    # A follower fetches with its broker id as replica_id; clients see the controller, internal
    # topics and each partition's replicas and ISR in Metadata v1+.
    fetch = APIS[ApiKey.FETCH]
    for version in range(4):
        body = {"replica_id": 2, "max_wait_ms": 500, "min_bytes": 1, "topics": []}
        assert fetch.request(version).decode(memoryview(_encode(fetch.request(version), body))).replica_id == 2
    metadata = APIS[ApiKey.METADATA]
    body = {"brokers": [], "controller_id": 1, "topics": [
        {"error_code": 0, "name": "__consumer_offsets", "is_internal": True, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 2, "replica_nodes": [2, 3], "isr_nodes": [2]}]}]}
    for version in (1, 2):
        decoded = metadata.response(version).decode(memoryview(_encode(metadata.response(version), body)))
        partition = decoded.topics[0].partitions[0]
        assert (decoded.controller_id, decoded.topics[0].is_internal) == (1, True)
        assert (partition.replica_nodes, partition.isr_nodes) == ([2, 3], [2])
