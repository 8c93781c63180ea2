"""Read exported Parquet back: as a Spark DataFrame, or produced into a broker (backfill).

``read_exported(spark, OUT)`` gives a DataFrame with exactly the ``minikafka`` / Kafka source
schema. ``replay(OUT, topic, bootstrap)`` produces a topic's exported records, with their keys,
timestamps and headers, into the same partitions of a broker, in offset order per partition
(a record with headers needs a topic of message format v2 there).

Order: a partition's records may be spread over several files (one per segment and date),
whose offset ranges overlap when timestamps cross midnight out of order. Files are read in
groups whose offset ranges overlap, each group sorted by offset, so memory stays bounded by
about one segment. The producer (confluent-kafka) keeps at most one request in flight per
connection, so a retry cannot reorder records.

Timestamps: every timestamp is produced as exported, except Kafka's "no timestamp" (-1 ms,
as the data source reports every magic 0 message and magic 1 ones sent without a time; they
are under ``dt=unknown``), which is produced without one, so it gets the time of the replay.
A real timestamp of 0 (1970-01-01T00:00:00Z) cannot be produced: librdkafka, which the
producer is, reads 0 as "no timestamp" and sends the time of the replay instead. So an export
holding such records is refused before anything is produced (``ReplayError``), rather than
replayed with other timestamps.

Generations: a topic deleted and created again under the same name is a new incarnation,
whose files carry the next generation number (``export.exporter``). Only one generation of a
topic is read: by default its newest (the incarnation exported last), or the one passed as
``generation`` (``minikafka replay --generation N``); ``generations(OUT, topic)`` lists them
with their topic ids.
"""

from __future__ import annotations

import contextlib
import functools
import re
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from minikafka.export.console import ProgressBar
from minikafka.export.progress import FIRST_GENERATION, ExportProgress
from minikafka.export.segment_reader import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS, HEADERS_TYPE, NO_TIMESTAMP

__all__ = ["ReplayError", "ReplayInterrupted", "ReplaySummary", "exported_files", "generations", "read_exported", "replay",
           "partition_tables"]

_FILE_NAME = re.compile(r"^(?P<generation>\d+)_(?P<partition>\d+)_(?P<offset>\d+)\.parquet$")
COLUMNS = ARROW_SCHEMA.names


class ReplayError(RuntimeError):
    """Replay cannot proceed (no such export, broker unreachable, too few partitions...)."""


class ReplayInterrupted(ReplayError):
    """SIGINT (Ctrl-C) stopped the replay: ``acknowledged`` records of ``total`` reached the
    broker, a prefix of each partition's records (one request in flight at a time)."""

    def __init__(self, message: str, acknowledged: int, total: int):
        super().__init__(message)
        self.acknowledged = acknowledged
        self.total = total


@dataclass
class ReplaySummary:
    files: int = 0
    records: int = 0
    bytes: int = 0
    seconds: float = 0.0


def generations(out_dir: Path | str, topic: str) -> dict[int, str | None]:
    """``generation -> topic id`` of every incarnation of ``topic`` exported to ``out_dir``
    (``{1: None}`` for an export from before topic ids), oldest first."""
    known = ExportProgress(out_dir).state().incarnations.get(topic)
    if not known:
        return {FIRST_GENERATION: None}
    return {generation: topic_id for topic_id, generation in sorted(known.items(), key=lambda item: item[1])}


def exported_files(out_dir: Path | str, topic: str, generation: int | None = None) -> dict[int, list[Path]]:
    """``partition -> [files]`` of one generation (default: the newest) of an exported topic,
    sorted by first offset."""
    topic_dir = Path(out_dir) / topic
    if not topic_dir.is_dir():
        raise ReplayError(f"no export of topic {topic!r} in {out_dir}")
    if generation is None:
        generation = max(generations(out_dir, topic))
    by_partition: dict[int, list[tuple[int, Path]]] = defaultdict(list)
    for path in topic_dir.glob("dt=*/*.parquet"):
        match = _FILE_NAME.match(path.name)
        if match and int(match["generation"]) == generation:
            by_partition[int(match["partition"])].append((int(match["offset"]), path))
    return {p: [path for _, path in sorted(files)] for p, files in sorted(by_partition.items())}


def partition_tables(files: list[Path]) -> Iterator:
    """One partition's records as Arrow tables in offset order (groups of overlapping files)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    ranges = []
    for path in files:
        bounds = pc.min_max(pq.read_table(path, columns=["offset"]).column("offset"))
        ranges.append((bounds["min"].as_py(), bounds["max"].as_py(), path))
    ranges.sort(key=lambda r: r[0])
    group: list[Path] = []
    group_end = -1
    for low, high, path in ranges:
        if group and low > group_end:
            yield _sorted_table(group)
            group = []
        group.append(path)
        group_end = max(group_end, high)
    if group:
        yield _sorted_table(group)


def _sorted_table(paths: list[Path]):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables(_with_headers(pq.read_table(p, columns=_columns_of(p))) for p in paths)
    return table.sort_by("offset")


def _columns_of(path: Path) -> list[str]:
    """The Kafka columns, and headers where the file has them (exports before format v2 do not)."""
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    return COLUMNS + ["headers"] if "headers" in names else COLUMNS


def _with_headers(table):
    """``table`` as ``ARROW_SCHEMA_WITH_HEADERS``, with null headers if it has none."""
    import pyarrow as pa

    if "headers" not in table.column_names:
        table = table.append_column("headers", pa.nulls(table.num_rows, HEADERS_TYPE))
    return table.cast(ARROW_SCHEMA_WITH_HEADERS)


def read_exported(spark, out_dir: Path | str, topics: list[str] | None = None, generation: int | None = None):
    """The exported records of ``topics`` (default: all) as a DataFrame with the Kafka schema:
    of each topic, the files of ``generation`` (default: the topic's newest)."""
    out_dir = Path(out_dir)
    if topics is None:
        topics = sorted(p.name for p in out_dir.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    from minikafka.export.datasource import SCHEMA

    frames = []
    for topic in topics:
        chosen = generation if generation is not None else max(generations(out_dir, topic))
        if not any((out_dir / topic).glob(f"dt=*/{chosen}_*.parquet")):
            continue  # Spark refuses a path without files
        # dt= becomes a column, dropped here.
        frames.append(spark.read.option("pathGlobFilter", f"{chosen}_*.parquet")
                      .parquet(str(out_dir / topic)).select(*COLUMNS))
    if not frames:
        return spark.createDataFrame([], SCHEMA)
    return functools.reduce(lambda left, right: left.unionByName(right), frames)


def replay(out_dir: Path | str, topic: str, bootstrap: str, *, to_topic: str | None = None,
           generation: int | None = None, progress: bool | None = None, timeout: float = 30.0) -> ReplaySummary:
    """Produce every exported record of one generation (default: the newest) of ``topic`` into
    ``to_topic`` (default: the same name)."""
    import pyarrow.parquet as pq
    from confluent_kafka import KafkaException, Producer

    started = time.monotonic()
    to_topic = to_topic or topic
    files = exported_files(out_dir, topic, generation)
    if not files:
        which = "the newest generation" if generation is None else f"generation {generation}"
        known = ", ".join(f"{g} (topic id {i or 'unknown'})" for g, i in generations(out_dir, topic).items())
        raise ReplayError(f"no exported files of {which} of topic {topic!r} in {out_dir}; "
                          f"its generations: {known}")
    summary = ReplaySummary(files=sum(len(f) for f in files.values()))
    total = sum(pq.read_metadata(p).num_rows for paths in files.values() for p in paths)
    at_epoch = _records_at_epoch(path for paths in files.values() for path in paths)
    if at_epoch:
        raise ReplayError(f"{at_epoch} exported records of topic {topic!r} have the timestamp 0 "
                          "(1970-01-01T00:00:00Z), which the producer (librdkafka) cannot send: it "
                          "would give them the time of the replay; nothing was produced")
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 20,
        "max.in.flight.requests.per.connection": 1,
        "enable.idempotence": False,
        "acks": "all",
        "message.timeout.ms": int(timeout * 1000),
    })
    errors: list[str] = []
    acknowledged = 0
    interrupted = False

    def delivered(err, msg) -> None:
        nonlocal acknowledged
        if err is None:
            acknowledged += 1
        elif not errors and not interrupted:  # not the queued records purged on Ctrl-C
            errors.append(f"producing to {msg.topic()}[{msg.partition()}] failed: {err}")

    try:
        _ensure_topic(bootstrap, producer, to_topic, max(files, default=-1) + 1, timeout)
    except KafkaException as exc:
        raise ReplayError(f"cannot reach a broker at {bootstrap}: {exc}") from None
    bar = ProgressBar("replay", total, "records", enabled=progress)
    with _sigint_counter() as sigints:
        interrupted = not _produce_all(producer, files, to_topic, delivered, errors, summary, bar, sigints)
        if interrupted:
            producer.purge(in_queue=True, in_flight=False)
        deadline = time.monotonic() + timeout
        remaining = len(producer)
        while remaining and time.monotonic() < deadline:
            if sigints[0] and not interrupted:
                # Stop at once, but say exactly what reached the broker: drop what is still
                # queued here and wait only for the requests in flight (a second Ctrl-C or
                # the timeout cuts that short).
                interrupted = True
                producer.purge(in_queue=True, in_flight=False)
            if sigints[0] > 1:
                break
            remaining = producer.flush(0.1)
    if interrupted:
        bar.abandon()
        unknown = f"; {remaining} more may have reached it" if remaining else ""
        raise ReplayInterrupted(f"interrupted: {acknowledged} of {total} records were produced to "
                                f"{to_topic!r}{unknown}; a new replay starts again from the first "
                                "record", acknowledged, total)
    bar.finish()
    if errors:
        raise ReplayError(errors[0])
    if remaining:
        raise ReplayError(f"{remaining} records were not acknowledged by {bootstrap} within {timeout:.0f} s")
    summary.seconds = time.monotonic() - started
    return summary


@contextlib.contextmanager
def _sigint_counter() -> Iterator[list[int]]:
    """Count SIGINTs (Ctrl-C) instead of raising KeyboardInterrupt, which, raised inside a
    delivery callback, confluent-kafka loses (its poll then fails with a SystemError). Only
    Python's default handler in the main thread is replaced; elsewhere the count stays 0."""
    count = [0]
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield count
        return

    def counted(signum, frame) -> None:
        count[0] += 1

    signal.signal(signal.SIGINT, counted)
    try:
        yield count
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _produce_all(producer, files: dict[int, list[Path]], to_topic: str, delivered, errors: list[str],
                 summary: ReplaySummary, bar: ProgressBar, sigints: list[int]) -> bool:
    """Hand every record to the producer; False if a Ctrl-C stopped it first."""
    for partition, paths in files.items():
        for table in partition_tables(paths):
            for key, value, millis, headers in zip(
                    table.column("key").to_pylist(), table.column("value").to_pylist(),
                    table.column("timestamp").cast("int64").to_pylist(), table.column("headers").to_pylist()):
                if sigints[0]:
                    return False
                millis //= 1000
                while True:
                    try:
                        # librdkafka's timestamp=0 is "none": the replay time.
                        producer.produce(to_topic, value=value, key=key, partition=partition,
                                         timestamp=0 if millis == NO_TIMESTAMP else millis,
                                         headers=headers and [(h["key"], h["value"]) for h in headers],
                                         on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.05)  # local queue full: let deliveries drain
                producer.poll(0)
                summary.records += 1
                summary.bytes += len(key or b"") + len(value or b"")
                bar.advance()
            if errors:
                return True
    return True


def _records_at_epoch(paths) -> int:
    """How many exported records have the timestamp 0 exactly."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    count = 0
    for path in paths:
        micros = pq.read_table(path, columns=["timestamp"]).column("timestamp").cast(pa.int64())
        count += pc.sum(pc.equal(micros, 0)).as_py() or 0
    return count


def _ensure_topic(bootstrap: str, producer, topic: str, partitions: int, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    metadata = producer.list_topics(timeout=timeout)
    existing = metadata.topics.get(topic)
    if existing is not None and existing.error is None:
        if len(existing.partitions) < partitions:
            raise ReplayError(f"topic {topic!r} has {len(existing.partitions)} partitions, "
                              f"the export has {partitions}")
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
    try:
        future.result(timeout)
    except Exception as exc:  # TOPIC_ALREADY_EXISTS from a racing auto-create is fine
        if "already exists" not in str(exc).lower():
            raise ReplayError(f"cannot create topic {topic!r}: {exc}") from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = producer.list_topics(topic, timeout=timeout).topics.get(topic)
        if info is not None and info.error is None and len(info.partitions) >= partitions:
            return
        time.sleep(0.1)
    raise ReplayError(f"topic {topic!r} did not get {partitions} partitions on {bootstrap}")
