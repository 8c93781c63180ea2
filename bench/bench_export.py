"""Export throughput: the ``minikafka`` Spark data source + Parquet versus a consumer + pyarrow.

    python3 bench/bench_export.py [--records 1000000] [--value-bytes 100] [--master local[*]]

1. A minikafka broker (subprocess) gets ``--records`` records (10-byte keys, ``--value-bytes``
   values, uncompressed) from a confluent-kafka producer, into one partition with 32 MB
   segments; then it is stopped, so the segment files are final.
2. Data source path: ``spark.read.format("minikafka")...load(log_dir).write.parquet(...)``,
   every segment including the last (``includeActiveSegment``). The SparkSession is started
   before the clock starts (its start-up is printed separately), and a small warm-up read
   runs first.
3. Consumer path: the broker is started again on the same data; a confluent-kafka consumer
   reads the partition from offset 0, the records become an Arrow table with the same schema,
   written with ``pyarrow.parquet``.

Both paths write the same rows; MB/s counts key + value bytes. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from minikafka.broker.pytest_plugin import MinikafkaBroker  # noqa: E402
from minikafka.export.segment_reader import ARROW_SCHEMA  # noqa: E402

TOPIC = "bench"


def produce(bootstrap: str, records: int, value_bytes: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000, "acks": 1})
    value = b"v" * value_bytes
    timestamp = int(time.time() * 1000)
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, key=b"key-%06d" % (i % 1_000_000), partition=0,
                                 timestamp=timestamp + i // 1000)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("producer did not finish")


def consume_to_parquet(bootstrap: str, records: int, path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-export",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    keys, values, offsets, timestamps, types = [], [], [], [], []
    while len(offsets) < records:
        for message in consumer.consume(num_messages=10_000, timeout=1.0):
            if message.error():
                continue
            keys.append(message.key())
            values.append(message.value())
            offsets.append(message.offset())
            ts_type, ts = message.timestamp()
            timestamps.append(ts * 1000)
            types.append(ts_type - 1)
    consumer.close()
    count = len(offsets)
    table = pa.Table.from_arrays([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.array([TOPIC] * count, pa.string()), pa.array([0] * count, pa.int32()),
        pa.array(offsets, pa.int64()), pa.array(timestamps, pa.int64()).view(pa.timestamp("us", tz="UTC")),
        pa.array(types, pa.int32())], schema=ARROW_SCHEMA)
    pq.write_table(table, path)


def line(name: str, records: int, payload: int, seconds: float) -> str:
    return (f"{name:<44} {seconds:7.2f} s  {records / seconds:>10,.0f} records/s  "
            f"{payload / seconds / 1e6:7.1f} MB/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    broker = MinikafkaBroker(work / "broker", {"log.segment.bytes": str(32 * 1024 * 1024),
                                                "num.partitions": "1"})
    try:
        broker.start()
        started = time.perf_counter()
        produce(broker.bootstrap, args.records, args.value_bytes)
        produce_seconds = time.perf_counter() - started
        broker.stop()
        payload = args.records * (10 + args.value_bytes)
        segments = sorted((broker.log_dir / f"{TOPIC}-0").glob("*.log"))
        segment_bytes = sum(p.stat().st_size for p in segments)
        print(f"{args.records:,} records, {payload / 1e6:.1f} MB key+value, {len(segments)} segments "
              f"({segment_bytes / 1e6:.1f} MB on disk); produced in {produce_seconds:.1f} s")

        from minikafka.export.session import spark_session

        started = time.perf_counter()
        spark = spark_session(args.master, app_name="bench export")
        print(f"SparkSession start-up ({args.master}): {time.perf_counter() - started:.1f} s (not counted)")
        reader = spark.read.format("minikafka").option("includeActiveSegment", "true")
        # Warm-up (not counted): the first action starts Python workers and JIT-compiles.
        (spark.read.format("minikafka").option("endingOffsets", f'{{"{TOPIC}": {{"0": 1000}}}}')
         .load(str(broker.log_dir)).count())
        started = time.perf_counter()
        count = reader.load(str(broker.log_dir)).count()
        count_seconds = time.perf_counter() - started
        assert count == args.records, count
        started = time.perf_counter()
        reader.load(str(broker.log_dir)).write.parquet(str(work / "spark.parquet"))
        spark_seconds = time.perf_counter() - started
        spark.stop()

        broker.start()
        started = time.perf_counter()
        consume_to_parquet(broker.bootstrap, args.records, work / "consumer.parquet")
        consumer_seconds = time.perf_counter() - started
        assert pq.read_metadata(work / "consumer.parquet").num_rows == args.records

        print(line("data source read only (count())", args.records, payload, count_seconds))
        print(line("data source -> Spark Parquet", args.records, payload, spark_seconds))
        print(line("broker -> confluent-kafka consumer -> pyarrow", args.records, payload, consumer_seconds))
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
