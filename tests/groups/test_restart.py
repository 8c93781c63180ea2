"""Committed offsets and groups across broker restarts, against the real broker process.

What start-up loaded is read from the broker's log line
``loaded __consumer_offsets-P: snapshot at offset S, replayed K event(s) from offset S to E``.
"""

from __future__ import annotations

import re
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

LOADED = re.compile(r"loaded __consumer_offsets-(\d+): snapshot (none|at offset (\d+)), "
                    r"replayed (\d+) event\(s\) from offset (\d+) to (\d+)")


def last_load(broker, partition: int = 0) -> tuple[int | None, int, int, int]:
    """(snapshot offset, events replayed, replay start, log end) from the latest start."""
    text = broker.stderr_path.read_text()
    latest_start = text.rsplit("--- minikafka start #", 1)[-1]
    for match in LOADED.finditer(latest_start):
        if int(match[1]) == partition:
            snapshot = int(match[3]) if match[3] is not None else None
            return snapshot, int(match[4]), int(match[5]), int(match[6])
    raise AssertionError("no load line for the partition in the broker's log")


def committed(admin, group: str) -> dict[int, int]:
    return {tp.partition: meta.offset
            for tp, meta in admin.list_group_offsets({group: None}).get(group, {}).items()}


def test_restart_brings_back_offsets_and_the_group_itself(minikafka_broker):
    broker = minikafka_broker
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("orders", 2, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for index in range(10):
        producer.send("orders", f"{index}".encode(), partition=index % 2)
    producer.flush()
    consumer = KafkaConsumer("orders", bootstrap_servers=broker.bootstrap, group_id="keep",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < 10 and time.monotonic() < deadline:
        seen += [m.value for messages in consumer.poll(200).values() for m in messages]
        consumer.commit()
    assert len(seen) == 10
    member_before = admin.describe_groups(["keep"])["keep"]["members"][0]["member_id"]
    admin.close()
    producer.close()

    broker.restart()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    assert committed(admin, "keep") == {0: 5, 1: 5}
    described = admin.describe_groups(["keep"])["keep"]
    assert described["group_state"] == "Stable"
    assert [m["member_id"] for m in described["members"]] == [member_before]

    # The consumer carries on as the same member, from where it committed.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send("orders", b"after", partition=0)
    producer.flush()
    later = []
    deadline = time.monotonic() + 30
    while not later and time.monotonic() < deadline:
        later += [m.value for messages in consumer.poll(200).values() for m in messages]
    assert later == [b"after"]
    assert [m["member_id"] for m in admin.describe_groups(["keep"])["keep"]["members"]] == [member_before]
    consumer.close()
    producer.close()
    admin.close()


def test_kill_restart_replays_only_events_after_the_snapshot_and_survives_a_torn_one(
        minikafka_broker_factory):
    broker = minikafka_broker_factory(**{"offsets.topic.num.partitions": "1",
                                         "offsets.snapshot.interval.events": "20"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("clicks", 1, 1)])
    partition = TopicPartition("clicks", 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="snap",
                             enable_auto_commit=False)
    for offset in range(1, 51):                      # 50 commits: 50 events
        consumer.commit({partition: OffsetAndMetadata(offset, f"m{offset}", -1)})
        time.sleep(0.005)
    consumer.close()
    admin.close()

    broker.restart(clean=False)                      # SIGKILL: no shutdown snapshot
    snapshot, replayed, start, end = last_load(broker)
    assert end == 50
    assert snapshot is not None and snapshot >= 40 and start == snapshot
    assert replayed == end - snapshot < 20
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    assert committed(admin, "snap") == {0: 50}
    admin.close()

    directory = broker.log_dir / "__consumer_offsets-0" / "group-snapshots"
    snapshots = sorted(directory.glob("*.snapshot"))
    assert len(snapshots) == 2
    snapshots[-1].write_bytes(snapshots[-1].read_bytes()[:40])
    broker.restart(clean=False)
    older, replayed, start, end = last_load(broker)
    assert older == int(snapshots[0].name.split(".")[0]) and older < snapshot
    assert replayed == 50 - older
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    assert committed(admin, "snap") == {0: 50}
    assert admin.list_group_offsets({"snap": None})["snap"][partition].metadata == "m50"
    admin.close()
