"""Committed offsets and groups across broker restarts, against the real broker process.

What start-up loaded is read from the broker's log line
``loaded __consumer_offsets-P: snapshot at offset S, replayed K event(s) from offset S to E``
(``load_reports_in``).
"""

from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from minikafka.broker.groups.store import load_reports_in
from minikafka.broker.groups.store import LoadReport


def last_load(broker, partition: int = 0) -> LoadReport:
    """What the latest start of ``broker`` loaded for a ``__consumer_offsets`` partition. The
    broker loads it at the first group request, which this makes."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.list_groups()
    finally:
        admin.close()
    reports = [r for r in load_reports_in(broker.stderr_since_start()) if r.partition == partition]
    assert reports, "no load line for the partition in the broker's log"
    return reports[-1]


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
    consumer.partitions_for_topic("orders")   # kafka-python 3.0.12's lost join: see group_consumer.py
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


CLICKS = TopicPartition("clicks", 0)
# Group -> the offsets it commits to clicks-0, one event each, in this order. With a snapshot
# every 20 events, "early" ends up only in the first snapshot (the log below it is deleted
# once the second exists), "middle" only in the log between the snapshots and the second
# one, and "late" only in the log after the newest snapshot.
PHASES = {"early": range(1, 21), "middle": range(101, 121), "late": range(201, 211)}
EVERY_COMMIT = {group: (offsets[-1], f"{group}-{offsets[-1]}") for group, offsets in PHASES.items()}


def commit_phase(broker, group: str) -> None:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    for offset in PHASES[group]:
        consumer.commit({CLICKS: OffsetAndMetadata(offset, f"{group}-{offset}", -1)})
    consumer.close()


def wait_for_files(directory, pattern: str, names: list[str]) -> None:
    """Until ``directory`` holds exactly ``names`` matching ``pattern`` (snapshots are written,
    and the log pruned, in the background)."""
    deadline = time.monotonic() + 20
    while sorted(p.name for p in directory.glob(pattern)) != names:
        assert time.monotonic() < deadline, sorted(p.name for p in directory.glob(pattern))
        time.sleep(0.01)


def assert_every_commit_is_back(broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        offsets = admin.list_group_offsets({group: None for group in PHASES})
        assert {group: (offsets[group][CLICKS].offset, offsets[group][CLICKS].metadata)
                for group in PHASES} == EVERY_COMMIT
    finally:
        admin.close()


def test_kill_restart_replays_only_events_after_the_snapshot_and_survives_a_torn_one(
        minikafka_broker_factory):
    broker = minikafka_broker_factory(**{"offsets.topic.num.partitions": "1",
                                         "offsets.snapshot.interval.events": "20"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("clicks", 1, 1)])
    admin.close()
    offsets_dir = broker.log_dir / "__consumer_offsets-0"
    snapshots_dir = offsets_dir / "group-snapshots"
    commit_phase(broker, "early")
    wait_for_files(snapshots_dir, "*.snapshot", [f"{20:020d}.snapshot"])
    commit_phase(broker, "middle")
    wait_for_files(snapshots_dir, "*.snapshot", [f"{20:020d}.snapshot", f"{40:020d}.snapshot"])
    # The events of "early" are gone from the log: only the older snapshot holds them.
    wait_for_files(offsets_dir, "*.log", [f"{20:020d}.log", f"{40:020d}.log"])
    commit_phase(broker, "late")

    broker.restart(clean=False)                      # SIGKILL: no shutdown snapshot
    load = last_load(broker)
    assert (load.snapshot_offset, load.replay_start_offset, load.replay_end_offset,
            load.events_replayed) == (40, 40, 50, 10)
    assert_every_commit_is_back(broker)

    newest = snapshots_dir / f"{40:020d}.snapshot"
    newest.write_bytes(newest.read_bytes()[:40])
    broker.restart(clean=False)
    load = last_load(broker)
    assert (load.snapshot_offset, load.replay_start_offset, load.events_replayed) == (20, 20, 30)
    assert_every_commit_is_back(broker)

    # What the fallback loaded is what the next snapshots hold.
    broker.restart(clean=True)
    load = last_load(broker)
    assert load.snapshot_offset == 50 and load.events_replayed == 0
    assert_every_commit_is_back(broker)
