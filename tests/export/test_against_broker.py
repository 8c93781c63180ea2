"""The export path against a real broker and real clients.

* format("minikafka") returns exactly what a kafka-python consumer reads from the broker,
  for every codec, magic 0 and 1, null keys and values, CreateTime and LogAppendTime (with
  every codec), also when selecting with Spark's ``subscribe`` and ``assign`` options;
* with ``--export-to``, retention waits until a segment is exported, also for a topic deleted
  and created again under the same name, which is exported whole under the next generation;
  ``--export-master`` is what the exporter runs on;
* ``minikafka replay`` into a fresh broker reproduces keys, values and timestamps, with its
  summary line and progress bar.

The brokers write topics in magic 0/1 (``log.message.format.version`` 0.10.2), the format the
export reader takes.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica

from minikafka.export.exporter import export
from minikafka.export.progress import ExportProgress
from minikafka.export.replay import ReplayError, generations, read_exported, replay
from minikafka.export.segment_reader import ARROW_SCHEMA, read_segment
from minikafka.protocol.framing import decode_response, encode_request
from minikafka.protocol.records import Codec, build_message_set
from minikafka.storage import list_segments, read_topic_id
from minikafka.protocol import ApiKey
from minikafka.testing import MinikafkaBroker

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = "import sys; from minikafka.broker.cli import main; sys.exit(main())"
T0 = 1_700_000_000_000


def create_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
    finally:
        admin.close()


def produce_raw_magic0(bootstrap: str, topic: str, count: int, codec: Codec) -> None:
    """Produce v1 requests carrying magic 0 message sets, ``count`` records in sets of 10.

    These sets come from protocol.records.build_message_set and go over a plain socket, as a
    0.9 producer sends them, independently of the clients that read them back.
    """
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock, sock.makefile("rb") as replies:
        for first in range(0, count, 10):
            records = [(None if i % 3 == 0 else b"key-%d" % i, b"value-%d" % i, 0) for i in range(first, first + 10)]
            body = {"acks": 1, "timeout_ms": 5000, "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": build_message_set(records, magic=0, codec=codec)}]}]}
            sock.sendall(encode_request(ApiKey.PRODUCE, 1, first, "export-test", body))
            size_bytes = replies.read(4)  # a buffered read(n) returns n bytes unless the peer closed
            reply = replies.read(struct.unpack(">i", size_bytes)[0])
            response = decode_response(ApiKey.PRODUCE, 1, size_bytes + reply)
            assert response.responses[0].partition_responses[0].error_code == 0


def produce(bootstrap: str, topic: str, *, magic: int, codec: str | None, count: int, partitions: int = 1,
            tag: bytes = b"") -> None:
    """``count`` records with null/empty/real keys and values (``<tag>value-<i>-...``); linger so
    compressed wrappers hold several."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=(0, 9) if magic == 0 else (0, 10),
                             compression_type=codec, linger_ms=20, batch_size=1024)
    for i in range(count):
        key = None if i % 4 == 0 else (b"" if i % 4 == 1 else b"key-%d" % i)
        value = None if i % 7 == 3 and key is not None else tag + b"value-%d-" % i + bytes(50 + i % 50)
        producer.send(topic, key=key, value=value, partition=i % partitions,
                      timestamp_ms=T0 + i * 1_000 if magic == 1 else None)
    producer.flush()
    producer.close()


def consume(bootstrap: str, topics: list[str], expected: int) -> list[tuple]:
    consumer = KafkaConsumer(*topics, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    rows = []
    for message in consumer:
        ts_type = message.timestamp_type if message.timestamp_type is not None else -1
        timestamp = message.timestamp if message.timestamp not in (None, -1) else -1
        rows.append((message.topic, message.partition, message.offset, message.key, message.value,
                     timestamp, ts_type))
        if len(rows) == expected:
            break
    consumer.close()
    return sorted(rows)


def consume_librdkafka(bootstrap: str, topic: str, expected: int) -> list[tuple]:
    """A second opinion on magic 0 lz4, whose framing kafka-python and librdkafka both had to
    get right (Kafka 0.8-0.9's lz4 frame checksum is famously off)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "export-test", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    rows = []
    deadline = time.monotonic() + 30
    while len(rows) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        ts_type, ts = message.timestamp()
        rows.append((message.topic(), message.partition(), message.offset(), message.key(), message.value(),
                     -1 if ts_type == 0 else ts, -1 if ts_type == 0 else ts_type - 1))
    consumer.close()
    return sorted(rows)


def datasource_rows(df) -> list[tuple]:
    return sorted((r.topic, r.partition, r.offset, r.key, r.value,
                   round(r.timestamp.timestamp() * 1000), r.timestampType) for r in df.collect())


def test_datasource_reads_what_a_consumer_reads(spark, minikafka_broker_factory):
    broker = minikafka_broker_factory(**{"log.message.format.version": "0.10.2", "log.segment.bytes": "4096"})
    topics = []
    for magic in (0, 1):
        for codec in (None, "gzip", "snappy", "lz4"):
            topic = f"m{magic}-{codec or 'none'}"
            create_topic(broker.bootstrap, topic, 2)
            if (magic, codec) == (0, "lz4"):
                produce_raw_magic0(broker.bootstrap, topic, 120, Codec.LZ4)
            else:
                produce(broker.bootstrap, topic, magic=magic, codec=codec, count=120, partitions=2)
            topics.append(topic)
    create_topic(broker.bootstrap, "append-time", 1, **{"message.timestamp.type": "LogAppendTime"})
    for codec, count in (("gzip", 60), (None, 20), ("snappy", 40), ("lz4", 40)):
        produce(broker.bootstrap, "append-time", magic=1, codec=codec, count=count)
    topics.append("append-time")
    # kafka-python decompresses magic 0 lz4 too, given xxhash (in the test extra).
    consumed = consume(broker.bootstrap, topics, 8 * 120 + 160)
    assert len(consumed) == 8 * 120 + 160
    m0_lz4 = [r for r in consumed if r[0] == "m0-lz4"]
    assert consume_librdkafka(broker.bootstrap, "m0-lz4", 120) == m0_lz4
    broker.stop()  # every byte on disk; the data source needs no broker

    df = (spark.read.format("minikafka").option("topics", ",".join(topics))
          .option("includeActiveSegment", "true").load(str(broker.log_dir)))
    assert datasource_rows(df) == consumed
    assert {r[6] for r in consumed if r[0] == "append-time"} == {1}
    assert {r[6] for r in consumed if r[0].startswith("m0")} == {-1}
    # Spark's selection options by their Spark names: subscribe (topics) and assign (exact
    # topic-partitions).
    subscribed = (spark.read.format("minikafka").option("subscribe", "m1-gzip,append-time")
                  .option("includeActiveSegment", "true").load(str(broker.log_dir)))
    assert datasource_rows(subscribed) == [r for r in consumed if r[0] in ("m1-gzip", "append-time")]
    assigned = (spark.read.format("minikafka").option("assign", '{"m1-snappy": [1], "m0-lz4": [0]}')
                .option("includeActiveSegment", "true").load(str(broker.log_dir)))
    assert datasource_rows(assigned) == [r for r in consumed if (r[0], r[1]) in (("m1-snappy", 1), ("m0-lz4", 0))]
    # Closed segments only, by default: a prefix of each partition, one Spark partition per segment.
    closed = spark.read.format("minikafka").option("topics", "m1-none").load(str(broker.log_dir))
    closed_segments = [s for s in list_segments(broker.log_dir) if s.topic == "m1-none" and s.closed]
    assert closed.rdd.getNumPartitions() == len(closed_segments) >= 2
    closed_rows = datasource_rows(closed)
    assert closed_rows and set(closed_rows) < {r for r in consumed if r[0] == "m1-none"}


class ExportingBroker(MinikafkaBroker):
    """A broker started as ``minikafka serve --export-to DIR [--export-master URL]`` once
    ``export_to`` is set."""

    export_to: Path | None = None
    export_master: str | None = None

    def command(self, port: int) -> list[str]:
        extra = ["--export-to", str(self.export_to)] if self.export_to is not None else []
        if self.export_master is not None:
            extra += ["--export-master", self.export_master]
        return super().command(port) + extra


def test_retention_waits_for_export(tmp_path):
    out = tmp_path / "export"
    with ExportingBroker(tmp_path / "broker", {"log.message.format.version": "0.10.2", "log.segment.bytes": "2048"}) as broker:
        create_topic(broker.bootstrap, "r", 1)
        produce(broker.bootstrap, "r", magic=1, codec=None, count=200)
        # Restart with export on and retention that would delete every closed segment at once:
        # retention must wait until the exporter (a Spark job, seconds away) has them.
        broker.stop()
        broker.export_to = out
        broker.export_master = "local[1]"
        broker.overrides.update({"log.retention.ms": "1", "log.retention.check.interval.ms": "100"})
        broker.start()
        partition_dir = broker.log_dir / "r-0"
        # The broker keeps serving while the exporter process runs: writes to another topic
        # are acknowledged meanwhile.
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(0, 10))  # magic 1, as the topic
        acknowledged_while_exporting = 0
        deadline = time.monotonic() + 180  # a cold Spark start on a busy CI machine
        while time.monotonic() < deadline:
            exported_to = ExportProgress(out).state().next_offsets().get(("r", 0), 0)
            first_base = min(int(p.name[:20]) for p in partition_dir.glob("*.log"))
            if exported_to > 0 and first_base >= exported_to:
                break  # exported, then deleted by retention
            producer.send("live", b"x").get(timeout=30)
            acknowledged_while_exporting += 1
            time.sleep(0.5)
        else:
            pytest.fail(f"export/retention did not finish:\n{broker.stderr_tail()}")
        producer.close()
        assert acknowledged_while_exporting > 0
        # --export-master reached the exporter's command line (the broker logs each one).
        spawned = [line for line in broker.stderr_tail(10**7).splitlines() if "-m minikafka.export export" in line]
        assert spawned and all(" --master 'local[1]' " in line for line in spawned), spawned
    # Had retention run first, the export would start after offset 0 and miss records.
    offsets = sorted(row["offset"] for path in out.glob("r/dt=*/*.parquet")
                     for row in pq.read_table(path, columns=["offset"]).to_pylist())
    assert offsets == list(range(exported_to))
    assert exported_to >= 150


def test_replay_into_a_fresh_broker(spark, minikafka_broker_factory, tmp_path, capsys):
    source = minikafka_broker_factory(**{"log.message.format.version": "0.10.2", "log.segment.bytes": "2048"})
    create_topic(source.bootstrap, "orders", 3)
    produce(source.bootstrap, "orders", magic=1, codec="snappy", count=150, partitions=3)
    source.stop()
    out = tmp_path / "export"
    summary = export(lambda: spark, [source.log_dir], out)
    exported_df = read_exported(spark, out)
    closed_df = spark.read.format("minikafka").load(str(source.log_dir))
    assert exported_df.schema == closed_df.schema
    exported = datasource_rows(exported_df)
    assert len(exported) == summary.records > 0
    assert exported == datasource_rows(closed_df)

    target = minikafka_broker_factory(**{"log.message.format.version": "0.10.2"})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", LAUNCHER, "replay", "--from", str(out), "--topic", "orders",
                           "--bootstrap", target.bootstrap], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    files = list(out.glob("orders/dt=*/*.parquet"))
    sent = sum(len(r[3] or b"") + len(r[4] or b"") for r in exported)
    assert re.fullmatch(rf"minikafka replay: {len(files)} files, {len(exported)} records, "
                        rf"{sent / 1e6:.1f} MB sent, \d+\.\d s", done.stderr.strip().splitlines()[-1]), done.stderr
    replayed = consume(target.bootstrap, ["orders"], len(exported))
    # Same partitions, same order, so the same offsets in a fresh topic.
    assert replayed == exported

    # The progress bar: drawn from the first record on, finished at the total.
    replay(out, "orders", target.bootstrap, to_topic="orders-copy", progress=True)
    err = capsys.readouterr().err
    drawn = [int(n) for n in re.findall(rf"\rreplay \[[#-]{{30}}\] (\d+)/{len(exported)} records", err)]
    assert drawn[0] == 1 and drawn[-1] == len(exported) and drawn == sorted(drawn), err
    assert f"] {len(exported)}/{len(exported)} records\n" in err
    copied = consume(target.bootstrap, ["orders-copy"], len(exported))
    assert [r[1:] for r in copied] == [r[1:] for r in exported]

    replay_timestamps(tmp_path, target.bootstrap)


def replay_timestamps(tmp_path: Path, bootstrap: str) -> None:
    """Only Kafka's "no timestamp" (-1: magic 0, or magic 1 sent without a time) is produced
    without one, getting the replay time; any other timestamp, 0 and below included, is kept.
    A timestamp of exactly 0 cannot be sent by librdkafka (it means "now" there), so an export
    holding one is refused before anything is produced."""
    out = tmp_path / "stamps"
    stamps = [(0, -1), (1, -5), (1, -1), (1, 1), (1, T0)]  # (magic, timestamp)
    data = b"".join(build_message_set([(b"k%d" % i, b"v%d" % i, ts)], magic=magic, base_offset=i)
                    for i, (magic, ts) in enumerate(stamps))
    write_exported(out, "stamps", data)
    before_ms = int(time.time() * 1000)
    summary = replay(out, "stamps", bootstrap, progress=False)
    assert summary.records == len(stamps)
    got = [r[5] for r in consume(bootstrap, ["stamps"], len(stamps))]
    assert got[0] >= before_ms and got[2] >= before_ms  # no timestamp: the replay's
    assert [got[1], got[3], got[4]] == [-5, 1, T0]

    out = tmp_path / "epoch"
    write_exported(out, "epoch", build_message_set([(b"k", b"at 0", 0), (b"k", b"later", T0)]))
    with pytest.raises(ReplayError, match="^1 exported records of topic 'epoch' have the timestamp 0 "):
        replay(out, "epoch", bootstrap, progress=False)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    assert "epoch" not in consumer.topics()  # refused before anything was produced
    consumer.close()


def write_exported(out: Path, topic: str, data: bytes) -> None:
    """One exported file of partition 0, with rows as the data source reads ``data``."""
    segment = out / "source" / f"{0:020d}.log"
    segment.parent.mkdir(parents=True)
    segment.write_bytes(data)
    table = pa.Table.from_batches(list(read_segment(segment, topic, 0)), ARROW_SCHEMA)
    day = out / topic / "dt=unknown"
    day.mkdir(parents=True)
    pq.write_table(table, day / f"1_0_{0:020d}.parquet")


def wait_exported_then_deleted(broker: MinikafkaBroker, out: Path, topic: str, topic_id: str) -> int:
    """Wait until this incarnation of ``topic``-0 has progress and retention deleted every
    segment below it; returns the next offset to export."""
    deadline = time.monotonic() + 180  # a cold Spark start on a busy CI machine
    while time.monotonic() < deadline:
        recorded = ExportProgress(out).state().progress.get((topic, 0))
        first_base = min(int(p.name[:20]) for p in (broker.log_dir / f"{topic}-0").glob("*.log"))
        if recorded is not None and recorded.topic_id == topic_id and 0 < recorded.next_offset <= first_base:
            return recorded.next_offset
        time.sleep(0.5)
    pytest.fail(f"export/retention did not finish:\n{broker.stderr_tail()}")


def exported_rows(out: Path, topic: str, generation: int) -> list[tuple]:
    return sorted((row["offset"], row["value"]) for path in out.glob(f"{topic}/dt=*/{generation}_*.parquet")
                  for row in pq.read_table(path, columns=["offset", "value"]).to_pylist())


def test_topic_deleted_and_created_again_while_serving_is_exported_whole(tmp_path):
    """``serve --export-to`` with retention at 1 ms; the topic is deleted and created again
    through the admin API once its first incarnation is exported. The new topic's offsets
    start at 0 again, below the old one's progress: retention still waits for its own export,
    which writes every record under generation 2, leaving the generation 1 files as they were."""
    out = tmp_path / "export"
    broker = ExportingBroker(tmp_path / "broker", {"log.message.format.version": "0.10.2", "log.segment.bytes": "2048", "log.retention.ms": "1",
                                                   "log.retention.check.interval.ms": "100"})
    broker.export_to = out
    with broker:
        create_topic(broker.bootstrap, "r", 1)
        produce(broker.bootstrap, "r", magic=1, codec=None, count=200)
        first_id = read_topic_id(broker.log_dir / "r-0")
        first_end = wait_exported_then_deleted(broker, out, "r", first_id)
        first_files = {p: p.read_bytes() for p in out.glob("r/dt=*/*.parquet")}

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            admin.delete_topics(["r"])
        finally:
            admin.close()
        create_topic(broker.bootstrap, "r", 1)
        second_id = read_topic_id(broker.log_dir / "r-0")
        assert second_id != first_id
        produce(broker.bootstrap, "r", magic=1, codec=None, count=120, tag=b"again-")
        second_end = wait_exported_then_deleted(broker, out, "r", second_id)
    assert second_end < first_end  # every new offset was at or below the old progress
    assert {p: p.read_bytes() for p in first_files} == first_files
    first_rows, second_rows = exported_rows(out, "r", 1), exported_rows(out, "r", 2)
    assert [offset for offset, _ in first_rows] == list(range(first_end))
    assert [offset for offset, _ in second_rows] == list(range(second_end))
    assert not any(value.startswith(b"again-") for _, value in first_rows if value is not None)
    assert all(value.startswith(b"again-") for _, value in second_rows if value is not None)
    assert generations(out, "r") == {1: first_id, 2: second_id}


def consume_with_headers(bootstrap: str, topic: str, expected: int) -> list[tuple]:
    """``(offset, key, value, timestamp, timestampType, headers or None)`` as librdkafka reads them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "headers-test", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    rows = []
    deadline = time.monotonic() + 30
    while len(rows) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        ts_type, ts = message.timestamp()
        rows.append((message.offset(), message.key(), message.value(), ts, ts_type - 1, message.headers()))
    consumer.close()
    return rows


def produce_with_headers(bootstrap: str, topic: str, first: int, count: int, codec: str) -> None:
    from confluent_kafka import Producer

    # Batches well under the test broker's 4 KiB segments, which refuse a larger one.
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
                         "batch.size": 1500})
    failed = []
    for i in range(first, first + count):
        headers = [("traceparent", b"00-%032x-%016x-01" % (i, i)), ("empty", b""), ("null", None)] if i % 3 else None
        value = b"value-%d-" % i + hashlib.sha256(b"%d" % i).digest() * 2  # incompressible: several segments
        producer.produce(topic, key=None if i % 5 == 0 else b"key-%d" % i, value=value,
                         headers=headers, partition=0, timestamp=T0 + i,
                         on_delivery=lambda error, _: error and failed.append(error))
    assert producer.flush(30) == 0 and not failed, failed


def test_v2_topics_with_headers_and_a_format_change_export_and_replay_whole(spark, minikafka_broker_factory,
                                                                            tmp_path):
    """A v2 topic with headers (librdkafka), and one written in magic 1 (kafka-python 0.10)
    until its message.format.version override went from 0.10.2 to 2.8 over a restart: the data
    source with includeHeaders reads what librdkafka consumes, the export keeps the headers,
    and replay produces them back."""
    broker = minikafka_broker_factory(**{"log.segment.bytes": "4096"})
    create_topic(broker.bootstrap, "with-headers", 1)
    produce_with_headers(broker.bootstrap, "with-headers", 0, 150, "lz4")
    create_topic(broker.bootstrap, "changed", 1, **{"message.format.version": "0.10.2"})
    produce(broker.bootstrap, "changed", magic=1, codec="gzip", count=60)
    broker.stop()
    properties = broker.log_dir / "changed-0" / "topic-config.properties"
    properties.write_text(properties.read_text().replace("message.format.version=0.10.2", "message.format.version=2.8"))
    broker.start()
    produce_with_headers(broker.bootstrap, "changed", 60, 90, "snappy")
    consumed = {topic: consume_with_headers(broker.bootstrap, topic, 150) for topic in ("with-headers", "changed")}
    assert [len(rows) for rows in consumed.values()] == [150, 150]
    assert consumed["changed"][0][5] is None and consumed["changed"][61][5] is not None
    broker.stop()

    for topic, rows in consumed.items():
        df = (spark.read.format("minikafka").option("topics", topic).option("includeHeaders", "true")
              .option("includeActiveSegment", "true").load(str(broker.log_dir)))
        read = sorted((r.offset, r.key, r.value, round(r.timestamp.timestamp() * 1000), r.timestampType,
                       None if r.headers is None else [(h.key, h.value) for h in r.headers]) for r in df.collect())
        assert read == rows

    out = tmp_path / "export"
    summary = export(lambda: spark, [broker.log_dir], out)
    assert summary.records > 0
    exported = {row["offset"]: row for path in out.glob("with-headers/dt=*/*.parquet")
                for row in pq.read_table(path).to_pylist()}
    want = {offset: headers for offset, _, _, _, _, headers in consumed["with-headers"] if offset in exported}
    assert {o: (r["headers"] and [(h["key"], h["value"]) for h in r["headers"]]) for o, r in exported.items()} == want

    target = minikafka_broker_factory()
    replay(out, "with-headers", target.bootstrap, progress=False)
    replayed = consume_with_headers(target.bootstrap, "with-headers", len(exported))
    assert [(r[1], r[2], r[3], r[5]) for r in replayed] == [
        (r[1], r[2], r[3], r[5]) for r in consumed["with-headers"][:len(exported)]]


def _move_rate(admin: KafkaAdminClient, broker_id: int, rate: int | None) -> None:
    """This broker's dynamic replica.alter.log.dirs.io.max.bytes.per.second (AlterConfigs
    replaces the broker's dynamic settings: None leaves it none)."""
    configs = {} if rate is None else {"replica.alter.log.dirs.io.max.bytes.per.second": str(rate)}
    admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(broker_id), configs=configs)])


def _log_dir_of(admin: KafkaAdminClient, topic: str) -> dict[bool, str]:
    """is future -> the log dir DescribeLogDirs lists partition 0 of ``topic`` in."""
    (described,) = admin.describe_log_dirs()
    return {p["is_future_key"]: result["log_dir"] for result in described["log_dirs"]
            for entry in result["topics"] if entry["name"] == topic for p in entry["partitions"]}


def test_a_replica_moved_to_another_log_dir_exports_on_from_where_it_was(spark, tmp_path):
    """Exports of a broker's two log dirs while AlterReplicaLogDirs moves a partition between
    them: mid-move (the copy held back by its rate) the export reads the replica being served,
    never its future; once moved, with its topic id, the next export goes on from the progress
    of the one before under the same generation. Every record is exported once, at its offset."""
    out = tmp_path / "export"
    with MinikafkaBroker(tmp_path / "broker", {"log.segment.bytes": "2048"}, log_dirs=2) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        create_topic(broker.bootstrap, "moved", 1)
        produce(broker.bootstrap, "moved", magic=1, codec=None, count=150)
        home = _log_dir_of(admin, "moved")[False]
        (other,) = {str(d) for d in broker.log_dirs} - {home}
        topic_id = read_topic_id(Path(home) / "moved-0")
        first = export(lambda: spark, broker.log_dirs, out).records
        assert first > 0

        broker_id = admin.describe_log_dirs()[0]["broker"]
        _move_rate(admin, broker_id, 512)
        replica = TopicPartitionReplica("moved", 0, broker_id)
        assert admin.alter_replica_log_dirs({replica: other}) == {replica: NoError}
        produce(broker.bootstrap, "moved", magic=1, codec=None, count=50, tag=b"during-")
        second = export(lambda: spark, broker.log_dirs, out).records
        assert second > 0
        assert _log_dir_of(admin, "moved") == {False: home, True: other}  # still moving after it

        _move_rate(admin, broker_id, None)
        deadline = time.monotonic() + 60
        while _log_dir_of(admin, "moved") != {False: other}:
            assert time.monotonic() < deadline, _log_dir_of(admin, "moved")
            time.sleep(0.1)
        assert read_topic_id(Path(other) / "moved-0") == topic_id
        produce(broker.bootstrap, "moved", magic=1, codec=None, count=50, tag=b"after-")
        third = export(lambda: spark, broker.log_dirs, out).records
        admin.close()
    assert third > 0
    exported_to = ExportProgress(out).state().progress[("moved", 0)].next_offset
    assert first + second + third == exported_to
    assert [offset for offset, _ in exported_rows(out, "moved", 1)] == list(range(exported_to))
    assert generations(out, "moved") == {1: topic_id}
