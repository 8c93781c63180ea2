"""The ``minikafka`` Spark data source: read segment files directly, no broker in between.

Usage (pyspark 4 Python Data Source API)::

    from minikafka.export.datasource import register
    register(spark)
    df = (spark.read.format("minikafka")
          .option("topics", "clicks,views")          # default: every topic in the log dir
          .option("partitions", "0,1")               # default: every partition
          # or .option("assign", '{"clicks": [0, 1]}')   exact topic-partitions
          .option("startingOffsets", '{"clicks": {"0": 1000}}')   # default "earliest"
          .option("endingOffsets", "latest")         # exclusive; default "latest"
          .option("startingTimestamp", "1700000000000")           # ms, overrides startingOffsets
          .option("includeActiveSegment", "false")   # default: closed segments only
          .option("includeHeaders", "true")          # default false, as Spark's Kafka source
          # or .option("segments", segments_option(slices))   exact slices planned elsewhere
          # or .option("chunks", chunks_option(groups))       one task per group of slices
          .load("/var/lib/minikafka"))               # a broker's log.dirs (comma-separate several)

Rows have Spark's Kafka source schema (``SCHEMA``): key binary, value binary, topic string,
partition int, offset long, timestamp timestamp, timestampType int (0 CreateTime,
1 LogAppendTime, -1 for magic 0 messages, which carry no timestamp and read as -1 ms), and
with ``includeHeaders`` (``SCHEMA_WITH_HEADERS``) headers array<struct<key string, value
binary>>, null for a record without any (magic 0/1 messages have none).
Offset options are described in ``export.planning``. Every segment is one Spark input
partition, read as Arrow record batches by ``export.segment_reader``.

Workers import this module by name, so the ``export`` package must be importable on them
(installed, or on ``PYTHONPATH``); ``spark.sql.session.timeZone`` does not affect the data,
only how timestamps are shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from minikafka.export.planning import includes_headers, parse_options, plan_slices
from minikafka.export.segment_reader import read_segment

__all__ = ["FORMAT", "SCHEMA", "SCHEMA_WITH_HEADERS", "MiniKafkaDataSource", "register"]

FORMAT = "minikafka"
SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
SCHEMA_WITH_HEADERS = SCHEMA + ", headers array<struct<key: string, value: binary>>"


@dataclass
class SegmentPartition(InputPartition):
    """One Spark input partition: a range of offsets of one segment file."""

    topic: str
    partition: int
    log_path: str
    start_offset: int
    end_offset: int
    start_timestamp: int | None
    include_headers: bool = False


@dataclass
class ChunkPartition(InputPartition):
    """One Spark input partition reading several segment ranges in turn (option ``chunks``)."""

    parts: list[SegmentPartition]


class MiniKafkaReader(DataSourceReader):
    """Plans one input partition per segment, or per chunk (on the driver), and reads it (on a worker)."""

    def __init__(self, options) -> None:
        self._options = parse_options(options)

    def partitions(self) -> list[SegmentPartition] | list[ChunkPartition]:
        if self._options.chunks is not None:
            return [ChunkPartition([self._partition(s) for s in group]) for group in self._options.chunks]
        return [self._partition(s) for s in plan_slices(self._options)]

    def _partition(self, s) -> SegmentPartition:
        return SegmentPartition(s.topic, s.partition, s.log_path, s.start_offset, s.end_offset, s.start_timestamp,
                                self._options.include_headers)

    def read(self, partition: SegmentPartition | ChunkPartition) -> Iterator:
        if isinstance(partition, ChunkPartition):
            return (batch for part in partition.parts for batch in _read(part))
        if not isinstance(partition, SegmentPartition):
            return iter(())  # nothing planned: Spark still runs one task with a placeholder
        return _read(partition)


def _read(partition: SegmentPartition) -> Iterator:
    return read_segment(
        partition.log_path, partition.topic, partition.partition,
        start_offset=partition.start_offset, end_offset=partition.end_offset,
        start_timestamp=partition.start_timestamp, include_headers=partition.include_headers,
    )


class MiniKafkaDataSource(DataSource):
    """``format("minikafka")``: minikafka (or Kafka) segment files as a DataFrame."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA_WITH_HEADERS if includes_headers(self.options) else SCHEMA

    def reader(self, schema) -> MiniKafkaReader:
        return MiniKafkaReader(self.options)


def register(spark) -> None:
    """Make ``spark.read.format("minikafka")`` available in this session."""
    spark.dataSource.register(MiniKafkaDataSource)
