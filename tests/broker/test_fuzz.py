"""Fuzzed requests over real sockets: whatever a client sends, the broker answers or closes
that connection, and keeps serving everyone else."""

from __future__ import annotations

import random
import struct

import trio

from minikafka.protocol.apis import APIS, ApiKey
from minikafka.protocol.framing import encode_request


def rich_bodies(message_set: bytes) -> dict[int, dict]:
    """A realistic request body per API (valid at every served version), for mutation."""
    partitions = [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 4096} for p in (0, 1)]
    return {
        ApiKey.PRODUCE: {"acks": 1, "timeout_ms": 100, "topic_data": [
            {"name": "fuzzed", "partition_data": [{"index": 0, "records": message_set}]}]},
        ApiKey.FETCH: {"replica_id": -1, "max_wait_ms": 10, "min_bytes": 1, "max_bytes": 8192,
                       "topics": [{"topic": "fuzzed", "partitions": partitions}]},
        ApiKey.LIST_OFFSETS: {"replica_id": -1, "topics": [{"name": "fuzzed", "partitions": [
            {"partition_index": 0, "timestamp": -1, "max_num_offsets": 3}]}]},
        ApiKey.METADATA: {"topics": [{"name": "fuzzed"}, {"name": "fuzzed-2"}]},
        ApiKey.CREATE_TOPICS: {"topics": [{"name": "fuzz-new", "num_partitions": 2, "replication_factor": 1,
                                           "assignments": [], "configs": [{"name": "retention.ms", "value": "1000"}]}],
                               "timeout_ms": 100, "validate_only": False},
        ApiKey.DELETE_TOPICS: {"topic_names": ["fuzz-new", "fuzzed-2"], "timeout_ms": 100},
        ApiKey.OFFSET_FOR_LEADER_EPOCH: {"topics": [{"topic": "fuzzed", "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
    }


def fuzzed_frames(seed: int, message_set: bytes):
    """(description, frame) pairs: for every API and version, valid requests (realistic for
    the broker's own APIs, minimal for the others) with bits flipped, cut short, extended, or
    replaced by noise, all correctly size-prefixed."""
    rng = random.Random(seed)
    for key, api in sorted(APIS.items()):
        for version in range(api.min_version, api.max_version + 1):
            valid = encode_request(key, version, 1, "fuzz", rich_bodies(message_set).get(key, {}))
            client_id_len = 0 if (key, version) == (ApiKey.CONTROLLED_SHUTDOWN, 0) else 2 + len(b"fuzz")
            header_len = 4 + 2 + 2 + 4 + client_id_len + (1 if api.is_flexible(version) else 0)
            header, body = valid[4:header_len], valid[header_len:]
            bodies = [
                bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 64))),
                body[: rng.randrange(0, len(body))] if body else b"",
                body + bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 16))),
            ]
            for _ in range(6 if body else 0):
                flipped = bytearray(body)
                for _ in range(rng.randrange(1, 4)):
                    flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
                bodies.append(bytes(flipped))
            for fuzzed in bodies:
                payload = header + fuzzed
                yield f"{ApiKey(key).name} v{version}", struct.pack(">i", len(payload)) + payload


async def test_fuzzed_requests_never_take_the_broker_down(broker, connect, message_set):
    healthy = await connect()
    for description, frame in fuzzed_frames(20261122, message_set(b"fuzz")):
        fuzzer = await connect()
        await fuzzer.send_raw(frame)
        with trio.move_on_after(0.3):  # an answer, a close, or a legitimately long poll
            try:
                await fuzzer.stream.receive_some(65536)
            except trio.BrokenResourceError:
                pass
        await trio.aclose_forcefully(fuzzer.stream)
    result = await healthy.produce("after-fuzz", 0, message_set(b"alive"))
    assert result.error_code == 0
    fetched = await healthy.fetch("after-fuzz", 0, result.base_offset)
    assert b"alive" in bytes(fetched.records)
    assert (await healthy.request(ApiKey.API_VERSIONS, 0, {})).error_code == 0
