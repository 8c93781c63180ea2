"""The columnar segment reader against protocol.records.iter_records, on real files."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.export.segment_reader import ARROW_SCHEMA, SegmentCorrupt, read_segment
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
