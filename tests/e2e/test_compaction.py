"""Log compaction seen by real clients against a real ``minikafka serve`` process: a consumer
reading from offset 0 while the cleaner works and after, a refused unkeyed record, a
stateful aiokafka app restoring its table from a compacted changelog after a restart, and an
idempotent producer whose records compaction removed keeping its sequence (the batch emptied,
not dropped) through a restart that rebuilds producer state from the log, with the three
clients reading past that empty batch."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition as AioTopicPartition
from confluent_kafka import Producer
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.record_batch import build_record_batch
from minikafka.testing import kafka_request

pytestmark = pytest.mark.timeout(180)

# What a test must set to see compaction within seconds (the README says the same).
BROKER = {"log.cleaner.backoff.ms": "100"}
TOPIC = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01",
         "segment.ms": "100"}


def create_topic(broker, name: str, **extra: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1, topic_configs={**TOPIC, **extra})])
    finally:
        admin.close()


def wait_for(condition, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_consumer_sees_a_correct_compacted_view_during_and_after_cleaning(minikafka_broker_factory, read_all):
    broker = minikafka_broker_factory(**BROKER)
    create_topic(broker, "table")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip", linger_ms=5,
                             batch_size=1024)  # a set within segment.bytes
    written: dict[int, tuple[bytes, bytes | None]] = {}  # offset -> (key, value) as produced
    futures = []
    for i in range(600):
        key = b"key-%d" % (i % 20)
        value = None if i % 97 == 0 else b"value-%d" % i
        futures.append((key, value, producer.send("table", key=key, value=value)))
    producer.flush(30)
    for key, value, future in futures:
        written[future.get(10).offset] = (key, value)
    latest = {}
    for offset in sorted(written):
        latest[written[offset][0]] = offset
    views: list[list] = []
    stop = threading.Event()

    def keep_reading():  # a consumer reading from 0 while the cleaner works
        while not stop.is_set():
            views.append(read_all(broker.bootstrap, "table"))

    reader = threading.Thread(target=keep_reading)
    reader.start()
    try:
        time.sleep(0.2)  # past segment.ms: the next append rolls the active segment
        producer.send("table", key=b"end", value=b"roll").get(10)
        # Superseded records go, below the active segment.
        compacted = wait_for(
            lambda: (view := read_all(broker.bootstrap, "table"))
            and [r.offset for r in view if r.key != b"end"] == sorted(latest.values()) and view,
            what="compaction")
    finally:
        stop.set()
        reader.join()
        producer.close()
    assert len(views) > 1
    for view in [*views, compacted]:
        offsets = [r.offset for r in view]
        assert offsets == sorted(set(offsets))
        # Offsets never change; every record read is one produced there; every key's latest is there.
        assert all(written.get(r.offset, (b"end", b"roll")) == (r.key, r.value) for r in view)
        assert set(latest.values()) <= set(offsets)


def _process_states() -> dict[int, tuple[str, int]]:
    """pid -> (state, parent pid) of every process, from /proc."""
    states = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                state, parent = stat.read().rsplit(")", 1)[1].split()[:2]
        except OSError:  # gone meanwhile
            continue
        states[int(entry)] = (state, int(parent))
    return states


def _descendants(pid: int) -> set[int]:
    """The processes ``pid`` started, and theirs (the cleaner's forkserver and workers)."""
    parents = {child: parent for child, (_, parent) in _process_states().items()}
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def test_a_broker_stopping_mid_pass_kills_the_cleaner_worker_and_keeps_the_log(minikafka_broker_factory, read_all):
    """Shutdown does not wait for a pass: its worker process is killed, its ``.cleaned`` files
    go, and the log the restarted broker serves is whole (groups swapped before stay)."""
    broker = minikafka_broker_factory(**BROKER, **{"log.cleaner.enable": "false",
                                                   "log.cleaner.io.max.bytes.per.second": "50000"})
    create_topic(broker, "slow", **{"segment.bytes": "16384"})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, batch_size=4096)
    try:
        for i in range(2000):
            producer.send("slow", key=b"key-%d" % (i % 50), value=b"%-100d" % i)
        producer.flush(30)
        time.sleep(0.2)  # past segment.ms: the next append rolls the active segment
        producer.send("slow", key=b"end", value=b"roll").get(10)
    finally:
        producer.close()
    written = {r.offset: (r.key, r.value) for r in read_all(broker.bootstrap, "slow")}
    latest = {key: offset for offset, (key, _) in sorted(written.items())}
    broker.overrides["log.cleaner.enable"] = "true"  # one pass, over the whole log, throttled
    broker.restart()
    directory = broker.log_dir / "slow-0"
    wait_for(lambda: any(name.endswith(".cleaned") for name in os.listdir(directory)), what="a pass writing")
    workers = _descendants(broker.process.pid)
    assert workers
    broker.stop()
    wait_for(lambda: all(_process_states().get(pid, ("Z",))[0] == "Z" for pid in workers),
             what="the cleaner's processes gone")
    checkpoint = broker.log_dir / "cleaner-offset-checkpoint"
    assert not checkpoint.exists() or "slow 0" not in checkpoint.read_text()  # the pass did not finish
    assert not [name for name in os.listdir(directory) if name.endswith(".cleaned")]
    broker.overrides["log.cleaner.enable"] = "false"
    broker.start()
    view = read_all(broker.bootstrap, "slow")
    offsets = [r.offset for r in view]
    assert offsets == sorted(set(offsets)) and set(latest.values()) <= set(offsets)
    assert all(written[r.offset] == (r.key, r.value) for r in view)


def test_a_record_without_a_key_is_refused(minikafka_broker_factory):
    broker = minikafka_broker_factory()
    create_topic(broker, "keyed")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0)
    try:
        with pytest.raises(KafkaError) as refused:
            producer.send("keyed", value=b"no key").get(10)
        assert refused.value.errno == 87  # INVALID_RECORD, as Kafka 2.8 answers Produce v8 (0.10.2: CORRUPT_MESSAGE)
        assert producer.send("keyed", key=b"k", value=b"v").get(10).offset == 0
    finally:
        producer.close()


class Table:
    """A stateful app's table backed by a compacted changelog, as a Kafka Streams or Faust
    store is: each change is sent keyed to the changelog; a new instance restores the table
    by reading the changelog from the start to its end (a null value deletes the key)."""

    def __init__(self, bootstrap: str, changelog: str) -> None:
        self.bootstrap = bootstrap
        self.changelog = changelog
        self.state: dict[bytes, bytes] = {}
        self.restored_records = 0

    async def restore(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition(self.changelog, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            while await consumer.position(tp) < end:
                for record in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                    self.restored_records += 1
                    if record.value is None:
                        self.state.pop(record.key, None)
                    else:
                        self.state[record.key] = record.value
        finally:
            await consumer.stop()

    async def apply(self, changes: list[tuple[bytes, bytes | None]]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap)
        await producer.start()
        try:
            for key, value in changes:
                await producer.send_and_wait(self.changelog, key=key, value=value)
                if value is None:
                    self.state.pop(key, None)
                else:
                    self.state[key] = value
        finally:
            await producer.stop()


def test_a_stateful_app_restores_its_table_from_a_compacted_changelog(minikafka_broker_factory, read_all):
    broker = minikafka_broker_factory(**BROKER)
    create_topic(broker, "app-changelog")
    app = Table(broker.bootstrap, "app-changelog")
    changes = [(b"user-%d" % (i % 15), None if i % 11 == 10 else b"balance-%d" % i) for i in range(300)]
    asyncio.run(asyncio.wait_for(app.apply(changes), 60))
    time.sleep(0.2)  # past segment.ms: the next change rolls the active segment
    asyncio.run(asyncio.wait_for(app.apply([(b"user-0", b"final")]), 60))
    wait_for(lambda: len(read_all(broker.bootstrap, "app-changelog")) < 60, what="compaction")
    broker.restart()
    restarted = Table(broker.bootstrap, "app-changelog")
    asyncio.run(asyncio.wait_for(restarted.restore(), 60))
    assert restarted.state == app.state
    assert restarted.restored_records < 60  # of 301 changes


def produce_keyed(bootstrap: str, topic: str, producer_id: int, sequence: int, *keys: bytes):
    """One idempotent batch, a record per key, in a Produce v3 of its own: (error, base offset)."""
    batch = build_record_batch([(key, b"first", int(time.time() * 1000), ()) for key in keys],
                               producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    answer = kafka_request(bootstrap, ApiKey.PRODUCE, 3, {
        "transactional_id": None, "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}]})
    slot = answer.responses[0].partition_responses[0]
    return ErrorCode(slot.error_code), slot.base_offset


def test_an_idempotent_producer_keeps_its_sequence_when_compaction_removes_its_records(
        minikafka_broker_factory, read_all):
    broker = minikafka_broker_factory(**BROKER)
    create_topic(broker, "owned")
    producer_id = kafka_request(broker.bootstrap, ApiKey.INIT_PRODUCER_ID, 0,
                                {"transactional_id": None, "transaction_timeout_ms": 60000}).producer_id
    assert produce_keyed(broker.bootstrap, "owned", producer_id, 0, b"k1", b"k2") == (ErrorCode.NONE, 0)
    # Another idempotent producer overwrites both keys; past segment.ms its next record rolls.
    other = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for key in (b"k1", b"k2"):
        other.produce("owned", key=key, value=b"second", partition=0)
    other.flush(30)
    time.sleep(0.2)
    other.produce("owned", key=b"end", value=b"roll", partition=0)
    assert other.flush(30) == 0
    del other  # librdkafka's producer ends when collected: it would dial the broker killed below
    compacted = [(2, b"k1", b"second"), (3, b"k2", b"second"), (4, b"end", b"roll")]

    def read(client: str = "kafka-python") -> list[tuple]:
        return [(r.offset, r.key, r.value) for r in read_all(broker.bootstrap, "owned", client=client)]

    wait_for(lambda: read() == compacted, what="compaction")
    # The first producer's batch is still there, emptied: every client reads past it.
    assert read("confluent-kafka") == read("aiokafka") == compacted

    # A crash that loses the producer snapshots: producer state is rebuilt from the log alone.
    broker.kill()
    for snapshot in (broker.log_dir / "owned-0").glob("*.snapshot"):
        snapshot.unlink()
    broker.start()
    # The batch is known still: a retry of it is answered with its offset, nothing appended; a
    # gap is refused; the next sequence is taken.
    assert produce_keyed(broker.bootstrap, "owned", producer_id, 0, b"k1", b"k2") == (ErrorCode.NONE, 0)
    assert produce_keyed(broker.bootstrap, "owned", producer_id, 3, b"k3")[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce_keyed(broker.bootstrap, "owned", producer_id, 2, b"k3") == (ErrorCode.NONE, 5)
