"""The columnar segment reader against protocol.records.iter_records, on real files."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.export.segment_reader import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS, SegmentCorrupt, read_segment
from minikafka.protocol.compression import MESSAGE_SET_CODECS
from minikafka.protocol.records import CREATE_TIME, LOG_APPEND_TIME, Codec, build_message_set, iter_records

T0 = 1_700_000_000_000


def rows(path, **kwargs) -> list[tuple]:
    batches = list(read_segment(path, "t", 7, **kwargs))
    for batch in batches:
        assert batch.schema == ARROW_SCHEMA
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    assert set(table.column("topic").to_pylist()) == {"t"}
    assert set(table.column("partition").to_pylist()) == {7}
    micros = table.column("timestamp").cast(pa.int64()).to_pylist()
    return list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                    table.column("value").to_pylist(), [m // 1000 for m in micros],
                    table.column("timestampType").to_pylist()))


def expected(data: bytes) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type) for r in iter_records(data)]


def mixed_segment(seed: int, sets: int = 150) -> bytes:
    """Every codec, magic 0 and 1, null and empty keys and values, both timestamp types."""
    rnd = random.Random(seed)
    out = bytearray()
    offset = 0
    for _ in range(sets):
        magic = rnd.choice([0, 1])
        codec = rnd.choice(MESSAGE_SET_CODECS)
        count = rnd.randint(1, 6)
        records = [(rnd.choice([None, b"", b"key-%d" % rnd.randint(0, 99)]),
                    rnd.choice([None, b"", bytes(rnd.randint(0, 255) for _ in range(rnd.randint(1, 300)))]),
                    T0 + rnd.randint(-5_000, 5_000_000)) for _ in range(count)]
        timestamp_type = rnd.choice([CREATE_TIME, LOG_APPEND_TIME]) if magic == 1 else CREATE_TIME
        out += build_message_set(records, magic=magic, codec=codec, base_offset=offset,
                                 timestamp_type=timestamp_type)
        offset += count
    return bytes(out)


@pytest.mark.parametrize("batch_records", [1, 7, 65536])
def test_matches_iter_records(tmp_path, batch_records):
    data = mixed_segment(1)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    assert rows(path, batch_records=batch_records) == expected(data)


def test_offset_range_is_half_open_and_cuts_through_wrappers(tmp_path):
    data = mixed_segment(2)
    path = tmp_path / "s.log"
    path.write_bytes(data)
    everything = expected(data)
    assert rows(path, start_offset=101, end_offset=333) == [r for r in everything if 101 <= r[0] < 333]
    assert rows(path, start_offset=10_000) == []


def test_starting_timestamp_starts_at_first_record_reaching_it(tmp_path):
    data = mixed_segment(3)
    path = tmp_path / "s.log"
    path.write_bytes(data)
    everything = expected(data)
    target = T0 + 2_000_000
    first = next(i for i, r in enumerate(everything) if r[3] >= target)
    # From that record on, everything is read, including later records with older timestamps.
    assert rows(path, start_timestamp=target) == everything[first:]


def test_magic0_has_no_timestamp_type(tmp_path):
    path = tmp_path / "s.log"
    path.write_bytes(build_message_set([(None, b"a", T0), (b"k", None, T0)], magic=0, codec=Codec.GZIP))
    assert rows(path) == [(0, None, b"a", -1, -1), (1, b"k", None, -1, -1)]


def test_truncated_tail_is_not_an_error(tmp_path):
    data = mixed_segment(4, sets=20)
    path = tmp_path / "s.log"
    path.write_bytes(data + build_message_set([(b"k", b"v" * 100, T0)], base_offset=999)[:-7])
    assert rows(path) == expected(data)


def test_flipped_bit_is_refused(tmp_path):
    data = bytearray(build_message_set([(b"k", b"value", T0)] * 3))
    data[-2] ^= 0x10
    path = tmp_path / "s.log"
    path.write_bytes(bytes(data))
    with pytest.raises(SegmentCorrupt, match="CRC"):
        rows(path)


def test_empty_file(tmp_path):
    path = tmp_path / "s.log"
    path.write_bytes(b"")
    assert rows(path) == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from(MESSAGE_SET_CODECS),
                          st.lists(st.tuples(st.none() | st.binary(max_size=20),
                                             st.none() | st.binary(max_size=200),
                                             st.integers(0, 2**41)), min_size=1, max_size=5)),
                min_size=1, max_size=12))
def test_any_message_sets(tmp_path_factory, sets):
    out = bytearray()
    offset = 0
    for magic, codec, records in sets:
        out += build_message_set(records, magic=magic, codec=codec, base_offset=offset)
        offset += len(records)
    path = tmp_path_factory.mktemp("seg") / "s.log"
    path.write_bytes(bytes(out))
    assert rows(path, batch_records=3) == expected(bytes(out))


def test_batches_are_bounded_in_bytes(tmp_path, monkeypatch):
    import minikafka.export.segment_reader as segment_reader

    monkeypatch.setattr(segment_reader, "_MAX_BATCH_BYTES", 1000)
    data = mixed_segment(6, sets=60)
    path = tmp_path / "s.log"
    path.write_bytes(data)
    batches = list(read_segment(path, "t", 7))
    assert len(batches) > 5
    assert rows(path) == expected(data)


# --- magic 2 batches (built by kafka-python's producer code, not ours) -----------------------


def v2_batch(records, *, base_offset: int, codec: int = 0, transactional: bool = False,
             attributes: int = 0) -> bytes:
    """One v2 batch of ``(key, value, timestamp, headers)`` records at ``base_offset``;
    ``attributes`` bits are set afterwards, the CRC-32C fixed (LogAppendTime, control)."""
    import struct

    import crcmod.predefined
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=int(transactional),
                                        producer_id=5 if transactional else -1,
                                        producer_epoch=0 if transactional else -1,
                                        base_sequence=0 if transactional else -1, batch_size=1 << 24)
    for delta, (key, value, timestamp, headers) in enumerate(records):
        assert builder.append(delta, timestamp=timestamp, key=key, value=value, headers=headers) is not None
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    if attributes:
        struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | attributes)
        struct.pack_into(">I", data, 17, crcmod.predefined.mkCrcFun("crc-32c")(bytes(data[21:])))
    return bytes(data)


def v2_rows(path, **kwargs) -> list[tuple]:
    batches = list(read_segment(path, "t", 7, include_headers=True, **kwargs))
    for batch in batches:
        assert batch.schema == ARROW_SCHEMA_WITH_HEADERS
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    micros = table.column("timestamp").cast(pa.int64()).to_pylist()
    headers = [None if h is None else [(e["key"], e["value"]) for e in h] for h in table.column("headers").to_pylist()]
    return list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                    table.column("value").to_pylist(), [m // 1000 for m in micros],
                    table.column("timestampType").to_pylist(), headers))


HEADERS = [("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), ("none", None),
           ("unicode-\u00e9", b"")]


def v2_and_mixed_segment() -> tuple[bytes, list[tuple]]:
    """Magic 0 and 1 sets, then v2 batches of every codec (some with headers, one under
    LogAppendTime, one transactional) and a control batch: the bytes and the rows expected."""
    data = bytearray()
    rows_expected = []
    old = [(b"k%d" % i, b"old %d" % i, T0 + i) for i in range(4)]
    data += build_message_set(old[:2], magic=0, codec=Codec.GZIP)
    data += build_message_set(old[2:], magic=1, base_offset=2)
    rows_expected += [(0, b"k0", b"old 0", -1, -1, None), (1, b"k1", b"old 1", -1, -1, None)]
    rows_expected += [(2 + i, k, v, ts, CREATE_TIME, None) for i, (k, v, ts) in enumerate(old[2:])]
    offset = 4
    for codec in (0, 1, 2, 3):
        records = [(None if i % 2 else b"key-%d" % i, b"value %d" % i * 20 if i != 3 else None, T0 + 100 * i,
                    HEADERS if i % 3 == 0 else []) for i in range(6)]
        data += v2_batch(records, base_offset=offset, codec=codec)
        rows_expected += [(offset + i, k, v, ts, CREATE_TIME, h or None) for i, (k, v, ts, h) in enumerate(records)]
        offset += len(records)
    appended = [(b"a", b"b", T0, []), (None, b"c", T0 + 5, [("h", b"1")])]
    data += v2_batch(appended, base_offset=offset, codec=3, attributes=0x08)  # LogAppendTime: maxTimestamp
    rows_expected += [(offset + i, k, v, T0 + 5, LOG_APPEND_TIME, h or None) for i, (k, v, _, h) in enumerate(appended)]
    offset += 2
    data += v2_batch([(b"t", b"in a transaction", T0, [])], base_offset=offset, transactional=True)
    rows_expected.append((offset, b"t", b"in a transaction", T0, CREATE_TIME, None))
    offset += 1
    data += v2_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", T0, [])], base_offset=offset,
                     transactional=True, attributes=0x20)  # a commit marker: no record for consumers
    offset += 1
    data += build_message_set([(b"back", b"to magic 1", T0 + 9)], magic=1, base_offset=offset)
    rows_expected.append((offset, b"back", b"to magic 1", T0 + 9, CREATE_TIME, None))
    return bytes(data), rows_expected


@pytest.mark.parametrize("batch_records", [1, 5, 65536])
def test_v2_batches_and_mixed_segments_with_headers(tmp_path, batch_records):
    data, rows_expected = v2_and_mixed_segment()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    assert v2_rows(path, batch_records=batch_records) == rows_expected
    # Without include_headers: Spark's plain Kafka schema, the same rows.
    assert rows(path) == [row[:5] for row in rows_expected]


def test_v2_offset_range_and_starting_timestamp(tmp_path):
    data, rows_expected = v2_and_mixed_segment()
    path = tmp_path / "s.log"
    path.write_bytes(data)
    assert v2_rows(path, start_offset=6, end_offset=13) == [r for r in rows_expected if 6 <= r[0] < 13]
    first = next(r for r in rows_expected if r[0] >= 4 and r[3] >= T0 + 300)
    assert v2_rows(path, start_offset=4, start_timestamp=T0 + 300)[0] == first


def test_v2_truncated_tail_and_flipped_bit(tmp_path):
    data, rows_expected = v2_and_mixed_segment()
    path = tmp_path / "s.log"
    path.write_bytes(data + v2_batch([(b"k", b"v" * 100, T0, HEADERS)], base_offset=100)[:-9])
    assert v2_rows(path) == rows_expected
    flipped = bytearray(v2_batch([(b"k", b"value", T0, HEADERS)], base_offset=0))
    flipped[-3] ^= 0x04
    path.write_bytes(bytes(flipped))
    with pytest.raises(SegmentCorrupt, match="CRC"):
        v2_rows(path)
