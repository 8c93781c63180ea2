"""Golden request frames captured from librdkafka (see golden/README.md): our schemas decode
every field, and re-encode the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from minikafka.protocol import ApiKey, ServerConnection, encode_request
from minikafka.protocol import records

GOLDEN = Path(__file__).parent / "golden"
CODECS = ["none", "gzip", "snappy", "lz4"]
# What the capture script produced, in order: (key, value, timestamp ms).
MESSAGES = [
    (b"k0", b"value-0", 1500000000000),
    (None, b"value-1", 1500000000001),
    (b"k2", None, 1500000000002),
]


def _read(name: str):
    frame = (GOLDEN / name).read_bytes()
    conn = ServerConnection()
    conn.receive_data(frame)
    request = conn.next_request()
    assert conn.next_request() is None and conn.buffered == 0
    return frame, request


def test_api_versions_v3_from_librdkafka():
    frame, request = _read("apiversions_v3_request.bin")
    assert (request.api_key, request.api_version, request.unsupported_version) == (ApiKey.API_VERSIONS, 3, False)
    assert request.client_id == "golden-capture"
    assert request.body.client_software_name == "confluent-kafka-python"
    assert request.body.client_software_version == "2.16.1-rdkafka-2.16.0"
    reencoded = encode_request(request.api_key, request.api_version, request.correlation_id,
                               request.client_id, request.body)
    assert reencoded == frame


@pytest.mark.parametrize("codec", CODECS)
def test_produce_v2_from_librdkafka(codec):
    frame, request = _read(f"produce_v2_{codec}_request.bin")
    assert (request.api_key, request.api_version) == (ApiKey.PRODUCE, 2)
    assert request.client_id == "golden-capture"
    body = request.body
    assert (body.acks, body.timeout_ms) == (1, 30000)
    assert [t.name for t in body.topic_data] == ["golden"]
    (partition,) = body.topic_data[0].partition_data
    assert partition.index == 0
    # A view of the frame, not a copy (a big produce would take twice its size).
    assert isinstance(partition.records, memoryview) and partition.records[16] == 1  # magic 1
    reencoded = encode_request(request.api_key, request.api_version, request.correlation_id,
                               request.client_id, body)
    assert reencoded == frame


@pytest.mark.parametrize("codec", CODECS)
def test_produce_v2_records_from_librdkafka(codec):
    _, request = _read(f"produce_v2_{codec}_request.bin")
    buffer = request.body.topic_data[0].partition_data[0].records
    entries = list(records.iter_entries(buffer))
    assert {e.codec.name.lower() for e in entries} == {codec}
    assert len(entries) == (3 if codec == "none" else 1)
    validated = records.validate_and_assign(buffer, 100, 1500000009999, records.ValidationConfig(magic=1))
    got = [(r.offset, r.key, r.value, r.timestamp, r.magic)
           for r in records.iter_records(validated.buffer)]
    assert got == [(100 + i, k, v, ts, 1) for i, (k, v, ts) in enumerate(MESSAGES)]



# What librdkafka's admin client sent (golden/README.md): file, key, version, and the body.
ADMIN_FRAMES = [
    ("describeconfigs_v1_request.bin", ApiKey.DESCRIBE_CONFIGS, 1,
     lambda b: ([(r.resource_type, r.resource_name, r.configuration_keys) for r in b.resources], b.include_synonyms),
     ([(2, "golden", None)], True)),
    ("incrementalalterconfigs_v1_request.bin", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
     lambda b: [(r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
                for r in b.resources],
     [(2, "golden", [("retention.ms", 0, "3600000")])]),
    ("createpartitions_v2_request.bin", ApiKey.CREATE_PARTITIONS, 2,
     lambda b: [(t.name, t.count, [list(a.broker_ids) for a in t.assignments]) for t in b.topics],
     [("golden", 3, [[0], [0]])]),
    ("deleterecords_v2_request.bin", ApiKey.DELETE_RECORDS, 2,
     lambda b: [(t.name, [(p.partition_index, p.offset) for p in t.partitions]) for t in b.topics],
     [("golden", [(0, 5)])]),
    ("createacls_v2_request.bin", ApiKey.CREATE_ACLS, 2,
     lambda b: [(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
                 c.permission_type) for c in b.creations],
     [(2, "golden", 3, "User:alice", "*", 3, 3)]),
    ("deletegroups_v2_request.bin", ApiKey.DELETE_GROUPS, 2, lambda b: list(b.groups_names), ["golden-group"]),
    ("listoffsets_v7_request.bin", ApiKey.LIST_OFFSETS, 7,
     lambda b: (b.replica_id, b.isolation_level, [(t.name, [(p.partition_index, p.current_leader_epoch, p.timestamp)
                                                          for p in t.partitions]) for t in b.topics]),
     (-1, 0, [("golden", [(0, 0, -3)])])),
]


@pytest.mark.parametrize(("name", "api_key", "version", "fields", "expected"), ADMIN_FRAMES,
                         ids=[frame[0] for frame in ADMIN_FRAMES])
def test_admin_requests_from_librdkafka(name, api_key, version, fields, expected):
    """Flexible versions (all but DescribeConfigs v1, which librdkafka prefers): request header
    v2, compact strings and arrays, tagged-field sections."""
    frame, request = _read(name)
    assert (request.api_key, request.api_version, request.client_id) == (api_key, version, "golden-capture")
    assert fields(request.body) == expected
    reencoded = encode_request(request.api_key, request.api_version, request.correlation_id,
                               request.client_id, request.body)
    assert reencoded == frame
