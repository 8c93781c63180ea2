"""Framing: request reassembly from any chunking, frame limits, header versions, version
negotiation as real clients do it, response chunks with file slices, and robustness against
arbitrary bytes (only ProtocolError may escape)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minikafka.protocol import (
    APIS,
    ApiKey,
    ClientConnection,
    ErrorCode,
    ProtocolError,
    Request,
    ServerConnection,
    api_versions_fallback_response,
    api_versions_response,
    api_versions_table,
    decode_response,
    encode_request,
    encode_response,
)
from minikafka.protocol.types import Writer

import kafka.protocol.admin as kp_admin
import kafka.protocol.consumer as kp_consumer
import kafka.protocol.metadata as kp_metadata
import kafka.protocol.producer as kp_producer
import kafka.protocol.sasl as kp_sasl
from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

GOLDEN = Path(__file__).parent / "golden"

PRODUCE_V2 = {
    "acks": -1,
    "timeout_ms": 1500,
    "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": b"\x00" * 30},
                                                         {"index": 1, "records": None}]}],
}
FETCH_V3 = {
    "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20,
    "topics": [{"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": 42,
                                                    "partition_max_bytes": 65536}]}],
}


def sample_frames() -> list[bytes]:
    """Valid request frames of several shapes (header v1 and v2, nested arrays, nulls)."""
    return [
        encode_request(ApiKey.PRODUCE, 2, 1, "producer-1", PRODUCE_V2),
        encode_request(ApiKey.FETCH, 3, 2, None, FETCH_V3),
        encode_request(ApiKey.METADATA, 1, 3, "c", {"topics": None}),
        encode_request(ApiKey.API_VERSIONS, 3, 4, "c", {"client_software_name": "x",
                                                        "client_software_version": "1"}),
        encode_request(ApiKey.HEARTBEAT, 0, 5, "", {"group_id": "g", "generation_id": 3,
                                                    "member_id": "m"}),
        (GOLDEN / "produce_v2_lz4_request.bin").read_bytes(),
        (GOLDEN / "apiversions_v3_request.bin").read_bytes(),
        encode_request(ApiKey.API_VERSIONS, 4, 8, "kp", None),  # above our range, as kafka-python 3 opens
    ]


SAMPLE_COUNT = len(sample_frames())


def drain(conn: ServerConnection) -> list[Request]:
    out = []
    while (request := conn.next_request()) is not None:
        out.append(request)
    return out


def _key(request: Request) -> tuple:
    return (request.api_key, request.api_version, request.correlation_id, request.client_id,
            request.body)


# ------------------------------------------------------------------------------------------
# reassembly


def test_whole_buffer_of_pipelined_requests():
    frames = sample_frames()
    conn = ServerConnection()
    conn.receive_data(b"".join(frames))
    requests = drain(conn)
    assert [r.correlation_id for r in requests[:5]] == [1, 2, 3, 4, 5]
    assert len(requests) == len(frames)
    assert requests[0].body.topic_data[0].partition_data[0].records == b"\x00" * 30
    assert requests[0].body.topic_data[0].partition_data[1].records is None
    assert requests[1].client_id is None and requests[1].body.max_bytes == 1 << 20
    assert requests[2].body.topics is None
    assert requests[3].body.client_software_name == "x"
    assert (requests[-1].api_version, requests[-1].unsupported_version, requests[-1].body) == (4, True, None)
    assert conn.buffered == 0


def test_one_byte_at_a_time():
    frames = sample_frames()
    expected = [_key(r) for r in _parse_all(b"".join(frames))]
    conn = ServerConnection()
    got = []
    for byte in b"".join(frames):
        conn.receive_data(bytes([byte]))
        got.extend(_key(r) for r in drain(conn))
    assert got == expected


def _parse_all(data: bytes) -> list[Request]:
    conn = ServerConnection()
    conn.receive_data(data)
    return drain(conn)


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(0, 2000), max_size=12))
def test_any_chunking_gives_the_same_requests(cuts):
    data = b"".join(sample_frames())
    expected = [_key(r) for r in _parse_all(data)]
    conn = ServerConnection()
    got = []
    previous = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}) + [len(data)]:
        conn.receive_data(data[previous:cut])
        previous = cut
        got.extend(_key(r) for r in drain(conn))
    assert got == expected


def test_trailing_partial_frame_waits_for_the_rest():
    first, second = sample_frames()[:2]
    conn = ServerConnection()
    conn.receive_data(first + second[:7])
    assert conn.next_request().correlation_id == 1
    assert conn.next_request() is None
    assert conn.buffered == 7
    conn.receive_data(second[7:])
    assert conn.next_request().correlation_id == 2
    assert conn.next_request() is None


def test_large_pipelined_frames_keep_their_bytes():
    """Frames followed by more bytes are copied out and the buffer's consumed head is dropped
    (past 64 KiB); the last whole frame is handed over with the buffer. Each keeps its bytes."""
    frames = [encode_request(ApiKey.PRODUCE, 2, i, "c", {"acks": 1, "timeout_ms": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": bytes([i]) * 40000}]}]}) for i in range(1, 6)]
    conn = ServerConnection()
    conn.receive_data(b"".join(frames) + frames[0][:100])
    requests = drain(conn)
    assert conn.buffered == 100
    conn.receive_data(frames[0][100:] + frames[1])
    requests += drain(conn)
    assert [r.correlation_id for r in requests] == [1, 2, 3, 4, 5, 1, 2]
    assert [r.body.topic_data[0].partition_data[0].records for r in requests] == [
        bytes([r.correlation_id]) * 40000 for r in requests]
    assert conn.buffered == 0


def test_frames_of_a_received_chunk_are_views_of_it():
    """A bytes chunk holding whole frames is not copied: each frame is a view of it (bytes
    are immutable, so the views stay valid whatever is received next)."""
    from minikafka.protocol.framing import _FrameBuffer

    frames = sample_frames()[:3]
    chunk = b"".join(frames) + frames[0][:5]
    buffer = _FrameBuffer(1 << 20)
    buffer.feed(chunk)
    views = [buffer.next_frame() for _ in range(3)]
    assert all(isinstance(view, memoryview) and view.obj is chunk for view in views)
    assert [bytes(view) for view in views] == [frame[4:] for frame in frames]
    assert buffer.next_frame() is None and buffer.buffered == 5
    buffer.feed(frames[0][5:])  # the split frame is gathered, then handed over whole
    assert bytes(buffer.next_frame()) == frames[0][4:]
    assert [bytes(view) for view in views] == [frame[4:] for frame in frames]


def test_a_mutable_chunk_is_copied_not_kept():
    from minikafka.protocol.framing import _FrameBuffer

    frame = sample_frames()[0]
    chunk = bytearray(frame)
    buffer = _FrameBuffer(1 << 20)
    buffer.feed(chunk)
    chunk[4:] = b"\xff" * (len(chunk) - 4)  # the caller reuses its buffer
    assert bytes(buffer.next_frame()) == frame[4:]


def _large_produce(correlation_id: int, size: int) -> bytes:
    return encode_request(ApiKey.PRODUCE, 2, correlation_id, "c", {"acks": 1, "timeout_ms": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": bytes([correlation_id]) * size}]}]})


def _receive_in_place(conn: ServerConnection, data: bytes, step: int) -> bytes:
    """Write up to ``step`` bytes of ``data`` into the connection's receive buffer, as a
    reader's ``readv`` would; the bytes not taken."""
    space = conn.receive_buffer()
    taken = min(len(space), step, len(data))
    space[:taken] = data[:taken]
    conn.buffer_updated(taken)
    return data[taken:]


def test_a_large_frame_is_received_in_place_into_one_buffer_of_its_size():
    from minikafka.protocol.framing import RECEIVE_IN_PLACE_SIZE

    frame = _large_produce(7, 3 * RECEIVE_IN_PLACE_SIZE)
    after = sample_frames()[2]
    conn = ServerConnection()
    assert conn.receive_buffer() is None  # nothing known of the frame yet
    conn.receive_data(frame[:3])
    assert conn.receive_buffer() is None  # nor its size
    conn.receive_data(frame[3:1000])
    space = conn.receive_buffer()
    assert len(space) == len(frame) - 1000 and not space.readonly
    rest = frame[1000:]
    while rest:
        assert conn.next_request() is None and conn.pending_frame_length == len(frame)
        rest = _receive_in_place(conn, rest, 100_000)
    assert conn.buffered == len(frame) and conn.receive_buffer() is None
    conn.receive_data(after)  # bytes after a whole frame are fed as usual
    request = conn.next_request()
    records = request.body.topic_data[0].partition_data[0].records
    assert records == bytes([7]) * 3 * RECEIVE_IN_PLACE_SIZE and not records.readonly
    assert conn.next_request().correlation_id == 3 and conn.buffered == 0


def test_a_frame_below_the_in_place_size_is_gathered_from_what_is_fed():
    frame = sample_frames()[0]
    conn = ServerConnection()
    conn.receive_data(frame[:10])
    assert conn.receive_buffer() is None
    conn.receive_data(frame[10:])
    assert conn.next_request().correlation_id == 1


@settings(max_examples=50, deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(), st.integers(1, 150_000)), min_size=1, max_size=30))
def test_receiving_in_place_or_feeding_gives_the_same_requests(steps):
    """However a reader mixes the two ways of passing bytes (in place wherever it may, or
    always fed), in chunks of any size."""
    data = b"".join([_large_produce(1, 70_000), sample_frames()[1], _large_produce(2, 200_000),
                     _large_produce(3, 65_000), sample_frames()[2]])
    expected = [_key(r) for r in _parse_all(data)]
    conn = ServerConnection()
    got = []
    index = 0
    while data:
        in_place, size = steps[index % len(steps)]
        index += 1
        if in_place and conn.receive_buffer() is not None:
            data = _receive_in_place(conn, data, size)
        else:
            conn.receive_data(data[:size])
            data = data[size:]
        got.extend(_key(r) for r in drain(conn))
    assert got == expected and conn.buffered == 0


def test_an_oversized_frame_is_refused_not_allocated():
    conn = ServerConnection(max_frame_size=100_000)
    conn.receive_data(struct.pack(">i", 200_000) + b"\x00" * 10)
    assert conn.receive_buffer() is None
    with pytest.raises(ProtocolError, match="exceeds the maximum"):
        conn.next_request()


# The last sample's body is never read (see the test after these two).
@pytest.mark.parametrize("index", range(SAMPLE_COUNT - 1))
def test_truncated_frame_bodies_are_protocol_errors(index):
    payload = sample_frames()[index][4:]
    for size in range(len(payload)):
        conn = ServerConnection()
        conn.receive_data(struct.pack(">i", size) + payload[:size])
        with pytest.raises(ProtocolError):
            conn.next_request()


@pytest.mark.parametrize("index", range(SAMPLE_COUNT - 1))
def test_bytes_after_a_request_body_are_ignored_as_kafka_does(index):
    # Kafka's RequestContext.parseRequest reads the body's fields and never checks for more;
    # librdkafka relies on it (test_metadata_v12_of_librdkafka_asking_for_all_topics).
    payload = sample_frames()[index][4:]
    requests = []
    for extra in (b"", b"\x00\x01\x00"):
        conn = ServerConnection()
        conn.receive_data(struct.pack(">i", len(payload + extra)) + payload + extra)
        requests.append(conn.next_request())
        assert conn.next_request() is None and conn.buffered == 0
    assert requests[0] == requests[1]


def test_metadata_v12_of_librdkafka_asking_for_all_topics():
    # librdkafka 2.x reserves four bytes for the topic count and, asking for every topic at v9+,
    # leaves them as they are: a null array, three zero bytes Kafka reads as the request's
    # flags and tagged fields, and the flags librdkafka meant, which Kafka never reads.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(frame)) + frame)
    request = conn.next_request()
    assert (request.api_key, request.api_version, request.client_id) == (3, 12, "rdkafka")
    assert request.body.topics is None and request.body.include_topic_authorized_operations is False


def test_bytes_after_a_response_body_are_protocol_errors():
    conn = ClientConnection(client_id="kp")
    conn.send_request(ApiKey.HEARTBEAT, 0, {"group_id": "g", "generation_id": 1, "member_id": "m"})
    conn.receive_data(struct.pack(">iih", 8, 0, 0) + b"\x00\x00")
    with pytest.raises(ProtocolError, match="unexpected bytes"):
        conn.next_response()


def test_body_of_api_versions_above_our_range_is_not_read():
    # As in Kafka: its layout is unknown to us, so only the header is decoded (a truncated
    # header is still an error) and the answer is the v0 fallback whatever the body holds.
    payload = sample_frames()[-1][4:]
    header_end = 8 + 2 + len("kp")
    for size in range(len(payload) + 1):
        conn = ServerConnection()
        conn.receive_data(struct.pack(">i", size) + payload[:size])
        if size < header_end:
            with pytest.raises(ProtocolError):
                conn.next_request()
        else:
            assert conn.next_request().unsupported_version
    [request] = _parse_all(struct.pack(">i", len(payload) + 3) + payload + b"\xff\xff\xff")
    assert (request.correlation_id, request.client_id, request.body) == (8, "kp", None)


def test_header_v0_is_read_without_a_client_id():
    # ControlledShutdown v0 (broker_id 3) is the one request with header v0: had its body been
    # read as a client_id (length 0), two bytes would be left for a four-byte broker_id.
    payload = struct.pack(">hhi", 7, 0, 12) + struct.pack(">i", 3)
    [request] = _parse_all(struct.pack(">i", len(payload)) + payload)
    assert (request.correlation_id, request.client_id, request.body.broker_id) == (12, None, 3)
    # The same request at v1 has header v1, so its first two body bytes are a client_id.
    payload = struct.pack(">hhi", 7, 1, 13) + b"\x00\x02cs" + struct.pack(">i", 3)
    [request] = _parse_all(struct.pack(">i", len(payload)) + payload)
    assert (request.correlation_id, request.client_id, request.body.broker_id) == (13, "cs", 3)
    # Without the client_id, v1's body is too short.
    payload = struct.pack(">hhi", 7, 1, 14) + struct.pack(">i", 3)
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(payload)) + payload)
    with pytest.raises(ProtocolError, match=r"correlation id 14"):
        conn.next_request()


def test_header_v0_is_written_without_a_client_id():
    frame = encode_request(ApiKey.CONTROLLED_SHUTDOWN, 0, 5, "ignored", {"broker_id": 3})
    assert frame == struct.pack(">ihhii", 12, 7, 0, 5, 3)
    frame = encode_request(ApiKey.CONTROLLED_SHUTDOWN, 1, 5, "cs", {"broker_id": 3})
    assert frame == struct.pack(">ihhih", 16, 7, 1, 5, 2) + b"cs" + struct.pack(">i", 3)


# ------------------------------------------------------------------------------------------
# frame limits


def test_oversized_frame_refused_before_the_body_is_buffered():
    conn = ServerConnection(max_frame_size=1000)
    conn.receive_data(struct.pack(">i", 1001) + b"\x00" * 10)
    assert conn.buffered == 0
    conn.receive_data(b"\x00" * 5000)
    assert conn.buffered == 0  # refused data is not kept
    with pytest.raises(ProtocolError, match="1001 bytes exceeds the maximum of 1000"):
        conn.next_request()
    with pytest.raises(ProtocolError):  # and the connection stays failed
        conn.next_request()


def test_default_limit_is_100_mib():
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", 104857600 + 1))
    with pytest.raises(ProtocolError, match="socket.request.max.bytes"):
        conn.next_request()
    at_limit = ServerConnection()
    at_limit.receive_data(struct.pack(">i", 104857600))
    assert at_limit.next_request() is None


def test_oversized_second_frame_refused_as_soon_as_its_size_arrives():
    frame = sample_frames()[4]
    conn = ServerConnection(max_frame_size=len(frame))
    conn.receive_data(frame + struct.pack(">i", len(frame) + 1))
    assert conn.next_request().api_key == ApiKey.HEARTBEAT
    with pytest.raises(ProtocolError, match="exceeds"):
        conn.next_request()


@pytest.mark.parametrize("size", [-1, -2, -(2**31)])
def test_negative_sizes_refused(size):
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", size))
    with pytest.raises(ProtocolError, match="negative frame size"):
        conn.next_request()


# ------------------------------------------------------------------------------------------
# headers, unknown APIs and versions


def test_unknown_api_key_names_the_key_after_parsing_the_header():
    payload = struct.pack(">hhih", 99, 0, 77, 3) + b"cli"
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(payload)) + payload)
    with pytest.raises(ProtocolError, match=r"unknown api key 99 \(api key 99, correlation id 77, client 'cli'\)"):
        conn.next_request()


@pytest.mark.parametrize(("api_key", "version"), [(ApiKey.PRODUCE, 12), (ApiKey.METADATA, 13),
                                                  (ApiKey.FETCH, 12), (ApiKey.OFFSET_FETCH, 9),
                                                  (ApiKey.PRODUCE, -1)])
def test_unsupported_versions_of_other_apis_are_refused(api_key, version):
    payload = struct.pack(">hhih", api_key, version, 5, -1) + b"\x00" * 20
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(payload)) + payload)
    with pytest.raises(ProtocolError, match=rf"v{version} is not supported.*api key {int(api_key)}"):
        conn.next_request()


def test_malformed_body_error_names_the_request():
    frame = encode_request(ApiKey.HEARTBEAT, 0, 9, "c", {"group_id": "g", "member_id": "m"})
    conn = ServerConnection()
    conn.receive_data(frame[:-3] + b"\xff\xff\xff")  # member_id length becomes huge
    conn.receive_data(b"")
    with pytest.raises(ProtocolError, match=r"HeartbeatRequest v0.*correlation id 9"):
        conn.next_request()


def _api_versions_v3_payload(header_tags: bytes, client_id: bytes = b"\x00\x03cli") -> bytes:
    """An ApiVersions v3 request payload: header v2 (client_id an int16-length string, then
    the header's tagged fields as given), then the flexible body."""
    body = b"\x04abc" + b"\x021" + b"\x00"  # compact strings (length + 1) "abc" and "1", no tags
    return struct.pack(">hhi", ApiKey.API_VERSIONS, 3, 41) + client_id + header_tags + body


def test_request_header_v2_skips_unknown_header_tagged_fields():
    # two header tags, 0 (3 bytes) and 5 (empty): no tag is defined for requests, so all are skipped
    payload = _api_versions_v3_payload(b"\x02" + b"\x00\x03xyz" + b"\x05\x00")
    [request] = _parse_all(struct.pack(">i", len(payload)) + payload)
    assert (request.api_version, request.correlation_id, request.client_id) == (3, 41, "cli")
    assert (request.body.client_software_name, request.body.client_software_version) == ("abc", "1")
    null_client = _api_versions_v3_payload(b"\x00", client_id=b"\xff\xff")
    [request] = _parse_all(struct.pack(">i", len(null_client)) + null_client)
    assert request.client_id is None and request.body.client_software_name == "abc"


@pytest.mark.parametrize("header_tags", [
    b"\x01\x00\x40xyz",  # a tag claiming 64 bytes runs past the frame
    b"\x01\x00",  # the tag's size is missing
    b"\x01\x80\x80\x80\x80\x80\x01",  # an unsigned varint longer than 5 bytes
])
def test_request_header_v2_with_bad_tagged_fields_is_a_protocol_error(header_tags):
    payload = struct.pack(">hhi", ApiKey.API_VERSIONS, 3, 41) + b"\x00\x03cli" + header_tags
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(payload)) + payload)
    with pytest.raises(ProtocolError):
        conn.next_request()


def test_header_v1_requests_have_no_header_tagged_fields():
    # Produce v2 is not flexible: a tag byte after client_id is read as the body and refused.
    frame = encode_request(ApiKey.PRODUCE, 2, 7, "c", PRODUCE_V2)
    client_id_end = 4 + 8 + 2 + 1
    tagged = frame[:client_id_end] + b"\x00" + frame[client_id_end:]
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(tagged) - 4) + tagged[4:])
    with pytest.raises(ProtocolError):
        conn.next_request()


@pytest.mark.parametrize(("cls", "version", "body"), [
    (kp_producer.ProduceRequest, 2, PRODUCE_V2),
    (kp_consumer.FetchRequest, 3, FETCH_V3),
    (kp_metadata.MetadataRequest, 0, {"topics": []}),
    (kp_metadata.ApiVersionsRequest, 3, {"client_software_name": "kafka-python",
                                         "client_software_version": "3.0.12"}),
    (kp_metadata.ApiVersionsRequest, 0, {}),
])
def test_kafka_python_framed_requests_with_headers(cls, version, body, kafka_python_message):
    message = kafka_python_message(cls, version, body)
    message.with_header(correlation_id=31, client_id="kp-client")
    conn = ServerConnection()
    conn.receive_data(bytes(message.encode(header=True, framed=True)))
    request = conn.next_request()
    assert (request.api_version, request.correlation_id, request.client_id) == (version, 31, "kp-client")
    assert request.body == _parse_all(encode_request(cls.API_KEY, version, 31, "kp-client", body))[0].body


# Every flexible version of the APIs clients send, ApiVersions aside (its response header stays v0).
FLEXIBLE = [(api, version) for api in APIS.values() for version in range(api.min_version, api.max_version + 1)
            if api.is_flexible(version) and api.key != ApiKey.API_VERSIONS]


def _kafka_python_class(api, direction: str):
    name = api.name + direction
    return next(getattr(module, name) for module in (kp_producer, kp_consumer, kp_metadata, kp_admin, kp_sasl)
                if hasattr(module, name))


@pytest.mark.parametrize(("api", "version"), FLEXIBLE, ids=[f"{a.name}-v{v}" for a, v in FLEXIBLE])
def test_flexible_frames_are_kafka_pythons_byte_for_byte(api, version, kafka_python_message):
    """Request header v2 (a classic client id, then tagged fields) and response header v1
    (tagged fields after the correlation id), framed, exactly as kafka-python writes them."""
    for direction, codec in (("Request", api.request(version)), ("Response", api.response(version))):
        w = Writer()
        codec.encode(w, {})
        body = codec.decode(memoryview(b"".join(w.finish()))).to_dict()
        message = kafka_python_message(_kafka_python_class(api, direction), version, body)
        message.with_header(correlation_id=31, client_id="kp-client")
        theirs = bytes(message.encode(header=True, framed=True))
        if direction == "Request":
            ours = encode_request(api.key, version, 31, "kp-client", body)
            assert ours[12:24] == b"\x00\x09kp-client\x00"   # header v2: int16 client id, no tags
        else:
            ours = b"".join(encode_response(Request(api.key, version, 31, "c", None), body))
            assert ours[8] == 0   # header v1: no tags after the correlation id
        assert ours == theirs, direction


def test_response_header_v0_for_api_versions_even_at_v3():
    request = Request(ApiKey.API_VERSIONS, 3, 12, "c", None)
    frame = b"".join(encode_response(request, api_versions_response()))
    assert struct.unpack_from(">iih", frame) == (len(frame) - 4, 12, 0)  # no tag byte after the id
    theirs = kp_metadata.ApiVersionsResponse[3].decode(frame, header=True, framed=True)
    assert theirs.header.correlation_id == 12 and theirs.error_code == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in theirs.api_keys} == set(api_versions_table())


def test_tagged_fields_with_default_values_are_not_written():
    request = Request(ApiKey.API_VERSIONS, 3, 1, "c", None)
    plain = b"".join(encode_response(request, api_versions_response()))
    assert plain.endswith(b"\x00\x00\x00\x00" + b"\x00")  # throttle_time_ms, then zero tags
    assert b"".join(encode_response(request, {**api_versions_response(), "finalized_features_epoch": -1,
                                             "zk_migration_ready": False, "supported_features": []})) == plain
    tagged = b"".join(encode_response(request, {**api_versions_response(), "finalized_features_epoch": 5}))
    assert tagged.endswith(b"\x01" + b"\x01\x08" + struct.pack(">q", 5))
    assert decode_response(ApiKey.API_VERSIONS, 3, tagged).finalized_features_epoch == 5


def test_api_versions_at_an_unsupported_version_gets_a_v0_error_with_our_table():
    # kafka-python 3 opens with ApiVersions v4, which we do not serve.
    message = kp_metadata.ApiVersionsRequest[4](client_software_name="kafka-python",
                                                client_software_version="3.0.12")
    message.with_header(correlation_id=1, client_id="kp")
    conn = ServerConnection()
    conn.receive_data(bytes(message.encode(header=True, framed=True)))
    request = conn.next_request()
    assert request.unsupported_version and request.body is None and request.api_version == 4
    frame = b"".join(conn.encode_response(request, api_versions_fallback_response()))
    # v0 layout: header, error_code, api_keys, and nothing else (no throttle time, no tags)
    assert len(frame) == 4 + 4 + 2 + 4 + 6 * len(api_versions_table())
    theirs = kp_metadata.ApiVersionsResponse[4].decode(frame, header=True, framed=True)
    assert theirs.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key: (k.min_version, k.max_version) for k in theirs.api_keys}[18] == (0, 3)
    ours = decode_response(ApiKey.API_VERSIONS, 4, frame)
    assert ours.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_served_table_offers_idempotence_with_metadata_v4():
    """kafka-python 3 infers a broker of 0.11 or later exactly when Metadata v4 is offered, and
    then turns idempotence on by default: both come with InitProducerId (issue 25; v2-v4, with
    the transaction coordinator, issue 26)."""
    table = {key: (low, high) for key, low, high in api_versions_table()}
    assert infer_broker_version_from_api_versions(table) >= (0, 11)
    assert table[ApiKey.METADATA][1] >= 4 and table[ApiKey.INIT_PRODUCER_ID] == (0, 4)


def test_api_versions_body_can_be_restricted_to_the_served_keys():
    served = {ApiKey.PRODUCE, ApiKey.API_VERSIONS, ApiKey.METADATA}
    for body in (api_versions_response(served=served), api_versions_fallback_response(served)):
        assert [(k["api_key"], k["min_version"], k["max_version"]) for k in body["api_keys"]] == [
            row for row in api_versions_table() if row[0] in served]
    assert api_versions_fallback_response(served)["error_code"] == ErrorCode.UNSUPPORTED_VERSION


# ------------------------------------------------------------------------------------------
# responses: chunks and file slices


@dataclass(frozen=True)
class SegmentSlice:
    """Bytes of a real file on disk, shaped as storage's FileSlice (protocol tests cannot
    import storage, a layer above): not bytes-like, an int ``length``, ``read_bytes``."""

    path: Path
    position: int
    length: int

    def read_bytes(self) -> bytes:
        with open(self.path, "rb") as file:
            return os.pread(file.fileno(), self.length, self.position)


def _fetch_response_body(records_a, records_b):
    return {"responses": [{"topic": "orders", "partitions": [
        {"partition_index": 0, "high_watermark": 10, "records": records_a},
        {"partition_index": 1, "error_code": ErrorCode.OFFSET_OUT_OF_RANGE, "high_watermark": -1,
         "records": records_b},
    ]}]}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_file_slices_become_their_own_chunks(version, tmp_path):
    segment = tmp_path / "00000000000000000000.log"
    stored = os.urandom(500)
    segment.write_bytes(stored)
    slice_a, slice_b = SegmentSlice(segment, 100, 300), SegmentSlice(segment, 500, 0)
    request = Request(ApiKey.FETCH, version, 99, "c", None)
    chunks = encode_response(request, _fetch_response_body(slice_a, slice_b))
    # Encoded bytes are handed over as the bytearrays they were built in; the empty slice is inlined.
    assert [type(c) for c in chunks] == [bytearray, SegmentSlice, bytearray]
    assert chunks[1] is slice_a
    total = sum(len(c) if isinstance(c, bytearray) else c.length for c in chunks)
    assert struct.unpack_from(">i", chunks[0])[0] == total - 4
    wire = b"".join(c if isinstance(c, bytearray) else c.read_bytes() for c in chunks)
    assert wire == b"".join(encode_response(request, _fetch_response_body(stored[100:400], b"")))
    decoded = decode_response(ApiKey.FETCH, version, wire)
    assert decoded.responses[0].partitions[0].records == stored[100:400]
    theirs = kp_consumer.FetchResponse[version].decode(wire, header=True, framed=True)
    assert theirs.header.correlation_id == 99
    assert bytes(theirs.responses[0].partitions[0].records.buffer()
                 if hasattr(theirs.responses[0].partitions[0].records, "buffer")
                 else theirs.responses[0].partitions[0].records) == stored[100:400]


def test_large_in_memory_records_are_not_copied_into_the_header_chunk():
    big = os.urandom(100_000)
    chunks = encode_response(Request(ApiKey.FETCH, 2, 1, "c", None), _fetch_response_body(big, None))
    assert any(c is big for c in chunks)
    assert decode_response(ApiKey.FETCH, 2, b"".join(chunks)).responses[0].partitions[0].records == big


def test_client_and_server_connections_pipeline():
    client = ClientConnection(client_id="t")
    server = ServerConnection()
    _, first = client.send_request(ApiKey.METADATA, 2, {"topics": [{"name": "a"}]})
    _, second = client.send_request(ApiKey.PRODUCE, 0, {"acks": 0, "topic_data": []}, expect_response=False)
    _, third = client.send_request(ApiKey.LIST_GROUPS, 0, {})
    server.receive_data(first + second + third)
    requests = drain(server)
    assert [r.api_key for r in requests] == [ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.LIST_GROUPS]
    out = b"".join(server.encode_response(requests[0], {"cluster_id": "x", "topics": [{"name": "a"}]}))
    out += b"".join(server.encode_response(requests[2], {"groups": [{"group_id": "g", "protocol_type": "consumer"}]}))
    for byte in out:
        client.receive_data(bytes([byte]))
    metadata, groups = client.next_response(), client.next_response()
    assert client.next_response() is None and client.pending == 0
    assert (metadata.correlation_id, metadata.body.cluster_id, metadata.body.topics[0].name) == (0, "x", "a")
    assert (groups.correlation_id, groups.body.groups[0].group_id) == (2, "g")


# ------------------------------------------------------------------------------------------
# robustness: only ProtocolError escapes


def _feed_and_drain(chunks: list[bytes], max_frame_size: int = 1 << 20) -> tuple[list[tuple], str | None]:
    """Requests decoded from ``chunks`` fed in turn, and the ProtocolError that stopped them
    (None if none did); any other exception fails the test."""
    conn = ServerConnection(max_frame_size=max_frame_size)
    requests = []
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while (request := conn.next_request()) is not None:
                requests.append(_key(request))
    except ProtocolError as exc:
        return requests, str(exc)
    return requests, None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_random_bytes(data):
    assert _feed_and_drain([data[i:i + 1] for i in range(len(data))]) == _feed_and_drain([data])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(header=st.tuples(st.sampled_from([int(k) for k in ApiKey] + [99, -1]), st.integers(-1, 5),
                        st.integers(-(2**31), 2**31 - 1)),
       rest=st.binary(max_size=200))
def test_random_bodies_behind_valid_headers(header, rest):
    payload = struct.pack(">hhi", *header) + rest
    _feed_and_drain([struct.pack(">i", len(payload)) + payload])


_MUTATION = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.just(0)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, SAMPLE_COUNT - 1), mutations=st.lists(_MUTATION, min_size=1, max_size=6),
       keep_size=st.booleans(), cuts=st.lists(st.integers(0, 400), max_size=4))
def test_mutated_frames(index, mutations, keep_size, cuts):
    frame = bytearray(sample_frames()[index])
    payload = frame[4:]
    for kind, position, value in mutations:
        position %= len(payload) + 1
        if kind == "set" and position < len(payload):
            payload[position] = value
        elif kind == "insert":
            payload.insert(position, value)
        elif kind == "delete" and position < len(payload):
            del payload[position]
    # Either keep the size prefix consistent (exercises the body decoders) or not (framing).
    prefix = struct.pack(">i", len(payload)) if keep_size else bytes(frame[:4])
    data = prefix + bytes(payload) + sample_frames()[0]
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0] + points, points + [len(data)])]
    # Whole, in random chunks, or a byte at a time: the same requests and the same error.
    whole = _feed_and_drain([data])
    assert _feed_and_drain(chunks) == whole
    assert _feed_and_drain([data[i:i + 1] for i in range(len(data))]) == whole


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api_key=st.sampled_from(list(ApiKey)), data=st.binary(max_size=120))
def test_random_response_bytes_on_the_client_side(api_key, data):
    client = ClientConnection()
    client.send_request(ApiKey.API_VERSIONS, 0, {})
    try:
        decode_response(api_key, 0, struct.pack(">i", len(data)) + data)
    except ProtocolError:
        pass
    client.receive_data(struct.pack(">i", len(data)) + data)
    try:
        client.next_response()
    except ProtocolError:
        pass
