"""Schemas: round trip of every message at every served version, and cross-checks against
kafka-python's two independent implementations of the same messages (its JSON-schema driven
classes and its hand-written ``kafka.protocol.old`` classes), in both directions."""

from __future__ import annotations

import base64
import importlib
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minikafka.protocol import APIS, ApiKey, EncodeError, Struct
from minikafka.protocol.schema import ArrayType, FieldDecl, NestedType, StructCodec, Versions
from minikafka.protocol.types import (BOOLEAN, BYTES, INT8, INT16, INT32, INT64, RECORDS, STRING, UUID,
                                      ZERO_UUID, FixedType, Writer)

import kafka.protocol.admin as kp_admin
import kafka.protocol.consumer as kp_consumer
import kafka.protocol.metadata as kp_metadata
import kafka.protocol.producer as kp_producer
import kafka.protocol.sasl as kp_sasl
from kafka.protocol.old import types as old_types
from kafka.protocol.schemas import BaseField

ALL_VERSIONS = [
    (api, version)
    for api in APIS.values()
    for version in range(api.min_version, api.max_version + 1)
]
IDS = [f"{api.name}-v{version}" for api, version in ALL_VERSIONS]
# kafka-python has no classes for the controller's inter-broker APIs: those are checked against
# an independent encoding in test_interbroker_schemas.py.
INTER_BROKER = {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
                ApiKey.CONTROLLED_SHUTDOWN, ApiKey.WRITE_TXN_MARKERS}
CLIENT_VERSIONS = [(api, version) for api, version in ALL_VERSIONS if api.key not in INTER_BROKER]
CLIENT_IDS = [f"{api.name}-v{version}" for api, version in CLIENT_VERSIONS]


# ------------------------------------------------------------------------------------------
# values generated from the declarations


def _present(fields: tuple[FieldDecl, ...], version: int, flexible: bool, tagged: bool):
    for decl in fields:
        is_tagged = flexible and decl.tag is not None and version in decl.tagged
        if is_tagged and not tagged:
            continue
        if version in decl.versions:
            yield decl


def _scalar(ftype: Any) -> st.SearchStrategy:
    if ftype is BOOLEAN:
        return st.booleans()
    if isinstance(ftype, FixedType):
        return st.integers(ftype.lo, ftype.hi)
    if ftype is STRING:
        return st.text(max_size=12)
    if ftype in (BYTES, RECORDS):
        return st.binary(max_size=24)
    if ftype is UUID:
        return st.sampled_from([ZERO_UUID, "ZfZ0HAd9rTWCbQcOSXjwVg", "_____________________w"])
    raise AssertionError(ftype)


def values_for(fields, version: int, flexible: bool, tagged: bool = True) -> st.SearchStrategy:
    """Dicts holding a random value for every field present at ``version``."""
    parts = {}
    for decl in _present(fields, version, flexible, tagged):
        if isinstance(decl.type, ArrayType):
            if decl.type.of_structs:
                element = values_for(decl.type.element, version, flexible, tagged)
            else:
                element = _scalar(decl.type.element)
            strategy = st.lists(element, max_size=3)
        elif isinstance(decl.type, NestedType):
            strategy = values_for(decl.type.fields, version, flexible, tagged)
        else:
            strategy = _scalar(decl.type)
        if version in decl.nullable:
            strategy = st.none() | strategy
        parts[decl.name] = strategy
    return st.fixed_dictionaries(parts)


def encode(codec: StructCodec, value: Any) -> bytes:
    w = Writer()
    codec.encode(w, value)
    return b"".join(w.finish())


def assert_matches(decoded: Any, expected: Any) -> None:
    """``decoded`` (Struct / list / scalar) holds every value of ``expected`` (dict / list)."""
    if isinstance(expected, dict):
        assert isinstance(decoded, Struct)
        for name, value in expected.items():
            assert_matches(getattr(decoded, name), value)
    elif isinstance(expected, list):
        assert isinstance(decoded, list) and len(decoded) == len(expected)
        for got, want in zip(decoded, expected):
            assert_matches(got, want)
    else:
        assert decoded == expected, (decoded, expected)


def _all_fields(fields):
    return {decl.name for decl in fields}


# ------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize(("api", "version"), ALL_VERSIONS, ids=IDS)
@pytest.mark.parametrize("direction", ["request", "response"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(api, version, direction, data):
    fields = api.request_fields if direction == "request" else api.response_fields
    codec = api.request(version) if direction == "request" else api.response(version)
    value = data.draw(values_for(fields, version, api.is_flexible(version)))
    encoded = encode(codec, value)
    decoded = codec.decode(memoryview(encoded))
    assert_matches(decoded, value)
    # Every declared field is readable, whatever the version.
    assert set(vars(decoded)) == _all_fields(fields)
    # Decoding is canonical: the decoded struct encodes to the same bytes.
    assert encode(codec, decoded) == encoded


def test_fields_left_out_take_their_defaults():
    produce = APIS[ApiKey.PRODUCE]
    encoded = encode(produce.response(2), {"responses": [{"name": "t", "partition_responses": [{"index": 3}]}]})
    decoded = produce.response(2).decode(memoryview(encoded))
    partition = decoded.responses[0].partition_responses[0]
    assert (partition.index, partition.error_code, partition.base_offset, partition.log_append_time_ms) == (3, 0, 0, -1)
    assert decoded.throttle_time_ms == 0


def test_fields_outside_the_version_read_as_defaults():
    fetch = APIS[ApiKey.FETCH]
    body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "topics": []}
    decoded = fetch.request(0).decode(memoryview(encode(fetch.request(0), body)))
    assert decoded.max_bytes == 0x7FFFFFFF
    offsets = APIS[ApiKey.LIST_OFFSETS]
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
    decoded = offsets.request(1).decode(memoryview(encode(offsets.request(1), body)))
    assert decoded.topics[0].partitions[0].max_num_offsets == 1


def test_structs_and_objects_encode_like_dicts():
    heartbeat = APIS[ApiKey.HEARTBEAT]

    class Plain:
        group_id = "g"
        generation_id = 7
        member_id = "m"

    as_dict = encode(heartbeat.request(0), {"group_id": "g", "generation_id": 7, "member_id": "m"})
    assert encode(heartbeat.request(0), Plain()) == as_dict
    assert encode(heartbeat.request(0), Struct(group_id="g", generation_id=7, member_id="m")) == as_dict


def test_encode_errors_name_the_field_path():
    produce = APIS[ApiKey.PRODUCE]
    bad = {"responses": [{"name": "t", "partition_responses": [{"index": 0}, {"index": 1, "base_offset": "x"}]}]}
    with pytest.raises(EncodeError) as info:
        encode(produce.response(2), bad)
    assert "ProduceResponse v2: responses[0].partition_responses[1]" in str(info.value)
    assert "base_offset" in str(info.value)
    with pytest.raises(EncodeError, match=r"responses\[0\]\.name"):
        encode(produce.response(0), {"responses": [{"name": None}]})


def test_nullable_only_where_declared():
    metadata = APIS[ApiKey.METADATA]
    assert metadata.request(1).decode(memoryview(encode(metadata.request(1), {"topics": None}))).topics is None
    with pytest.raises(EncodeError, match="topics"):
        encode(metadata.request(0), {"topics": None})


# ------------------------------------------------------------------------------------------
# cross-checks against kafka-python


def _kp_class(api, direction: str):
    name = api.name + ("Request" if direction == "request" else "Response")
    for module in (kp_producer, kp_consumer, kp_metadata, kp_admin, kp_sasl):
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"kafka-python has no {name}")


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return base64.urlsafe_b64encode(value.bytes).decode()[:22]
    if value == ZERO_UUID:  # kafka-python decodes the zero id as None
        return None
    if isinstance(value, (set, frozenset)):  # kafka-python's int32 bit sets
        value = sum(1 << bit for bit in value) - (1 << 32 if 31 in value else 0)
    if value == -(2**31):  # ... of which it decodes Kafka's "not asked for" (bit 31 alone) as None
        return None
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("api", "version"), CLIENT_VERSIONS, ids=CLIENT_IDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kafka_python_requests_decode_with_ours(api, version, kafka_python_message, data):
    value = data.draw(values_for(api.request_fields, version, api.is_flexible(version)))
    theirs = kafka_python_message(_kp_class(api, "request"), version, value).encode()
    decoded = api.request(version).decode(memoryview(bytes(theirs)))
    assert_matches(decoded, value)


@pytest.mark.parametrize(("api", "version"), CLIENT_VERSIONS, ids=CLIENT_IDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_our_responses_decode_with_kafka_python(api, version, data):
    value = data.draw(values_for(api.response_fields, version, api.is_flexible(version)))
    if api.key == ApiKey.API_VERSIONS:
        value["error_code"] = 0  # clients read an ApiVersions error as v0 (see test_framing)
    ours = encode(api.response(version), value)
    theirs = _kp_class(api, "response")[version].decode(ours)
    assert _plain(theirs.to_dict(json=False)) == _as_bitfields(_plain(_with_defaults(
        api.response_fields, version, api.is_flexible(version), value)), rename=api.key in (ApiKey.METADATA, ApiKey.DESCRIBE_CLUSTER))


# KIP-430's authorized operations: kafka-python's Metadata and DescribeCluster responses name
# them ``authorized_operations`` (their json_patch; DescribeTopicPartitions keeps Kafka's name);
# their values, bit sets to it, _plain compares as Kafka's int32.
_AUTHORIZED_OPERATIONS = "authorized_operations"
_BITFIELDS = {_AUTHORIZED_OPERATIONS, "cluster_authorized_operations", "topic_authorized_operations"}


def _kafka_python_name(name: str, where: str = "Metadata") -> str:
    """Our field's name as kafka-python has it in ``where`` (a message named first)."""
    return _AUTHORIZED_OPERATIONS if name in _BITFIELDS and where.startswith(("Metadata", "DescribeCluster")) else name


def _as_bitfields(value: Any, *, rename: bool) -> Any:
    if isinstance(value, list):
        return [_as_bitfields(v, rename=rename) for v in value]
    if isinstance(value, tuple):
        return tuple(_as_bitfields(v, rename=rename) for v in value)
    if not isinstance(value, dict):
        return value
    out = {}
    for name, item in value.items():
        out[_kafka_python_name(name) if rename else name] = _as_bitfields(item, rename=rename)
    return out


def _with_defaults(fields, version, flexible, value):
    """Our value as kafka-python's to_dict shows it: every field of the version present."""
    out = {}
    for decl in _present(fields, version, flexible, tagged=True):
        item = value.get(decl.name, decl.default_value())
        if isinstance(decl.type, ArrayType) and decl.type.of_structs and item is not None:
            item = [_with_defaults(decl.type.element, version, flexible, e) for e in item]
        if isinstance(decl.type, NestedType) and item is not None:
            item = _with_defaults(decl.type.fields, version, flexible, item)
        out[decl.name] = item
    return out


# kafka-python's hand-written classes (kafka.protocol.old): positional, by version.

_OLD_MODULES = {
    ApiKey.API_VERSIONS: "api_versions", ApiKey.METADATA: "metadata", ApiKey.PRODUCE: "produce",
    ApiKey.FETCH: "fetch", ApiKey.LIST_OFFSETS: "list_offsets", ApiKey.CREATE_TOPICS: "admin",
    ApiKey.DELETE_TOPICS: "admin", ApiKey.LIST_GROUPS: "admin", ApiKey.DESCRIBE_GROUPS: "admin",
    ApiKey.FIND_COORDINATOR: "find_coordinator", ApiKey.JOIN_GROUP: "group",
    ApiKey.SYNC_GROUP: "group", ApiKey.HEARTBEAT: "group", ApiKey.LEAVE_GROUP: "group",
    ApiKey.OFFSET_COMMIT: "commit", ApiKey.OFFSET_FETCH: "commit",
    ApiKey.OFFSET_FOR_LEADER_EPOCH: "offset_for_leader_epoch", ApiKey.SASL_HANDSHAKE: "sasl_handshake",
    ApiKey.SASL_AUTHENTICATE: "sasl_authenticate", ApiKey.INIT_PRODUCER_ID: "init_producer_id",
    ApiKey.DESCRIBE_CONFIGS: "admin",
    ApiKey.ALTER_CONFIGS: "admin", ApiKey.DELETE_RECORDS: "admin", ApiKey.DESCRIBE_ACLS: "admin",
    ApiKey.CREATE_ACLS: "admin", ApiKey.DELETE_ACLS: "admin", ApiKey.DELETE_GROUPS: "admin",
    ApiKey.TXN_OFFSET_COMMIT: "txn_offset_commit",
}


def _old_class(api, direction: str, version: int):
    module = importlib.import_module(f"kafka.protocol.old.{_OLD_MODULES[api.key]}")
    return getattr(module, f"{api.name}{'Request' if direction == 'request' else 'Response'}_v{version}", None)


def _old_layout_is_kafkas(api, version: int) -> bool:
    """Whether kafka-python's old class of that version exists and lays it out as Kafka does:
    the old classes stop at kafka-python 2.x's versions (no IncrementalAlterConfigs, no
    DescribeConfigs v3), and some flexible ones (DescribeAcls v2) repeat the classic layout.
    The JSON-driven checks above cover the rest."""
    cls = _old_class(api, "request", version)
    return cls is not None and (not api.is_flexible(version) or old_types.TaggedFields in cls.SCHEMA.fields)


OLD_VERSIONS = [(api, version) for api, version in CLIENT_VERSIONS
                if api.key in _OLD_MODULES and _old_layout_is_kafkas(api, version)]
OLD_IDS = [f"{api.name}-v{version}" for api, version in OLD_VERSIONS]


def _old_shape(fields, version, flexible, value, schema) -> tuple:
    """Our value laid out as kafka-python's old classes hold it: tuples in schema order."""
    out = []
    ours = list(_present(fields, version, flexible, tagged=False))
    theirs = [f for f in schema.fields if f is not old_types.TaggedFields]
    assert len(ours) == len(theirs), (ours, schema.names)
    for decl, old_field in zip(ours, theirs):
        item = value.get(decl.name, decl.default_value())
        if isinstance(decl.type, ArrayType) and decl.type.of_structs and item is not None:
            element_schema = old_field.array_of
            if isinstance(element_schema, old_types.Schema):
                item = [_old_shape(decl.type.element, version, flexible, e, element_schema) for e in item]
            else:  # a one-field struct in the JSON schemas is a bare scalar in the old classes
                (only,) = _present(decl.type.element, version, flexible, tagged=False)
                item = [e[only.name] for e in item]
        out.append(item)
    return tuple(out)


def _old_values(obj_or_tuple, schema) -> Any:
    values = obj_or_tuple if isinstance(obj_or_tuple, tuple) else tuple(
        getattr(obj_or_tuple, n) for n in schema.names)
    out = []
    for old_field, item in zip(schema.fields, values):
        if old_field is old_types.TaggedFields:
            continue
        if isinstance(old_field, old_types.Array) and isinstance(old_field.array_of, old_types.Schema) and item is not None:
            item = [_old_values(e, old_field.array_of) for e in item]
        out.append(item)
    return tuple(out)


@pytest.mark.parametrize(("api", "version"), OLD_VERSIONS, ids=OLD_IDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_old_kafka_python_requests_decode_with_ours(api, version, data):
    flexible = api.is_flexible(version)
    value = data.draw(values_for(api.request_fields, version, flexible, tagged=False))
    cls = _old_class(api, "request", version)
    theirs = cls(*_old_shape(api.request_fields, version, flexible, value, cls.SCHEMA)).encode()
    assert_matches(api.request(version).decode(memoryview(bytes(theirs))), value)


@pytest.mark.parametrize(("api", "version"), OLD_VERSIONS, ids=OLD_IDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_our_responses_decode_with_old_kafka_python(api, version, data):
    flexible = api.is_flexible(version)
    value = data.draw(values_for(api.response_fields, version, flexible, tagged=False))
    if api.key == ApiKey.API_VERSIONS:
        value["error_code"] = 0  # an ApiVersions error is read as v0 (see test_framing)
    cls = _old_class(api, "response", version)
    theirs = cls.decode(encode(api.response(version), value))
    assert _plain(list(_old_values(theirs, cls.SCHEMA))) == _plain(
        list(_old_shape(api.response_fields, version, flexible, _as_bitfields(value, rename=False), cls.SCHEMA)))


def test_every_served_api_is_registered_with_the_issue_versions():
    assert {ApiKey(k).name: (lo, hi) for k, lo, hi in
            [(api.key, api.min_version, api.max_version) for api in APIS.values()]} == {
        "API_VERSIONS": (0, 3), "METADATA": (0, 12), "PRODUCE": (0, 9), "FETCH": (0, 11),
        "LIST_OFFSETS": (0, 7), "CREATE_TOPICS": (0, 7), "DELETE_TOPICS": (0, 6),
        "FIND_COORDINATOR": (0, 4), "JOIN_GROUP": (0, 7), "SYNC_GROUP": (0, 5),
        "HEARTBEAT": (0, 4), "LEAVE_GROUP": (0, 4), "OFFSET_COMMIT": (0, 8),
        "OFFSET_FETCH": (0, 8), "LIST_GROUPS": (0, 4), "DESCRIBE_GROUPS": (0, 5),
        "OFFSET_FOR_LEADER_EPOCH": (0, 3), "LEADER_AND_ISR": (0, 0), "STOP_REPLICA": (0, 0),
        "UPDATE_METADATA": (0, 3), "CONTROLLED_SHUTDOWN": (0, 1), "SASL_HANDSHAKE": (0, 1),
        "SASL_AUTHENTICATE": (0, 2), "DESCRIBE_CONFIGS": (0, 4), "ALTER_CONFIGS": (0, 2),
        "INCREMENTAL_ALTER_CONFIGS": (0, 1), "CREATE_PARTITIONS": (0, 3),
        "DELETE_RECORDS": (0, 2), "DESCRIBE_ACLS": (0, 1), "CREATE_ACLS": (0, 3), "DELETE_ACLS": (0, 3),
        "DELETE_GROUPS": (0, 2), "OFFSET_DELETE": (0, 0), "ALTER_REPLICA_LOG_DIRS": (0, 2), "DESCRIBE_LOG_DIRS": (0, 4),
        "ELECT_LEADERS": (0, 2), "ALTER_PARTITION_REASSIGNMENTS": (0, 0), "LIST_PARTITION_REASSIGNMENTS": (0, 0),
        "DESCRIBE_USER_SCRAM_CREDENTIALS": (0, 0), "ALTER_USER_SCRAM_CREDENTIALS": (0, 0),
        "INIT_PRODUCER_ID": (0, 4), "ADD_PARTITIONS_TO_TXN": (0, 3), "ADD_OFFSETS_TO_TXN": (0, 3),
        "END_TXN": (0, 3), "WRITE_TXN_MARKERS": (0, 1), "DESCRIBE_TRANSACTIONS": (0, 0),
        "LIST_TRANSACTIONS": (0, 0), "TXN_OFFSET_COMMIT": (0, 3),
        "DESCRIBE_CLUSTER": (0, 1), "DESCRIBE_TOPIC_PARTITIONS": (0, 0),
    }


@pytest.mark.parametrize(("api", "version"), CLIENT_VERSIONS, ids=CLIENT_IDS)
def test_field_names_are_kafkas(api, version):
    """Our field names, per version, are exactly those of Kafka's JSON schemas."""
    for direction, fields in (("request", api.request_fields), ("response", api.response_fields)):
        theirs = _kp_class(api, direction)._struct
        _assert_same_names(fields, theirs, version, api.is_flexible(version), f"{api.name} {direction}")


def _assert_same_names(fields, kp_struct, version, flexible, where):
    ours = [_kafka_python_name(d.name, where) for d in _present(fields, version, flexible, tagged=True)]
    theirs = [f.name for f in kp_struct._fields if f.for_version_q(version)]
    assert ours == theirs, where
    for decl in _present(fields, version, flexible, tagged=True):
        if isinstance(decl.type, ArrayType) and decl.type.of_structs:
            _assert_same_names(decl.type.element, kp_struct.fields[decl.name], version, flexible,
                               f"{where}.{decl.name}")


# ------------------------------------------------------------------------------------------
# declarations and bytes against Kafka's JSON schemas (as kafka-python ships them) and
# kafka-python's JSON-driven encoder


_JSON_TYPES = {"int8": INT8, "int16": INT16, "int32": INT32, "int64": INT64, "bool": BOOLEAN,
               "string": STRING, "bytes": BYTES, "records": RECORDS, "uuid": UUID,
               # kafka-python's own name for Kafka's int32 authorized-operations bit sets
               "bitfield": INT32}


def _json_default(json_field: dict, ours: FieldDecl) -> Any:
    """The default Kafka's generator gives a scalar field of the JSON schema (the untagged
    fields' defaults are ours to choose: they are what a handler sees for a field outside the
    request's version, never on the wire)."""
    default = json_field.get("default")
    if default == "null":
        return None
    if ours.type is BOOLEAN:
        return default == "true"
    if isinstance(ours.type, FixedType):
        return int(default, 0) if default else 0
    if ours.type is UUID:
        return ZERO_UUID
    return (default or "") if ours.type is STRING else b""


def _assert_same_declarations(ours, json_fields, version, flexible, where):
    present = list(_present(ours, version, flexible, tagged=True))
    theirs = [f for f in json_fields if version in Versions.parse(f["versions"])]
    assert [_kafka_python_name(d.name, where) for d in present] == [
        BaseField.underscore_name(f["name"]) for f in theirs], where
    for decl, field in zip(present, theirs):
        here = f"{where}.{decl.name} v{version}"
        assert (version in decl.nullable) == (version in Versions.parse(field.get("nullableVersions"))), here
        tagged = flexible and "tag" in field and version in Versions.parse(field.get("taggedVersions"))
        assert (decl.tag if flexible and version in decl.tagged else None) == (field["tag"] if tagged else None), here
        json_type = field["type"]
        if json_type.startswith("[]"):
            assert isinstance(decl.type, ArrayType), here
            if "fields" in field:
                assert decl.type.of_structs, here
                _assert_same_declarations(decl.type.element, field["fields"], version, flexible, here)
            else:
                assert decl.type.element is _JSON_TYPES[json_type[2:]], here
        elif "fields" in field:
            assert isinstance(decl.type, NestedType), here
            _assert_same_declarations(decl.type.fields, field["fields"], version, flexible, here)
        else:
            assert decl.type is _JSON_TYPES[json_type], here
            if tagged:  # a tagged field is written only when it differs from its default
                assert decl.default_value() == _json_default(field, decl), here


@pytest.mark.parametrize(("api", "version"), CLIENT_VERSIONS, ids=CLIENT_IDS)
def test_declarations_are_kafkas_json_schemas(api, version):
    """Per version: the same flexible versions, and per field the same type, nullability,
    tag (and tagged fields' default) as the JSON schema Kafka generates its own classes from."""
    for direction, fields in (("request", api.request_fields), ("response", api.response_fields)):
        cls = _kp_class(api, direction)
        assert api.is_flexible(version) == cls.flexible_version_q(version), f"{api.name} {direction}"
        _assert_same_declarations(fields, cls.json["fields"], version, api.is_flexible(version),
                                  f"{api.name}{direction.title()}")


@pytest.mark.parametrize(("api", "version"), CLIENT_VERSIONS, ids=CLIENT_IDS)
@pytest.mark.parametrize("direction", ["request", "response"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_bytes_as_kafka_python(api, version, direction, kafka_python_message, data):
    """Golden bytes: kafka-python's encoder, generated from Kafka's JSON schemas, writes exactly
    the bytes we write for the same message (tagged fields included, in flexible versions)."""
    fields = api.request_fields if direction == "request" else api.response_fields
    codec = api.request(version) if direction == "request" else api.response(version)
    value = data.draw(values_for(fields, version, api.is_flexible(version)))
    theirs = kafka_python_message(_kp_class(api, direction), version, value).encode()
    assert encode(codec, value) == bytes(theirs)


def test_nested_structs_as_kafka_writes_them():
    """A struct-typed field (not an array), nullable: an int8 -1 for null, 1 before the struct.
    No API we serve has one yet; DescribeTopicPartitions' request, declared here, does."""
    from minikafka.protocol.schema import Api, Array, Field, Nested

    request_fields = (
        Field("topics", Array(Field("name", STRING))),
        Field("response_partition_limit", INT32, default=2000),
        Field("cursor", Nested(
            Field("topic_name", STRING),
            Field("partition_index", INT32),
        ), nullable="0+", default=None),
    )
    api = Api(75, "DescribeTopicPartitions", versions=(0, 0), flexible="0+",
              request=request_fields, response=())
    theirs_cls = kp_admin.DescribeTopicPartitionsRequest
    _assert_same_declarations(request_fields, theirs_cls.json["fields"], 0, True, "request")
    for cursor in (None, {"topic_name": "t", "partition_index": 7}):
        value = {"topics": [{"name": "t"}], "response_partition_limit": 10, "cursor": cursor}
        ours = encode(api.request(0), value)
        assert ours == bytes(theirs_cls[0](topics=[theirs_cls.TopicRequest(name="t")], response_partition_limit=10,
                                           cursor=None if cursor is None else theirs_cls.Cursor(**cursor)).encode())
        assert api.request(0).decode(memoryview(ours)).to_dict() == value
    # present marker, compact "t", index 7, the cursor's tagged fields, the request's
    assert ours.endswith(b"\x01\x02t\x00\x00\x00\x07\x00\x00")
