"""A Jepsen-style nemesis run: nothing a minikafka cluster acknowledged is lost.

A 3-broker cluster (plus ZooKeeper) takes writes with acks=all from kafka-python,
confluent-kafka and aiokafka producers (unique values, one RF 3 topic per client, with
min.insync.replicas=2) while a consumer reads; a nemesis meanwhile follows a schedule drawn
from the seed: SIGKILLs, SIGSTOP pauses, network partitions (the fixture's per-link proxies),
controlled shutdowns and leader moves, and three compound faults of issue 23: a follower
killed (the controller shrinks the ISR in a new epoch of the same leader) then, once writes
were acknowledged under that epoch, the leader killed too (``shrink_kill``); a controlled
shutdown while a producer keeps writing acks=1 to the old leader's connection
(``stale_producer``: the demoted broker must acknowledge none of them); a leader that writes
its own ISR change to ZooKeeper and dies before the controller hears of it (``isr_then_die``:
a new leader must be elected within ``ELECTION_BOUND_S``). Then every fault is healed, the time until the cluster
serves acks=all writes again is measured, the whole log is read back and every replica's
segment files are compared below the high watermark. ``check`` judges the history:

* acknowledged values lost: must be 0;
* acknowledged values at an offset other than the acknowledged one: 0;
* values read that no producer sent (phantom reads): 0;
* two different values at one offset (a read later overwritten, two acks for one offset): 0;
* duplicates (a value at two offsets): counted, allowed, as only a producer's retry makes one;
* replicas whose bytes below the high watermark differ: 0;
* acks=1 writes acknowledged by a leader after the controller had moved its leadership: 0;
* partitions still without a live leader ``ELECTION_BOUND_S`` after their leader died: 0.

    python3 bench/nemesis.py --minutes 10 --seed 42

prints the seed, the schedule (the same seed always draws the same one), what the nemesis
did and when, and the figures; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.records import build_message_set
from minikafka.testing import ZOOKEEPER, ControlError, MinikafkaCluster, kafka_request

BROKERS = (1, 2, 3)
PARTITIONS = 2
CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka")
OVERRIDES = {
    "min.insync.replicas": "2",
    # The leader drops a paused or cut-off follower from the ISR after this long.
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "controller.socket.timeout.ms": "5000",
    "controlled.shutdown.max.retries": "2",
    "controlled.shutdown.retry.backoff.ms": "300",
}
WARM_UP_S = 4.0
# A partition whose leader died must have another within this long after the death is seen.
ELECTION_BOUND_S = 15.0
COMPOUND = ("shrink_kill", "stale_producer", "isr_then_die")
# RF 2, nothing written: stale_producer makes one of its partitions unmovable, so that the
# stopping broker keeps retrying its controlled shutdown, and serving, after its other
# leaderships have moved.
STUCK_TOPIC = "nemesis-stuck"

TopicPartition = tuple[str, int]


def topic_of(client: str) -> str:
    return f"nemesis-{client}"


# ---------------------------------------------------------------------------------- schedule


@dataclass(frozen=True)
class Step:
    at_s: float          # seconds after the start of the run
    fault: str           # kill, stop, pause, partition, move_leader, or one of COMPOUND
    target: tuple        # broker id(s) / (topic, partition, to) / the partition's two groups
    duration_s: float    # how long until it is healed (0: a one-off)

    def describe(self) -> str:
        until = f" for {self.duration_s:.1f} s" if self.duration_s else ""
        return f"t+{self.at_s:6.1f} s  {self.fault:<11} {self._target()}{until}"

    def _target(self) -> str:
        if self.fault == "partition":
            a, b = self.target
            return f"{sorted(a, key=str)} | {sorted(b, key=str)}"
        if self.fault == "move_leader":
            topic, partition, to = self.target
            return f"{topic}-{partition} -> {to}"
        if self.fault in COMPOUND:
            topic, partition = self.target
            return f"{topic}-{partition}'s leader"
        return f"broker {self.target[0]}"


def schedule(seed: int, seconds: float) -> list[Step]:
    """The nemesis plan: a function of the seed and the run's length only, so a failing seed
    replays the same faults (their timing in the run still depends on how long each takes)."""
    rng = random.Random(seed)
    steps = []
    at = WARM_UP_S
    while True:
        fault = rng.choice(["kill", "stop", "pause", "partition", "partition", "move_leader", *COMPOUND])
        if fault in COMPOUND:
            target = (topic_of(rng.choice(CLIENTS)), rng.randrange(PARTITIONS))
            duration = round(rng.uniform(6, 12), 1)
        elif fault == "move_leader":
            client = rng.choice(CLIENTS)
            target = (topic_of(client), rng.randrange(PARTITIONS), rng.choice(BROKERS))
            duration = 0.0
        elif fault == "partition":
            victim = rng.choice(BROKERS)
            others = [b for b in BROKERS if b != victim]
            shape = rng.choice(["isolated", "from-brokers", "from-zookeeper", "split-zookeeper"])
            if shape == "isolated":         # alone: no broker, no ZooKeeper
                target = ((victim,), (*others, ZOOKEEPER))
            elif shape == "from-brokers":   # still in ZooKeeper, but no broker reaches it
                target = ((victim,), tuple(others))
            elif shape == "from-zookeeper":  # its session expires, the brokers still reach it
                target = ((victim,), (ZOOKEEPER,))
            else:                           # a majority of brokers without ZooKeeper
                target = ((victim, ZOOKEEPER), tuple(others))
            duration = round(rng.uniform(3, 10), 1)
        else:
            target = (rng.choice(BROKERS),)
            duration = round(rng.uniform(2, 9), 1)
        if at + duration > seconds:
            return steps
        steps.append(Step(round(at, 1), fault, target, duration))
        at += duration + rng.uniform(2, 6)


# ---------------------------------------------------------------------------------- history


@dataclass
class History:
    """Everything the run observed; ``check`` is a pure function of it."""
    sent: dict[bytes, str] = field(default_factory=dict)                  # value -> topic
    acked: list[tuple[bytes, str, int, int]] = field(default_factory=list)  # value, topic, partition, offset
    failed: int = 0                                                     # sends never acknowledged
    reads: list[tuple[str, int, int, bytes]] = field(default_factory=list)  # topic, partition, offset, value
    # after the heal: the whole log of each partition, offset -> value, read from its leader
    final: dict[TopicPartition, dict[int, bytes]] = field(default_factory=dict)
    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)
    # each replica's segment bytes below the high watermark: (topic, partition) -> broker -> bytes
    replicas: dict[TopicPartition, dict[int, bytes]] = field(default_factory=dict)
    recovery_s: float | None = None
    # acks=1 values a broker acknowledged after its leadership had moved (stale_producer)
    stale_acks: list[tuple[bytes, str, int, int]] = field(default_factory=list)
    # partitions left without a live leader ELECTION_BOUND_S after their leader died
    leaderless: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    violations: list[str]
    figures: dict[str, float | int | None]


def check(history: History) -> Verdict:
    violations: list[str] = []
    where: dict[bytes, list[tuple[str, int, int]]] = defaultdict(list)  # value -> places in the final log
    for (topic, partition), log in history.final.items():
        for offset, value in log.items():
            where[value].append((topic, partition, offset))

    lost = moved = 0
    acked_at: dict[tuple[str, int, int], bytes] = {}
    for value, topic, partition, offset in history.acked:
        other = acked_at.setdefault((topic, partition, offset), value)
        if other != value:
            violations.append(f"two values acknowledged at {topic}-{partition}@{offset}: {other!r} and {value!r}")
        if history.final.get((topic, partition), {}).get(offset) == value:
            continue
        if where.get(value):
            moved += 1
            violations.append(f"acknowledged {value!r} at {topic}-{partition}@{offset}, found at {where[value]}")
        else:
            lost += 1
            violations.append(f"acknowledged {value!r} at {topic}-{partition}@{offset} is lost")

    phantoms = 0
    for topic, partition, offset, value in history.reads:
        if value not in history.sent:
            phantoms += 1
            violations.append(f"read {value!r} at {topic}-{partition}@{offset}, which no producer sent")
        now = history.final.get((topic, partition), {}).get(offset)
        if now != value:
            violations.append(f"read {value!r} at {topic}-{partition}@{offset}, the log now holds {now!r} there")
    for value, places in where.items():
        if value not in history.sent:
            phantoms += 1
            violations.append(f"the log holds {value!r} at {places}, which no producer sent")
    duplicates = sum(len(places) - 1 for places in where.values() if len(places) > 1)

    diverged = 0
    for (topic, partition), by_broker in sorted(history.replicas.items()):
        if len(set(by_broker.values())) > 1:
            diverged += 1
            sizes = {b: len(data) for b, data in sorted(by_broker.items())}
            violations.append(f"replicas of {topic}-{partition} differ below the high watermark "
                              f"{history.high_watermarks.get((topic, partition))} (bytes per broker: {sizes})")

    for value, topic, partition, offset in history.stale_acks:
        violations.append(f"{value!r} acknowledged at {topic}-{partition}@{offset} by a broker no longer its leader")
    for what in history.leaderless:
        violations.append(what)

    figures = {
        "sent": len(history.sent), "acknowledged": len(history.acked), "not acknowledged": history.failed,
        "read during the run": len(history.reads),
        "in the final logs": sum(len(log) for log in history.final.values()),
        "lost acknowledged": lost, "acknowledged at another offset": moved, "phantom reads": phantoms,
        "duplicates (producer retries)": duplicates, "diverged replicas": diverged,
        "acks by a demoted leader": len(history.stale_acks), "leaderless after a leader died": len(history.leaderless),
        "recovery after the last heal (s)": None if history.recovery_s is None else round(history.recovery_s, 2),
    }
    return Verdict(violations, figures)


# ---------------------------------------------------------------------------------- clients


class Recorder:
    def __init__(self) -> None:
        self.history = History()
        self.lock = threading.Lock()

    def sent(self, value: bytes, topic: str) -> None:
        with self.lock:
            self.history.sent[value] = topic

    def acked(self, value: bytes, topic: str, partition: int, offset: int) -> None:
        with self.lock:
            self.history.acked.append((value, topic, partition, offset))

    def failed(self) -> None:
        with self.lock:
            self.history.failed += 1

    def read(self, topic: str, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.history.reads.append((topic, partition, offset, value))

    def stale_ack(self, value: bytes, topic: str, partition: int, offset: int) -> None:
        with self.lock:
            self.history.stale_acks.append((value, topic, partition, offset))

    def leaderless(self, what: str) -> None:
        with self.lock:
            self.history.leaderless.append(what)


def _values(client: str, stop: threading.Event):
    n = 0
    while not stop.is_set():
        yield f"{client}-{n}".encode()
        n += 1


def produce_kafka_python(bootstrap: str, recorder: Recorder, stop: threading.Event) -> None:
    from kafka import KafkaProducer

    topic = topic_of("kafka-python")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=5, retry_backoff_ms=200,
                             request_timeout_ms=10000, max_in_flight_requests_per_connection=1,
                             metadata_max_age_ms=2000)
    try:
        for value in _values("kafka-python", stop):
            recorder.sent(value, topic)
            try:
                meta = producer.send(topic, value).get(timeout=30)
            except Exception:
                recorder.failed()
                time.sleep(0.1)
                continue
            recorder.acked(value, topic, meta.partition, meta.offset)
    finally:
        producer.close(timeout=5)


def produce_confluent(bootstrap: str, recorder: Recorder, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    topic = topic_of("confluent-kafka")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000,
                         "request.timeout.ms": 10000, "retry.backoff.ms": 200, "enable.idempotence": False,
                         "max.in.flight": 5, "linger.ms": 5, "topic.metadata.refresh.interval.ms": 1000})

    def delivered(err, msg):
        if err is None:
            recorder.acked(msg.value(), msg.topic(), msg.partition(), msg.offset())
        else:
            recorder.failed()

    for value in _values("confluent-kafka", stop):
        recorder.sent(value, topic)
        producer.produce(topic, value, on_delivery=delivered)
        producer.poll(0)
        while len(producer) > 20 and not stop.is_set():  # a bounded window of in-flight values
            producer.poll(0.05)
    producer.flush(60)


def produce_aiokafka(bootstrap: str, recorder: Recorder, stop: threading.Event) -> None:
    from aiokafka import AIOKafkaProducer

    topic = topic_of("aiokafka")

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10000,
                                    retry_backoff_ms=200, enable_idempotence=False, metadata_max_age_ms=2000)
        await producer.start()
        try:
            for value in _values("aiokafka", stop):
                recorder.sent(value, topic)
                try:
                    meta = await asyncio.wait_for(producer.send_and_wait(topic, value), 30)
                except Exception:
                    recorder.failed()
                    await asyncio.sleep(0.1)
                    continue
                recorder.acked(value, topic, meta.partition, meta.offset)
        finally:
            await producer.stop()

    asyncio.run(run())


PRODUCERS = {"kafka-python": produce_kafka_python, "confluent-kafka": produce_confluent,
             "aiokafka": produce_aiokafka}


def consume(bootstrap: str, recorder: Recorder, stop: threading.Event) -> None:
    from kafka import KafkaConsumer, TopicPartition as KafkaTp

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             request_timeout_ms=15000, fetch_max_wait_ms=200, metadata_max_age_ms=2000)
    consumer.assign([KafkaTp(topic_of(c), p) for c in CLIENTS for p in range(PARTITIONS)])
    try:
        while not stop.is_set():
            try:
                for tp, records in consumer.poll(timeout_ms=500).items():
                    for record in records:
                        recorder.read(tp.topic, tp.partition, record.offset, record.value)
            except Exception as exc:  # a broker gone mid-fetch: the consumer carries on
                print(f"consumer: {type(exc).__name__}: {exc}", file=sys.stderr)
                time.sleep(0.2)
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------- the run


class Nemesis:
    def __init__(self, cluster: MinikafkaCluster, log, recorder: "Recorder") -> None:
        self.cluster = cluster
        self.log = log
        self.recorder = recorder
        self.down: dict[Step, list[int]] = {}  # what a compound fault stopped, for its undo

    def apply(self, step: Step) -> None:
        c = self.cluster
        if step.fault in COMPOUND:
            self.down[step] = getattr(self, "_" + step.fault)(*step.target)
        elif step.fault == "kill":
            c.kill(step.target[0])
        elif step.fault == "stop":
            c.stop(step.target[0])
        elif step.fault == "pause":
            c.pause(step.target[0])
        elif step.fault == "partition":
            c.partition(*step.target)
        elif step.fault == "move_leader":
            c.move_leader(*step.target)

    def undo(self, step: Step) -> None:
        c = self.cluster
        if step.fault in COMPOUND:
            for broker_id in self.down.pop(step, []):
                c.restart(broker_id)
        elif step.fault in ("kill", "stop"):
            c.restart(step.target[0])
        elif step.fault == "pause":
            c.resume(step.target[0])
        elif step.fault == "partition":
            c.heal()

    def _shrink_kill(self, topic: str, partition: int) -> list[int]:
        """Kill a follower: the controller takes it out of the ISR in a new epoch of the same
        leader; acks=all writes go on under that epoch; then kill the leader."""
        c = self.cluster
        leader = c.leader(topic, partition)
        if leader < 0:
            raise ControlError(f"{topic}-{partition} has no leader")
        controller = c.controller()
        follower = next((b for b in c.ids if b not in (leader, controller) and c.broker(b).running), None)
        if follower is None:
            raise ControlError("no running follower to kill")
        c.kill(follower)
        time.sleep(2.0)  # writes acknowledged under the new epoch
        self._kill_and_expect_election(leader, topic, partition)
        return [follower, leader]

    def _stale_producer(self, topic: str, partition: int) -> list[int]:
        """Controlled shutdown of the leader while a producer keeps sending acks=1 to it; once
        the controller has moved the leadership, whatever it acknowledges is a violation."""
        c = self.cluster
        old = c.leader(topic, partition)
        if old < 0:
            raise ControlError(f"{topic}-{partition} has no leader")
        # One of the stuck topic's partitions led by ``old`` alone in its ISR: the controlled
        # shutdown cannot move it and retries, a window in which ``old`` still serves.
        stuck = next(p for p in c.metadata([STUCK_TOPIC]).topics[0].partitions if old in p.replica_nodes)
        if stuck.leader_id != old:
            c.move_leader(STUCK_TOPIC, stuck.partition_index, to=old)
        other = next(r for r in stuck.replica_nodes if r != old)
        c.kill(other)
        bootstrap = c.broker(old).bootstrap
        others = [c.broker(b) for b in c.ids if b != old and c.broker(b).running and not c.broker(b).paused]
        stopping = threading.Thread(target=c.stop, args=(old,), daemon=True)
        stopping.start()
        moved, n = False, 0
        while stopping.is_alive():
            if not moved:
                try:
                    moved = any(_leader_seen(c, topic, partition, via) not in (old, -1) for via in others)
                except OSError:
                    pass
                time.sleep(0.02)
                continue
            value = f"stale-{old}-{topic}-{partition}-{time.monotonic_ns()}-{n}".encode()
            n += 1
            self.recorder.sent(value, topic)
            try:
                answer = kafka_request(bootstrap, ApiKey.PRODUCE, 2, {"acks": 1, "timeout_ms": 2000, "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": _message_set(value)}]}]},
                    timeout=5)
            except OSError:
                break  # it has stopped listening
            response = answer.responses[0].partition_responses[0]
            if response.error_code == 0:
                self.recorder.stale_ack(value, topic, partition, response.base_offset)
        stopping.join()
        return [other, old]

    def _isr_then_die(self, topic: str, partition: int) -> list[int]:
        """The leader shrinks its ISR in ZooKeeper and dies before the controller hears of it:
        the test writes that ISR change as the leader would (a minikafka leader writes its
        notification right after; Kafka 0.10.2's batches it for up to 5 s), then kills it."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import BadVersionError

        c = self.cluster
        leader, controller = c.leader(topic, partition), c.controller()
        if leader < 0:
            raise ControlError(f"{topic}-{partition} has no leader")
        zk = KazooClient(hosts=c.zookeeper_connect)
        zk.start(timeout=15)
        try:
            path = f"/brokers/topics/{topic}/partitions/{partition}/state"
            raw, stat = zk.get(path)
            state = json.loads(raw)
            dropped = next((r for r in state["isr"] if r not in (leader, controller)), None)
            if dropped is not None and len(state["isr"]) > 1:
                state["isr"] = [r for r in state["isr"] if r != dropped]
                zk.set(path, json.dumps(state).encode(), version=stat.version)
        except BadVersionError as exc:
            raise ControlError(f"{topic}-{partition}'s state changed meanwhile") from exc
        finally:
            zk.stop()
            zk.close()
        self._kill_and_expect_election(leader, topic, partition)
        return [leader]

    def _kill_and_expect_election(self, leader: int, topic: str, partition: int) -> None:
        c = self.cluster
        c.kill(leader)
        deadline = time.monotonic() + ELECTION_BOUND_S
        while time.monotonic() < deadline:
            try:
                if c.leader(topic, partition) not in (leader, -1):
                    return
            except (OSError, StopIteration):
                pass
            time.sleep(0.1)
        # -1 is fine when no other ISR member is alive: the partition waits for one.
        seen = c.leader(topic, partition)
        if seen == leader:
            self.recorder.leaderless(f"{topic}-{partition} still led by dead broker {leader} "
                                     f"{ELECTION_BOUND_S:.0f} s after it was killed")

    def heal_all(self) -> None:
        for broker_id in self.cluster.ids:
            broker = self.cluster.broker(broker_id)
            if broker.paused:
                self.cluster.resume(broker_id)
        self.cluster.heal()
        for broker_id in self.cluster.ids:
            if not self.cluster.broker(broker_id).running:
                self.cluster.restart(broker_id)


def _leader_seen(cluster: MinikafkaCluster, topic: str, partition: int, via) -> int:
    for entry in cluster.metadata([topic], via=via).topics:
        for p in entry.partitions:
            if p.partition_index == partition:
                return p.leader_id
    return -1


def _message_set(value: bytes) -> bytes:
    return build_message_set([(None, value, int(time.time() * 1000))])


def _read_whole_logs(bootstrap: str, high_watermarks: dict[TopicPartition, int]) -> dict[TopicPartition, dict[int, bytes]]:
    from kafka import KafkaConsumer, TopicPartition as KafkaTp

    final: dict[TopicPartition, dict[int, bytes]] = {tp: {} for tp in high_watermarks}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([KafkaTp(*tp) for tp in high_watermarks])
    deadline = time.monotonic() + 120
    try:
        while any(len(final[tp]) < hw for tp, hw in high_watermarks.items()) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=1000).items():
                for record in records:
                    final[(tp.topic, tp.partition)][record.offset] = record.value
    finally:
        consumer.close()
    return final


def _probe_acks_all(cluster: MinikafkaCluster, recorder: Recorder, deadline: float) -> None:
    """Until each partition takes an acks=all write again (a fresh producer, so no client's
    backoff state is measured); the probes are values of the history like any other."""
    from kafka import KafkaProducer

    attempt = 0
    for client in CLIENTS:
        topic = topic_of(client)
        while True:
            producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=0,
                                     request_timeout_ms=5000)
            try:
                for partition in range(PARTITIONS):
                    attempt += 1
                    value = f"probe-{attempt}".encode()
                    recorder.sent(value, topic)
                    meta = producer.send(topic, value, partition=partition).get(timeout=10)
                    recorder.acked(value, topic, meta.partition, meta.offset)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
            finally:
                producer.close(timeout=2)


def run(seconds: float, seed: int, work_dir: Path, out=print, zookeeper: str | None = None) -> Verdict:
    steps = schedule(seed, seconds)
    out(f"seed {seed}, {seconds:.0f} s, {len(steps)} faults scheduled:")
    for step in steps:
        out("  " + step.describe())
    recorder = Recorder()
    with MinikafkaCluster(work_dir, len(BROKERS), OVERRIDES, zookeeper=zookeeper) as cluster:
        for client in CLIENTS:
            cluster.create_topic(topic_of(client), PARTITIONS, len(BROKERS))
        cluster.create_topic(STUCK_TOPIC, len(BROKERS), 2)
        stop_producers, stop_consumer = threading.Event(), threading.Event()
        threads = [threading.Thread(target=PRODUCERS[c], args=(cluster.bootstrap, recorder, stop_producers),
                                    name=c, daemon=True) for c in CLIENTS]
        threads.append(threading.Thread(target=consume, args=(cluster.bootstrap, recorder, stop_consumer),
                                        name="consumer", daemon=True))
        for thread in threads:
            thread.start()
        nemesis = Nemesis(cluster, out, recorder)
        start = time.monotonic()
        out("nemesis:")
        for step in steps:
            time.sleep(max(0.0, start + step.at_s - time.monotonic()))
            began = time.monotonic() - start
            try:
                nemesis.apply(step)
                out(f"  t+{began:6.1f} s  {step.fault} {step._target()} (took effect in "
                    f"{time.monotonic() - start - began:.1f} s)")
            except (ControlError, TimeoutError) as exc:
                out(f"  t+{began:6.1f} s  {step.fault} {step._target()} not done: {exc}")
                continue
            if step.duration_s:
                time.sleep(max(0.0, start + began + step.duration_s - time.monotonic()))
                try:
                    nemesis.undo(step)
                    out(f"  t+{time.monotonic() - start:6.1f} s  healed {step.fault}")
                except (ControlError, TimeoutError) as exc:  # the final heal tries again
                    out(f"  t+{time.monotonic() - start:6.1f} s  healing {step.fault} not done: {exc}")
        time.sleep(max(0.0, start + seconds - time.monotonic()))
        # Recovery is timed from the moment the last faults are lifted.
        healed = time.monotonic()
        nemesis.heal_all()
        out(f"  t+{time.monotonic() - start:6.1f} s  everything healed")
        cluster.wait_for_full_isr()
        _probe_acks_all(cluster, recorder, healed + 120)
        recorder.history.recovery_s = time.monotonic() - healed
        stop_producers.set()
        for thread in threads[:-1]:
            thread.join(90)
        # Producers are done: once every replica is in sync the high watermark is the log end.
        cluster.wait_for_full_isr()
        stop_consumer.set()
        threads[-1].join(30)
        history = recorder.history
        tps = [(topic_of(c), p) for c in CLIENTS for p in range(PARTITIONS)]
        history.high_watermarks = {tp: cluster.high_watermark(*tp) for tp in tps}
        history.final = _read_whole_logs(cluster.bootstrap, history.high_watermarks)
        history.replicas = cluster.replicas_below_high_watermark(history.high_watermarks)
    verdict = check(history)
    out("figures:")
    for name, value in verdict.figures.items():
        out(f"  {name}: {value}")
    if verdict.violations:
        out(f"{len(verdict.violations)} violation(s) (seed {seed}):")
        for line in verdict.violations[:50]:
            out("  " + line)
    else:
        out(f"no violations (seed {seed})")
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0, help="length of the nemesis phase")
    parser.add_argument("--seed", type=int, default=None, help="draws the schedule (default: random)")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the cluster's files here")
    parser.add_argument("--zookeeper", default=None,
                        help="connect string of a running ZooKeeper to use (a chroot is taken); "
                             "default: start one")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line too")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="minikafka-nemesis-"))
    verdict = run(args.minutes * 60, seed, work_dir, out=lambda line: print(line, flush=True),
                  zookeeper=args.zookeeper)
    if args.json:
        print(json.dumps({"seed": seed, **verdict.figures, "violations": len(verdict.violations)}))
    return 1 if verdict.violations else 0


if __name__ == "__main__":
    sys.exit(main())
