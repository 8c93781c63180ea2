"""format("minikafka") on Kafka-layout log directories, through a real local SparkSession."""

from __future__ import annotations

import pytest

from minikafka.export.datasource import SCHEMA, SCHEMA_WITH_HEADERS
from minikafka.protocol.records import build_message_set, iter_records

from .conftest import plain_segment, write_segments
from .test_segment_reader import mixed_segment, v2_and_mixed_segment

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000


@pytest.fixture
def log_dir(tmp_path):
    """Topic ``a``: partition 0 has closed segments [0,10) [10,25) and active [25,30);
    partition 1 has closed [0,5) and active [5,8). Topic ``b``: one active segment."""
    write_segments(tmp_path, "a", 0, [plain_segment(0, 10), plain_segment(10, 15), plain_segment(25, 5)])
    write_segments(tmp_path, "a", 1, [plain_segment(0, 5), plain_segment(5, 3)])
    write_segments(tmp_path, "b", 0, [plain_segment(0, 4)])
    return tmp_path


def read(spark, log_dir, **options):
    reader = spark.read.format("minikafka")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(str(log_dir))


def offsets(df) -> list[tuple[str, int, int]]:
    return sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect())


def test_schema_is_sparks_kafka_schema(spark, log_dir):
    df = read(spark, log_dir)
    assert df.schema.simpleString() == spark.createDataFrame([], SCHEMA).schema.simpleString()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]


def test_closed_segments_only_by_default_one_partition_each(spark, log_dir):
    df = read(spark, log_dir)
    assert df.rdd.getNumPartitions() == 3
    assert offsets(df) == [("a", 0, o) for o in range(25)] + [("a", 1, o) for o in range(5)]
    row = df.where("partition = 0 AND offset = 3").collect()[0]
    assert (row.key, row.value, row.timestampType) == (b"k3", b"v3", 0)
    assert int(row.timestamp.timestamp() * 1000) == T0 + 3000


def test_include_active_segment(spark, log_dir):
    df = read(spark, log_dir, includeActiveSegment="true")
    assert df.rdd.getNumPartitions() == 6
    assert offsets(df) == ([("a", 0, o) for o in range(30)] + [("a", 1, o) for o in range(8)]
                           + [("b", 0, o) for o in range(4)])


def test_topics_partitions_and_offsets(spark, log_dir):
    df = read(spark, log_dir, topics="a", partitions="0",
              startingOffsets='{"a": {"0": 7}}', endingOffsets='{"a": {"0": 12}}')
    assert offsets(df) == [("a", 0, o) for o in range(7, 12)]
    # Offsets can name -2 (earliest) and -1 (latest); unnamed partitions take the defaults.
    df = read(spark, log_dir, topics="a", startingOffsets='{"a": {"0": -2, "1": 3}}',
              endingOffsets='{"a": {"0": 2}}')
    assert offsets(df) == [("a", 0, 0), ("a", 0, 1), ("a", 1, 3), ("a", 1, 4)]


def test_starting_timestamp(spark, log_dir):
    df = read(spark, log_dir, topics="a", startingTimestamp=str(T0 + 12_500))
    assert offsets(df) == [("a", 0, o) for o in range(13, 25)]


def test_every_codec_and_magic(spark, tmp_path):
    data = mixed_segment(5)
    records = list(iter_records(data))
    last = records[-1].offset
    write_segments(tmp_path, "m", 0, [(0, data), (last + 1, build_message_set([(None, b"x", T0)],
                                                                               base_offset=last + 1))])
    got = read(spark, tmp_path).orderBy("offset").collect()
    assert [(r.offset, r.key, r.value, r.timestampType) for r in got] == [
        (r.offset, r.key, r.value, r.timestamp_type) for r in records]
    assert [round(r.timestamp.timestamp() * 1000) for r in got] == [r.timestamp for r in records]


def test_empty_selection(spark, log_dir):
    assert read(spark, log_dir, topics="b").count() == 0


@pytest.mark.parametrize("options, message", [
    ({"topics": "nope"}, "topic 'nope' not found"),
    ({"startingOffsets": "latest"}, "not allowed for a batch read"),
    ({"endingOffsets": "{bad"}, "endingOffsets must be"),
    ({"includeActiveSegment": "maybe"}, "true or false"),
])
def test_bad_options_are_clear(spark, log_dir, options, message):
    with pytest.raises(Exception, match=message):
        read(spark, log_dir, **options).collect()


def test_missing_log_dir(spark, tmp_path):
    with pytest.raises(Exception, match="does not exist"):
        read(spark, tmp_path / "missing").collect()


def test_include_headers_reads_v2_and_mixed_segments_as_sparks_kafka_source(spark, tmp_path):
    data, rows_expected = v2_and_mixed_segment()
    last = rows_expected[-1][0]
    write_segments(tmp_path, "h", 0, [(0, data), (last + 1, build_message_set([(None, b"x", T0)],
                                                                             base_offset=last + 1))])
    df = read(spark, tmp_path, includeHeaders="true")
    # Spark's Kafka source with includeHeaders appends exactly this column.
    assert df.schema.simpleString() == spark.createDataFrame([], SCHEMA_WITH_HEADERS).schema.simpleString()
    assert df.schema.simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")
    got = df.orderBy("offset").collect()
    assert [(r.offset, r.key, r.value, round(r.timestamp.timestamp() * 1000), r.timestampType,
             None if r.headers is None else [(h.key, h.value) for h in r.headers]) for r in got] == rows_expected
    assert "headers" not in read(spark, tmp_path).columns
