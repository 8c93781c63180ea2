"""Exactly-once consume-transform-produce: an application (``eos_app.py``, confluent-kafka)
killed with SIGKILL at random points and started again, on one broker and on a 3-broker
cluster whose group coordinator or transaction coordinator is killed meanwhile, still writes every input exactly once
to its output, as a read_committed consumer counts it.

What makes it so: each batch's output and its consumed offsets are one transaction; a
restarted instance fences its predecessor (InitProducerId aborts its open transaction), and
its consumer resumes from the offsets of the last committed transaction only.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import KafkaError

from minikafka.protocol.apis import ApiKey
from minikafka.testing.clients import kafka_request

APP = Path(__file__).with_name("eos_app.py")
INPUTS = 3000
PARTITIONS = 3
RUN_TIMEOUT_S = 60
# The application's pause in each transaction: 150 transactions then take 3 s or more, which
# the kills need (the app once finished all the inputs before its fourth kill on one broker).
PAUSE_S = 0.02


class App:
    """The application process, started again whenever it is gone (a supervisor's job)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.process: subprocess.Popen | None = None
        self.starts = 0
        # Every start's stderr, appended: why an instance exited is what a failure needs.
        self.stderr = tempfile.TemporaryFile()

    def ensure_running(self) -> None:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, str(APP), self.bootstrap, str(PAUSE_S)],
                                            stdout=subprocess.DEVNULL, stderr=self.stderr)
            self.starts += 1

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-3000:].decode(errors="replace")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def produce_inputs(bootstrap: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(INPUTS):
        producer.send("in", key=str(i).encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
    producer.flush()
    producer.close()


def consumed(bootstrap: str) -> int:
    """Inputs the group committed as consumed (0 while its coordinator cannot answer)."""
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    except KafkaError:
        return 0
    try:
        committed = admin.list_group_offsets({"eos": None})["eos"]
    except KafkaError:
        return 0
    finally:
        admin.close()
    return sum(meta.offset for tp, meta in committed.items() if tp.topic == "in" and meta.offset > 0)


def run_with_kills(bootstrap: str, rng: random.Random, kills: int, while_running=lambda kill: None,
                   live_bootstrap=None) -> App:
    """Run the application, killing it ``kills`` times at random moments (``while_running``
    gets a turn before each kill), then until every input is consumed and committed, as the
    brokers of ``live_bootstrap()`` (default ``bootstrap``) tell."""
    app = App(bootstrap)
    live_bootstrap = live_bootstrap or (lambda: bootstrap)
    done = 0
    for kill in range(kills):
        # Killed while at work: after its next committed transaction, at a random moment.
        app.ensure_running()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while (now_done := consumed(live_bootstrap())) <= done:
            assert time.monotonic() < deadline, (f"the application made no progress ({app.starts} starts, "
                                                 f"{now_done} consumed):\n{app.stderr_tail()}")
            app.ensure_running()
            time.sleep(0.05)
        done = now_done
        assert done < INPUTS, "the application finished before it was killed"
        time.sleep(rng.uniform(0, 0.3))
        while_running(kill)
        app.kill()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while consumed(live_bootstrap()) < INPUTS:
        assert time.monotonic() < deadline, (f"the application did not finish ({app.starts} starts, "
                                             f"{consumed(live_bootstrap())} consumed):\n{app.stderr_tail()}")
        app.ensure_running()
        time.sleep(0.2)
    app.kill()
    return app


def committed_output(bootstrap: str) -> Counter:
    """Every value in ``out`` below the last stable offset, as a read_committed consumer sees it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    try:
        partitions = [TopicPartition("out", p, 0) for p in range(PARTITIONS)]
        ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in partitions}
        consumer.assign(partitions)
        values: Counter = Counter()
        positions = {p: 0 for p in ends}
        deadline = time.monotonic() + 30
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    values[message.value()] += 1
                    positions[message.partition()] = message.offset() + 1
            for tp in consumer.position(partitions):
                positions[tp.partition] = max(positions[tp.partition], tp.offset)
        return values
    finally:
        consumer.close()


def check_exactly_once(bootstrap: str) -> None:
    values = committed_output(bootstrap)
    expected = {f"v{i}!".encode() for i in range(INPUTS)}
    assert set(values) == expected, f"missing {len(expected - set(values))}, unexpected {set(values) - expected}"
    duplicated = {value: count for value, count in values.items() if count > 1}
    assert not duplicated, f"{len(duplicated)} input(s) in the output more than once"


def test_an_application_killed_at_random_points_outputs_every_input_once(minikafka_broker):
    bootstrap = minikafka_broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("in", PARTITIONS, 1), NewTopic("out", PARTITIONS, 1)])
    admin.close()
    produce_inputs(bootstrap)
    run_with_kills(bootstrap, random.Random(26), kills=4)
    check_exactly_once(bootstrap)


@pytest.mark.parametrize("coordinator, key_type, key", [("group", 0, "eos"), ("transaction", 1, "eos-app")])
def test_exactly_once_when_a_coordinators_broker_is_killed(minikafka_cluster_factory, coordinator, key_type, key):
    """kill -9 of the broker coordinating the application's group, or its transactional id,
    while the application runs (and is itself killed at random points)."""
    cluster = minikafka_cluster_factory(3)
    for topic in ("in", "out"):
        cluster.create_topic(topic, PARTITIONS, 3)
    bootstrap = cluster.bootstrap
    produce_inputs(bootstrap)
    killed = []

    def kill_the_coordinator(kill: int) -> None:
        """Once the application is under way, kill -9 the broker coordinating its group or id."""
        if kill:
            return
        answer = kafka_request(cluster.broker(1).bootstrap, ApiKey.FIND_COORDINATOR, 1,
                               {"key": key, "key_type": key_type})
        assert answer.error_code == 0
        cluster.kill(answer.node_id)
        killed.append(answer.node_id)

    run_with_kills(bootstrap, random.Random(447), kills=2, while_running=kill_the_coordinator,
                   live_bootstrap=lambda: cluster.bootstrap)
    check_exactly_once(cluster.bootstrap)
    assert killed
