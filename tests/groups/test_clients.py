"""Real clients in consumer groups against a real minikafka broker process.

Each client library (kafka-python, confluent-kafka, aiokafka, kcat -G) runs group members
as separate processes, so a member can leave properly (SIGTERM: the client closes and sends
LeaveGroup) or crash (SIGKILL: the coordinator notices when its session times out). What
every member consumed is read from its stdout; committed offsets and group state are read
with kafka-python's admin client (OffsetFetch, DescribeGroups).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

CONSUMER_SCRIPT = Path(__file__).with_name("group_consumer.py")
PARTITIONS = 6
PER_PARTITION = 10
# Crash tests: the broker accepts short sessions, the crashed member is noticed in 3 s.
FAST_SESSIONS = {"group.min.session.timeout.ms": "1000"}
SESSION_MS = 3000
# Members learn of a rebalance from their next heartbeat; the clients' default intervals
# (3 s) would make every handover wait that long.
HEARTBEAT_MS = 250
CLIENTS = ["kafka-python", "confluent", "aiokafka",
           pytest.param("kcat", marks=pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed"))]


class Member:
    """One group member process and what it has consumed so far."""

    def __init__(self, client: str, bootstrap: str, topic: str, group: str,
                 session_ms: int | None = None) -> None:
        if client == "kcat":
            command = ["kcat", "-b", bootstrap, "-G", group, "-f", "%p %o\n", "-u", "-q",
                       "-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=100",
                       "-X", f"heartbeat.interval.ms={HEARTBEAT_MS}"]
            if session_ms:
                command += ["-X", f"session.timeout.ms={session_ms}"]
            command.append(topic)
        else:
            command = [sys.executable, str(CONSUMER_SCRIPT), client, bootstrap, topic, group,
                       str(HEARTBEAT_MS)]
            if session_ms:
                command.append(str(session_ms))
        self.client = client
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, text=True)
        self.consumed: list[tuple[int, int]] = []
        self.consumed_at: list[tuple[float, int, int]] = []      # (time, partition, offset)
        self.commits: list[tuple[float, int, int]] = []          # (time, partition, next offset)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            line = line.strip()
            if not line:
                continue
            if self.client == "kcat":
                partition, offset = line.split()
                self.consumed.append((int(partition), int(offset)))
            else:
                event = json.loads(line)
                for partition, offset in event.get("consumed", ()):
                    self.consumed.append((partition, offset))
                    self.consumed_at.append((event["t"], partition, offset))
                for partition, offset in event.get("committed", ()):
                    self.commits.append((event["t"], partition, offset))

    def leave(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(30) == 0 or self.client == "kcat", self.process.stderr.read()
        self._reader.join(10)

    def crash(self) -> None:
        self.process.kill()
        self.process.wait(10)
        self._reader.join(10)

    def partitions(self) -> set[int]:
        return {partition for partition, _ in self.consumed}


@pytest.fixture
def members():
    started: list[Member] = []
    yield started
    for member in started:
        if member.process.poll() is None:
            member.process.kill()
            member.process.wait(10)


def wait_until(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Cluster:
    """Producer, admin client and a topic on one broker."""

    def __init__(self, broker, topic: str = "events") -> None:
        self.broker = broker
        self.topic = topic
        self.admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        self.admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        self.producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        self.end = 0

    def produce_round(self) -> None:
        """PER_PARTITION more messages in every partition."""
        for index in range(PER_PARTITION):
            for partition in range(PARTITIONS):
                self.producer.send(self.topic, f"{self.end + index}".encode(), partition=partition)
        self.producer.flush()
        self.end += PER_PARTITION

    def committed(self, group: str) -> dict[int, int]:
        offsets = self.admin.list_group_offsets({group: None}).get(group, {})
        return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == self.topic}

    def wait_committed_to_end(self, group: str) -> None:
        wait_until(lambda: self.committed(group) == {p: self.end for p in range(PARTITIONS)},
                   f"group {group} to commit every partition up to {self.end}")

    def describe(self, group: str) -> dict:
        return self.admin.describe_groups([group])[group]

    def wait_stable(self, group: str, size: int) -> dict:
        def stable():
            described = self.describe(group)
            # kafka-python decodes an empty assignment (any state but Stable) as "".
            assigned = [m["member_assignment"] and m["member_assignment"]["assigned_partitions"]
                        for m in described["members"]]
            if described["group_state"] == "Stable" and len(assigned) == size and all(assigned):
                return described
            return None
        return wait_until(stable, f"group {group} to be Stable with {size} member(s), each assigned")

    def close(self) -> None:
        self.producer.close()
        self.admin.close()


@pytest.fixture
def cluster_factory():
    made = []

    def make(broker, topic="events"):
        made.append(Cluster(broker, topic))
        return made[-1]

    yield make
    for cluster in made:
        cluster.close()


def assert_partitions_split(described: dict) -> None:
    """Every member of the (Stable) group holds partitions, and together they hold each
    partition of the topic exactly once."""
    split = [set(m["member_assignment"]["assigned_partitions"][0]["partitions"]) for m in described["members"]]
    assert all(split) and sum(map(len, split)) == len(set().union(*split)) == PARTITIONS, split


def assert_nothing_committed_is_consumed_again(all_members: list[Member], end: int) -> None:
    """Every message was consumed, and none was consumed after a commit covering it.

    The Python members report each successful commit (with its time), so a message consumed
    again because its first consumer's commit was refused in a rebalance is allowed, as
    Kafka's at-least-once delivery allows it. kcat commits on its own timer without telling
    us, and its members are only stopped once everything is committed: for kcat every
    message must be consumed exactly once."""
    counts = Counter(pair for member in all_members for pair in member.consumed)
    expected = {(p, o) for p in range(PARTITIONS) for o in range(end)}
    assert set(counts) == expected
    if all_members[0].client == "kcat":
        duplicates = {pair: n for pair, n in counts.items() if n > 1}
        assert not duplicates, f"consumed more than once: {sorted(duplicates)[:10]}"
        return
    commits = [commit for member in all_members for commit in member.commits]
    again = [(p, o) for member in all_members for t, p, o in member.consumed_at
             if any(ct < t and cp == p and cn > o for ct, cp, cn in commits)]
    assert not again, f"committed, then consumed again: {sorted(again)[:10]}"


@pytest.mark.parametrize("how", ["leave", "crash"])
@pytest.mark.parametrize("client", CLIENTS)
def test_two_members_split_partitions_and_the_other_takes_over_when_one_leaves_or_crashes(
        client, how, minikafka_broker_factory, cluster_factory, members):
    broker = minikafka_broker_factory(**FAST_SESSIONS)
    cluster = cluster_factory(broker)
    group = f"two-{client}-{how}"
    for _ in range(2):
        members.append(Member(client, broker.bootstrap, cluster.topic, group, SESSION_MS))
    assert_partitions_split(cluster.wait_stable(group, 2))
    cluster.produce_round()
    cluster.wait_committed_to_end(group)
    first, second = members
    assert first.partitions() and second.partitions()

    getattr(first, how)()        # crash: no LeaveGroup, only its session timeout removes it
    cluster.produce_round()
    cluster.wait_committed_to_end(group)
    assert {p for p, o in second.consumed if o >= PER_PARTITION} == set(range(PARTITIONS))
    assert_nothing_committed_is_consumed_again(members, cluster.end)
    assert len(cluster.describe(group)["members"]) == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_three_members_one_leaves_one_crashes_the_last_takes_over(client, minikafka_broker_factory,
                                                                  cluster_factory, members):
    broker = minikafka_broker_factory(**FAST_SESSIONS)
    cluster = cluster_factory(broker)
    group = f"three-{client}"
    for _ in range(3):
        members.append(Member(client, broker.bootstrap, cluster.topic, group, SESSION_MS))
    assert_partitions_split(cluster.wait_stable(group, 3))
    cluster.produce_round()
    cluster.wait_committed_to_end(group)
    assert all(member.partitions() for member in members)

    leaver, crasher, survivor = members
    crasher.crash()              # no LeaveGroup: only its session timeout removes it
    cluster.wait_stable(group, 2)
    leaver.leave()
    cluster.produce_round()
    cluster.wait_committed_to_end(group)
    assert {p for p, o in survivor.consumed if o >= PER_PARTITION} == set(range(PARTITIONS))
    assert_nothing_committed_is_consumed_again(members, cluster.end)
    assert len(cluster.describe(group)["members"]) == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_stop_and_start_resumes_at_the_committed_offset(client, minikafka_broker, cluster_factory,
                                                        members):
    cluster = cluster_factory(minikafka_broker)
    group = f"resume-{client}"
    cluster.produce_round()
    members.append(Member(client, minikafka_broker.bootstrap, cluster.topic, group))
    cluster.wait_committed_to_end(group)
    members[0].leave()
    assert cluster.describe(group)["group_state"] == "Empty"
    cluster.produce_round()
    members.append(Member(client, minikafka_broker.bootstrap, cluster.topic, group))
    cluster.wait_committed_to_end(group)
    assert min(o for _, o in members[1].consumed) == PER_PARTITION
    assert_nothing_committed_is_consumed_again(members, cluster.end)


def test_kafka_python_and_confluent_share_one_group(minikafka_broker_factory, cluster_factory, members):
    broker = minikafka_broker_factory(**FAST_SESSIONS)
    cluster = cluster_factory(broker)
    group = "mixed"
    for client in ("kafka-python", "confluent", "kafka-python", "confluent"):
        members.append(Member(client, broker.bootstrap, cluster.topic, group, SESSION_MS))
    described = cluster.wait_stable(group, 4)
    assert {m["client_id"].split("-")[0] for m in described["members"]} == {"kafka", "rdkafka"}
    assert_partitions_split(described)
    cluster.produce_round()
    cluster.wait_committed_to_end(group)
    assert all(member.partitions() for member in members)
    members[0].leave()
    members[1].crash()
    cluster.produce_round()
    cluster.wait_committed_to_end(group)
    assert_nothing_committed_is_consumed_again(members, cluster.end)


def test_consumer_offsets_is_listed_as_kafka_lists_it(minikafka_broker):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": minikafka_broker.bootstrap})
    # As in Kafka, __consumer_offsets exists once a client has used a group.
    admin.list_consumer_groups().result(timeout=10)
    # Kafka 0.10.2 lists internal topics in every all-topics Metadata; librdkafka's
    # list_topics shows them as they come (its consumers leave them out of regex subscriptions).
    assert len(admin.list_topics(timeout=10).topics["__consumer_offsets"].partitions) == 4
    by_name = admin.list_topics(topic="__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    assert by_name.error is None and len(by_name.partitions) == 4
