"""A full disk, with real clients and a real ``minikafka serve`` process on a real tmpfs.

What is refused is not kept: a produce answered KAFKA_STORAGE_ERROR leaves nothing in the log
(the append is cut back, indexes included), so a producer that retries gets no duplicates,
including after a kill -9 and a start on the still-full disk. That start either recovers or
exits with one line naming the log dir, never by a signal (a sparse memory-mapped index
touched on a full tmpfs raises SIGBUS).
"""

from __future__ import annotations

import shutil

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaStorageError

from minikafka.testing import BrokerStartError, MinikafkaBroker


def consume_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=3000, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return [record.value for record in consumer]
    finally:
        consumer.close()


def test_refused_produces_leave_nothing_after_a_crash_on_a_full_disk(tmp_path, small_filesystem):
    work = tmp_path / "broker"
    disk = small_filesystem("4m", at=work / "data")
    broker = MinikafkaBroker(work, {"num.partitions": "1"})
    try:
        broker.start()
        disk.fill(leave=512 * 1024)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, linger_ms=0)
        acked, refused = [], []
        for i in range(1000):
            value = b"%05d" % i + b"x" * 5000
            try:
                producer.send("full", value).get(timeout=30)
                acked.append(value)
            except KafkaStorageError:
                refused.append(value)
                if len(refused) >= 10:
                    break
        producer.close()
        assert len(acked) > 20 and len(refused) == 10
        assert consume_all(broker.bootstrap, "full") == acked

        broker.kill()
        try:
            broker.start()
        except BrokerStartError:
            stderr = broker.stderr_since_start()
            assert broker.process.returncode == 1, stderr
            assert stderr.rstrip().splitlines()[-1].startswith(
                f"minikafka serve: error: cannot load logs from log dir {work / 'data'}: No space left on device"), stderr
            assert "Traceback" not in stderr
            disk.free()
            broker.start()
        assert consume_all(broker.bootstrap, "full") == acked
    finally:
        broker.close()


def test_a_roll_refused_for_want_of_an_inode_refuses_only_what_needs_it(tmp_path, small_filesystem):
    # With every inode taken, the segment cannot roll: a set that needs the roll is refused
    # (KAFKA_STORAGE_ERROR) and leaves nothing, one that fits the active segment is taken,
    # and once inodes are free again the roll goes through, after a kill -9 too.
    work = tmp_path / "broker"
    disk = small_filesystem("8m", at=work / "data", inodes=256)
    broker = MinikafkaBroker(work, {"num.partitions": "1", "log.segment.bytes": "16384"})
    try:
        broker.start()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, linger_ms=0)
        acked = []
        for i in range(2):
            value = b"big-%d-" % i + b"x" * 6000
            producer.send("inodes", value).get(timeout=30)
            acked.append(value)
        placeholders = disk.path / "placeholders"
        placeholders.mkdir()
        for i in range(256):
            try:
                (placeholders / str(i)).touch()
            except OSError:
                break
        else:
            raise AssertionError("the inodes never ran out")
        with pytest.raises(KafkaStorageError):
            producer.send("inodes", b"refused-" + b"x" * 6000).get(timeout=30)
        for i in range(3):
            value = b"small-%d" % i
            producer.send("inodes", value).get(timeout=30)
            acked.append(value)
        producer.close()
        assert consume_all(broker.bootstrap, "inodes") == acked

        broker.kill()
        shutil.rmtree(placeholders)
        broker.start()
        assert consume_all(broker.bootstrap, "inodes") == acked
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, linger_ms=0)
        value = b"after-" + b"x" * 6000
        producer.send("inodes", value).get(timeout=30)
        producer.close()
        assert consume_all(broker.bootstrap, "inodes") == acked + [value]
        assert len(list((work / "data" / "inodes-0").glob("*.log"))) == 2
    finally:
        broker.close()


def test_a_start_after_a_kill_9_needs_little_of_the_space_freed_on_a_full_disk(tmp_path, small_filesystem):
    # Recovery rebuilds the indexes of every segment a crash left unflushed; 1 MiB freed is
    # plenty for 16 small segments when each one's indexes are cut to size as it is done.
    work = tmp_path / "broker"
    disk = small_filesystem("6m", at=work / "data")
    broker = MinikafkaBroker(work, {"num.partitions": "1", "log.segment.bytes": "16384",
                                    "log.index.interval.bytes": "256"})
    try:
        broker.start()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        values = [b"%05d" % i + b"x" * 300 for i in range(16 * 16384 // 330)]
        for value in values:
            producer.send("segments", value)
        producer.flush(60)
        producer.close()
        assert len(list((work / "data" / "segments-0").glob("*.log"))) >= 16
        broker.kill()
        disk.fill(leave=1024 * 1024)
        broker.start()
        assert consume_all(broker.bootstrap, "segments") == values
    finally:
        broker.close()
