"""Consumer group figures: time to a first assignment, coordinator start-up with 1M events,
and coordinator failover on a 3-broker cluster.

    python3 bench/bench_groups.py                  # full run (1,000,000 offset-commit events)
    python3 bench/bench_groups.py --quick          # 100,000 events
    python3 bench/bench_groups.py --events 20000   # any number
    python3 bench/bench_groups.py --skip-assignment --skip-startup   # the cluster case only

1. Time from subscribe to first assigned partition, per client library, against a real
   ``minikafka serve`` process with default settings, each run on a new group of a 6-partition
   topic: a single member; and three members started together, until all three hold a share
   of the partitions (the group has settled). Clients run with their default configuration.
   kcat is a separate process: its figure is from process start to the assignment it
   reports on stderr.
2. Broker start-up (process start to the answer to its first group request, when a single
   broker loads the coordinator) on a data directory holding N
   committed-offset events in ``__consumer_offsets`` (1000 groups x 100 partitions, each
   committed N/100000 times), once with no snapshot (the whole log is replayed) and once
   after a clean shutdown (a snapshot covers the log; nothing is replayed). The events each
   start replayed are read from the broker's load lines and printed; the run fails if the
   first start replayed fewer than N or the second replayed any.
3. Cluster (3 brokers, a ZooKeeper of their own, ``zookeeper.session.timeout.ms`` 4000): a
   kafka-python consumer group commits after every poll of a 6-partition RF 3 topic being
   produced to; the coordinator's broker is killed (SIGKILL) and the time from the kill to the
   group's next committed offset is printed (goal: under 2 x the session timeout plus one
   rebalance). Then the new coordinator's load of N committed-offset events in a one-partition
   ``__consumer_offsets`` after a kill -9 of its leader: without a snapshot on the new leader
   (followers' snapshots off) and with one (followers snapshot every 10,000 events), from its
   "leader at epoch" log line to its "loaded" line, with the events it replayed.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path


from minikafka.broker.config import BrokerConfig  # noqa: E402
from minikafka.broker.groups.coordinator import PartitionCommit  # noqa: E402
from minikafka.broker.groups.store import load_reports_in  # noqa: E402
from minikafka.broker.server import Broker  # noqa: E402
from minikafka.testing import MinikafkaBroker, MinikafkaCluster, kafka_request  # noqa: E402

PARTITIONS = 6
RUNS = 3


def time_member_threads(member, count, assignments, consumers):
    """Run ``member(index, done)`` in ``count`` threads; return the seconds from their start
    until ``assignments()`` shows the partitions split among all of them, then stop the
    threads and close ``consumers``."""
    done = threading.Event()
    threads = [threading.Thread(target=member, args=(index, done), daemon=True) for index in range(count)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    wait_split(assignments, count)
    elapsed = time.perf_counter() - start
    done.set()
    for thread in threads:
        thread.join()
    for consumer in consumers:
        consumer.close()
    return elapsed


def kafka_python_members(bootstrap, topic, group, count):
    from kafka import KafkaConsumer

    consumers = []

    def member(index, done):
        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group)
        consumers.append(consumer)
        while not done.is_set():
            # kafka-python 3.0.12 can drop a SyncGroup answer that arrives while a very short
            # poll() gives up on the join (its "timeout in ensure_active_group"); 500 ms
            # polls avoid that client race without slowing the join itself.
            consumer.poll(500)

    return time_member_threads(member, count, lambda: [c.assignment() for c in list(consumers)], consumers)


def confluent_members(bootstrap, topic, group, count):
    from confluent_kafka import Consumer

    assignments = [set() for _ in range(count)]
    consumers = []

    def member(index, done):
        def on_assign(consumer, partitions):
            assignments[index] = {p.partition for p in partitions}

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumers.append(consumer)
        consumer.subscribe([topic], on_assign=on_assign)
        while not done.is_set():
            consumer.poll(0.02)

    return time_member_threads(member, count, lambda: assignments, consumers)


def aiokafka_members(bootstrap, topic, group, count):
    from aiokafka import AIOKafkaConsumer

    async def run():
        consumers = [AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group)
                     for _ in range(count)]
        start = time.perf_counter()
        await asyncio.gather(*(c.start() for c in consumers))
        while not split_done([c.assignment() for c in consumers], count):
            await asyncio.gather(*(c.getmany(timeout_ms=20) for c in consumers))
        elapsed = time.perf_counter() - start
        await asyncio.gather(*(c.stop() for c in consumers))
        return elapsed

    return asyncio.run(run())


def kcat_members(bootstrap, topic, group, count):
    """kcat reports its rebalances on stderr: ``% Group G rebalanced (memberid M): assigned:
    T [0], T [1]`` and ``... revoked: ...``."""
    command = ["kcat", "-b", bootstrap, "-G", group, "-f", "%p\n", "-u", topic]
    start = time.perf_counter()
    processes = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for _ in range(count)]
    assigned = [set() for _ in range(count)]

    def read(index):
        for line in processes[index].stderr:
            if "rebalanced" in line and "assigned:" in line:
                assigned[index] = {int(p) for p in re.findall(r"\[(\d+)\]", line.split("assigned:")[1])}
            elif "rebalanced" in line and "revoked:" in line:
                assigned[index] = set()

    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(count)]
    for reader in readers:
        reader.start()
    wait_split(lambda: assigned, count)
    elapsed = time.perf_counter() - start
    for process in processes:
        process.terminate()
        process.wait(30)
    return elapsed


def split_done(assignments, count) -> bool:
    """Every member holds partitions, and together they hold each partition exactly once."""
    sets = [set(a) for a in assignments]
    if len(sets) != count or not all(sets):
        return False
    return sum(map(len, sets)) == len(set().union(*sets)) == PARTITIONS


def wait_split(get, count, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not split_done(list(get()), count):
        if time.monotonic() > deadline:
            raise TimeoutError("group did not settle")
        time.sleep(0.002)


CLIENTS = {"kafka-python": kafka_python_members, "confluent-kafka": confluent_members,
           "aiokafka": aiokafka_members, "kcat": kcat_members}


def bench_assignment(initial_delay_ms: int | None) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    overrides = {} if initial_delay_ms is None else {"group.initial.rebalance.delay.ms": str(initial_delay_ms)}
    with MinikafkaBroker(overrides=overrides) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic("bench", PARTITIONS, 1)])
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        for partition in range(PARTITIONS):
            producer.send("bench", b"x", partition=partition)
        producer.flush()
        producer.close()
        admin.close()
        delay = "default (0)" if initial_delay_ms is None else initial_delay_ms
        print(f"subscribe -> first assignment, new group, {PARTITIONS}-partition topic, "
              f"default client settings, group.initial.rebalance.delay.ms {delay} "
              f"(best / median of {RUNS}):")
        for name, members in CLIENTS.items():
            if name == "kcat" and shutil.which("kcat") is None:
                continue
            for count in (1, 3):
                times = sorted(members(broker.bootstrap, "bench", f"bench-{uuid.uuid4()}", count)
                               for _ in range(RUNS))
                print(f"  {name:16} {count} member(s): best {times[0] * 1000:8.1f} ms   "
                      f"median {times[len(times) // 2] * 1000:8.1f} ms", flush=True)


def fill_offsets_log(data_dir: Path, events: int) -> None:
    """Append ``events`` offset-commit events through the coordinator, without snapshots."""
    config = BrokerConfig({"log.dirs": str(data_dir), "offsets.snapshot.interval.events": str(events + 1),
                           "offsets.snapshot.interval.bytes": str(2**62)})
    broker = Broker(config)
    broker.log_manager.startup()
    coordinator = broker.group_coordinator
    coordinator.startup()
    groups, partitions = 1000, 100
    written = 0
    round_ = 0
    while written < events:
        for group in range(groups):
            commits = [PartitionCommit("topic", p, round_ * 1000 + p, "") for p in range(partitions)]
            coordinator.commit_offsets(f"group-{group}", "", -1, -1, commits)
            written += partitions
            if written >= events:
                break
        round_ += 1
    # A crash-like stop: logs flushed and closed, but no shutdown snapshot.
    for topic, count in broker.log_manager.topics().items():
        for partition in range(count):
            broker.log_manager.get_log(topic, partition).flush()
    broker.log_manager.shutdown()


def time_start(work_dir: Path) -> tuple[float, int]:
    """Seconds from starting ``minikafka serve`` on ``work_dir``/data to the answer to its
    first group request (a single broker loads ``__consumer_offsets`` then), and the events
    that start replayed (over every ``__consumer_offsets`` partition)."""
    from minikafka.protocol.apis import ApiKey

    broker = MinikafkaBroker(work_dir)
    start = time.perf_counter()
    broker.start()
    kafka_request(broker.bootstrap, ApiKey.LIST_GROUPS, 0, {}, timeout=600)
    elapsed = time.perf_counter() - start
    broker.stop()
    reports = load_reports_in(broker.stderr_since_start())
    if not reports:
        raise SystemExit(f"no __consumer_offsets load lines in {broker.stderr_path}")
    return elapsed, sum(report.events_replayed for report in reports)


def bench_startup(events: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-groups-"))
    try:
        data_dir = work / "data"
        started = time.perf_counter()
        fill_offsets_log(data_dir, events)
        print(f"\nwrote {events:,} offset-commit events in {time.perf_counter() - started:.1f} s")
        for snapshot_dir in data_dir.glob("__consumer_offsets-*/group-snapshots"):
            shutil.rmtree(snapshot_dir)
        # MinikafkaBroker stops with SIGTERM: a clean shutdown, which writes snapshots. The
        # first start is the full replay; the second loads those snapshots.
        without, without_replayed = time_start(work)
        with_snapshot, with_replayed = time_start(work)
        empty, _ = time_start(work / "empty")
        print(f"broker start-up with {events:,} committed-offset events:")
        print(f"  no snapshot (full replay):  {without:7.2f} s   replayed {without_replayed:,} event(s)")
        print(f"  with snapshot:              {with_snapshot:7.2f} s   replayed {with_replayed:,} event(s)")
        print(f"  empty data dir, for scale:  {empty:7.2f} s")
        if without_replayed < events:
            raise SystemExit(f"FAILED: the start without a snapshot replayed {without_replayed:,} "
                             f"event(s), fewer than the {events:,} written")
        if with_replayed:
            raise SystemExit(f"FAILED: the start with a snapshot replayed {with_replayed:,} event(s); "
                             "the snapshot did not cover the log")
    finally:
        shutil.rmtree(work, ignore_errors=True)


SESSION_TIMEOUT_MS = 4000   # MinikafkaCluster's zookeeper.session.timeout.ms
OFFSETS_TOPIC = "__consumer_offsets"


def coordinator_node(cluster, group: str, timeout: float = 120.0) -> int:
    from minikafka.protocol.apis import ApiKey

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for broker in cluster.brokers:
            if broker.running:
                try:
                    answer = kafka_request(broker.bootstrap, ApiKey.FIND_COORDINATOR, 0, {"key": group})
                except OSError:
                    continue
                if answer.error_code == 0 and cluster.broker(answer.node_id).running:
                    return answer.node_id
        time.sleep(0.05)
    raise TimeoutError(f"no coordinator for {group}")


def failover_to_next_commit(work: Path) -> float:
    """Seconds from the coordinator's kill -9 to the group's next committed offset."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    with MinikafkaCluster(work, 3) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic("bench", PARTITIONS, 3)])
        admin.close()
        stop = threading.Event()
        commits: list[float] = []

        def produce():
            producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=1, retries=100)
            while not stop.is_set():
                producer.send("bench", b"x")
                time.sleep(0.002)
            producer.close(5)

        def consume():
            consumer = KafkaConsumer("bench", bootstrap_servers=cluster.bootstrap, group_id="bench-failover",
                                     enable_auto_commit=False, auto_offset_reset="earliest")
            while not stop.is_set():
                if consumer.poll(100):
                    consumer.commit()
                    commits.append(time.perf_counter())
            consumer.close()

        threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
        for thread in threads:
            thread.start()
        try:
            deadline = time.monotonic() + 120
            while not commits:
                if time.monotonic() > deadline:
                    raise SystemExit("FAILED: the group committed nothing within 120 s")
                time.sleep(0.05)
            time.sleep(1)
            coordinator = coordinator_node(cluster, "bench-failover")
            cluster.broker(coordinator).kill()
            killed = time.perf_counter()
            deadline = killed + 120
            while not [t for t in commits if t > killed]:
                if time.perf_counter() > deadline:
                    raise SystemExit("FAILED: no commit within 120 s of the coordinator's kill")
                time.sleep(0.01)
            return min(t for t in commits if t > killed) - killed
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)


def wait_for_full_isr(cluster, topic: str, timeout: float = 600.0) -> None:
    """Until every partition of ``topic`` has all three replicas in its ISR (after the
    stop-everything-and-restart above, only the broker stopped last is)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topics = cluster.metadata([topic]).topics
        if topics and topics[0].partitions and all(len(p.isr_nodes) == 3 for p in topics[0].partitions):
            return
        time.sleep(0.2)
    raise SystemExit(f"FAILED: {topic} has no full ISR")


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", re.M)


def _log_seconds(line: str) -> float:
    import datetime

    stamp = datetime.datetime.strptime(_LOG_TIME.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


def failover_load(work: Path, events: int, follower_snapshots: bool) -> tuple[float, int]:
    """The new coordinator's load of ``events`` after its leader's kill -9: seconds from its
    "leader at epoch" line to its "loaded" line, and the events it replayed."""
    interval = 10_000 if follower_snapshots else 2**40
    overrides = {"offsets.topic.num.partitions": "1", "offsets.snapshot.interval.events": str(interval)}
    with MinikafkaCluster(work, 3, overrides) as cluster:
        coordinator_node(cluster, "probe")   # creates __consumer_offsets
        time.sleep(1)
        for broker in cluster.brokers:
            broker.stop()
        first = cluster.brokers[0].log_dir
        fill_offsets_log(first, events)
        for snapshot_dir in first.glob(f"{OFFSETS_TOPIC}-*/group-snapshots"):
            shutil.rmtree(snapshot_dir)
        for broker in cluster.brokers[1:]:
            target = broker.log_dir / f"{OFFSETS_TOPIC}-0"
            shutil.rmtree(target)
            shutil.copytree(first / f"{OFFSETS_TOPIC}-0", target)
        for broker in cluster.brokers:
            broker.start()
        leader = coordinator_node(cluster, "probe", timeout=600)
        followers = [b for i, b in enumerate(cluster.brokers, 1) if i != leader]
        if follower_snapshots:
            deadline = time.monotonic() + 600
            while not all(list((b.log_dir / f"{OFFSETS_TOPIC}-0" / "group-snapshots").glob("*.snapshot"))
                          for b in followers):
                if time.monotonic() > deadline:
                    raise SystemExit("FAILED: the followers wrote no snapshot")
                time.sleep(0.5)
        wait_for_full_isr(cluster, OFFSETS_TOPIC)
        cluster.broker(leader).kill()
        new_leader = coordinator_node(cluster, "probe", timeout=600)
        deadline = time.monotonic() + 600
        while True:
            text = cluster.broker(new_leader).stderr_since_start()
            became = [line for line in text.splitlines() if f"{OFFSETS_TOPIC}-0: leader at epoch" in line]
            loaded = [line for line in text.splitlines() if f"loaded {OFFSETS_TOPIC}-0:" in line]
            if became and loaded and _log_seconds(loaded[-1]) >= _log_seconds(became[-1]):
                break
            if time.monotonic() > deadline:
                raise SystemExit("FAILED: the new coordinator did not load")
            time.sleep(0.2)
        replayed = load_reports_in(loaded[-1])[0].events_replayed
        return _log_seconds(loaded[-1]) - _log_seconds(became[-1]), replayed


def bench_cluster(events: int) -> None:
    if shutil.which("java") is None:
        print("\ncluster figures skipped: no java for ZooKeeper")
        return
    work = Path(tempfile.mkdtemp(prefix="bench-groups-cluster-"))
    try:
        times = sorted(failover_to_next_commit(work / f"failover-{run}") for run in range(RUNS))
        print(f"\ncluster of 3, zookeeper.session.timeout.ms {SESSION_TIMEOUT_MS}: coordinator kill -9 -> the "
              f"group's next committed offset (kafka-python, best / median of {RUNS}): best {times[0]:.2f} s   "
              f"median {times[len(times) // 2]:.2f} s   (goal: < {2 * SESSION_TIMEOUT_MS / 1000:.0f} s + one rebalance)",
              flush=True)
        print(f"new coordinator's load of {events:,} committed-offset events after its leader's kill -9:")
        for snapshots in (False, True):
            seconds, replayed = failover_load(work / f"load-{snapshots}", events, snapshots)
            label = "with a follower snapshot:" if snapshots else "no snapshot (full replay):"
            print(f"  {label:28} {seconds:7.2f} s   replayed {replayed:,} event(s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events instead of 1,000,000")
    parser.add_argument("--events", type=int, default=None,
                        help="committed-offset events for the start-up figures "
                             "(default 1,000,000; 100,000 with --quick)")
    parser.add_argument("--skip-assignment", action="store_true")
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--skip-cluster", action="store_true")
    parser.add_argument("--initial-delay-ms", type=int, default=None,
                        help="run the broker with this group.initial.rebalance.delay.ms")
    args = parser.parse_args()
    events = args.events if args.events is not None else 100_000 if args.quick else 1_000_000
    if events < 1:
        parser.error("--events must be at least 1")
    if not args.skip_assignment:
        bench_assignment(args.initial_delay_ms)
    if not args.skip_startup:
        bench_startup(events)
    if not args.skip_cluster:
        bench_cluster(events)


if __name__ == "__main__":
    main()
