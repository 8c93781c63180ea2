"""Export throughput on local[2] and on a 2-worker Spark standalone cluster, versus a consumer.

    python3 bench/bench_export.py [--records 1000000] [--value-bytes 100] [--segment-mb 32]
                                  [--masters local[2],standalone] [--no-consumer]

1. A minikafka broker (subprocess) gets ``--records`` records (10-byte keys, ``--value-bytes``
   values, uncompressed) from a confluent-kafka producer, into one partition with
   ``--segment-mb`` segments (one Spark task each); then it is stopped, so the segment files
   are final.
2. For each master, in a fresh driver process (so each pays its own JVM start, as a
   ``minikafka export`` run does): the fixed cost, i.e. session start-up (JVM, SparkContext,
   on the cluster also the executors registering) and the first action (a 1,000-record read:
   Python workers start, the JVM compiles); then a full read (``count()``, every segment
   including the active one) and ``export()`` itself (closed segments -> Secor-named Parquet,
   staging, renames, progress). ``standalone`` is ``export.standalone.StandaloneCluster``:
   a master and two workers with one core each on 127.0.0.1, started before the clock
   (its start-up is printed separately).
3. Consumer path (unless ``--no-consumer``): the broker is started again on the same data; a
   confluent-kafka consumer reads the partition from offset 0, the records become an Arrow
   table with the same schema, written with ``pyarrow.parquet``.

MB/s counts key + value bytes. A cluster pays off once its time saved per record outweighs
its larger fixed cost: the last line says after how many records, from these figures. Not a
test: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from minikafka.export.segment_reader import ARROW_SCHEMA  # noqa: E402
from minikafka.testing import MinikafkaBroker  # noqa: E402

TOPIC = "bench"
STANDALONE = "standalone"


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
    return (f"{name:<48} {seconds:7.2f} s  {records / seconds:>10,.0f} records/s  "
            f"{payload / seconds / 1e6:7.1f} MB/s")


def measure(master: str, log_dir: str, out: str) -> dict:
    """One driver's figures (run in a process of its own: ``--measure``)."""
    from minikafka.export.exporter import export
    from minikafka.export.session import spark_session

    figures = {}
    started = time.perf_counter()
    spark = spark_session(master, app_name="bench export")
    figures["session_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    (spark.read.format("minikafka").option("endingOffsets", f'{{"{TOPIC}": {{"0": 1000}}}}')
     .load(log_dir).count())
    figures["first_action_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    figures["count"] = spark.read.format("minikafka").option("includeActiveSegment", "true").load(log_dir).count()
    figures["count_seconds"] = time.perf_counter() - started
    summary = export(lambda: spark, [log_dir], out, progress=False)
    figures.update(export_records=summary.records, export_seconds=summary.seconds,
                   export_segments=summary.segments, app_id=spark.sparkContext.applicationId)
    spark.stop()
    return figures


def run_measure(master: str, log_dir: Path, out: Path, env: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, __file__, "--measure", master, "--log-dir", str(log_dir),
                           "--out", str(out)], env=env, stdout=subprocess.PIPE, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"measuring {master} failed (status {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--segment-mb", type=int, default=32, help="log.segment.bytes in MB")
    parser.add_argument("--masters", default=f"local[2],{STANDALONE}",
                        help=f"comma-separated Spark master URLs; {STANDALONE!r} = a 2-worker cluster started here")
    parser.add_argument("--no-consumer", action="store_true", help="skip the consumer path")
    parser.add_argument("--measure", metavar="MASTER", help=argparse.SUPPRESS)
    parser.add_argument("--log-dir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.log_dir, args.out)))
        return 0

    from minikafka.export.standalone import StandaloneCluster

    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    broker = MinikafkaBroker(work / "broker", {"log.segment.bytes": str(args.segment_mb * 1024 * 1024),
                                                "num.partitions": "1"})
    try:
        broker.start()
        started = time.perf_counter()
        produce(broker.bootstrap, args.records, args.value_bytes)
        produce_seconds = time.perf_counter() - started
        broker.stop()
        payload = args.records * (10 + args.value_bytes)
        record_bytes = payload / args.records
        segments = sorted((broker.log_dir / f"{TOPIC}-0").glob("*.log"))
        segment_bytes = sum(p.stat().st_size for p in segments)
        print(f"{args.records:,} records, {payload / 1e6:.1f} MB key+value, {len(segments)} segments "
              f"({segment_bytes / 1e6:.1f} MB on disk, the last one active: not exported); "
              f"produced in {produce_seconds:.1f} s")

        results = {}
        for master in args.masters.split(","):
            out = work / f"out-{len(results)}"
            if master != STANDALONE:
                results[master] = run_measure(master, broker.log_dir, out)
                continue
            started = time.perf_counter()
            with StandaloneCluster(work / "spark", workers=2, cores=1) as cluster:
                print(f"standalone cluster (master + 2 workers x 1 core) up in "
                      f"{time.perf_counter() - started:.1f} s (not counted)")
                figures = run_measure(cluster.master_url, broker.log_dir, out, env=cluster.driver_env())
                figures["tasks"] = cluster.tasks_per_worker(figures["app_id"])
            results[f"{STANDALONE} (2 workers)"] = figures

        for name, figures in results.items():
            assert figures["count"] == args.records, figures
            print(f"{name}: fixed cost {figures['session_seconds'] + figures['first_action_seconds']:.1f} s "
                  f"(session start {figures['session_seconds']:.1f} s + first action "
                  f"{figures['first_action_seconds']:.1f} s)"
                  + (f"; tasks per worker {figures['tasks']}" if "tasks" in figures else ""))
            print("  " + line("data source read only (count())", args.records, payload, figures["count_seconds"]))
            print("  " + line(f"export() of {figures['export_segments']} closed segments -> Parquet",
                              figures["export_records"], round(figures["export_records"] * record_bytes),
                              figures["export_seconds"]))

        if len(results) == 2:
            (local_name, local), (cluster_name, cluster) = results.items()
            fixed = lambda f: f["session_seconds"] + f["first_action_seconds"]  # noqa: E731
            per_record = lambda f: f["export_seconds"] / f["export_records"]  # noqa: E731
            saved = per_record(local) - per_record(cluster)
            extra = fixed(cluster) - fixed(local)
            if saved <= 0:
                print(f"{cluster_name} exports no faster per record than {local_name} here: it does not pay off")
            else:
                print(f"{cluster_name} pays off over {local_name} from about "
                      f"{max(0, extra) / saved:,.0f} records per export")

        if not args.no_consumer:
            broker.start()
            started = time.perf_counter()
            consume_to_parquet(broker.bootstrap, args.records, work / "consumer.parquet")
            consumer_seconds = time.perf_counter() - started
            assert pq.read_metadata(work / "consumer.parquet").num_rows == args.records
            print(line("broker -> confluent-kafka consumer -> pyarrow", args.records, payload, consumer_seconds))
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
