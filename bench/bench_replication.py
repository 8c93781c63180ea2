"""Replication on a 3-broker cluster (one ZooKeeper, three minikafka processes), one run:

* confluent-kafka produce msg/s and MB/s, acks=all on an RF 3 topic next to acks=1 on RF 1
  (goal: acks=all RF 3 >= 50% of acks=1 RF 1);
* produce latency p50/p99 with acks=all (one message, flushed, one at a time);
* failover: leader ``kill -9`` -> the first acknowledged produce on the new leader (goal:
  < 2 x zookeeper.session.timeout.ms), and the same after a controlled shutdown (goal: < 1 s);
* a wiped follower catching up 100 MB (goal: >= 100 MB/s).

Two cores are shared by three brokers, ZooKeeper and the client, so a throughput figure is
as much "CPU per message over every process" as it is speed: each produce run prints the CPU
seconds each process spent on it (from /proc), and microseconds of CPU per message, which
varies less than msg/s on a shared machine. The replica fetch settings used are printed
first (Kafka's defaults unless given with ``--override``).

    python3 bench/bench_replication.py [--messages N] [--catch-up-mb M] [--override key=value ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from minikafka.broker.config import CONFIG_KEYS_BY_NAME
from minikafka.testing import MinikafkaCluster

SESSION_TIMEOUT_MS = 4000
REPLICA_FETCH_KEYS = ("replica.fetch.wait.max.ms", "replica.fetch.min.bytes", "replica.fetch.max.bytes",
                      "replica.fetch.response.max.bytes", "replica.lag.time.max.ms")
_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


class CpuMeter:
    """CPU seconds spent by each broker, ZooKeeper and this client process over a ``with`` block."""

    def __init__(self, cluster: MinikafkaCluster) -> None:
        self.pids = {f"broker {i}": b.process.pid for i, b in enumerate(cluster.brokers, 1) if b.running}
        zookeeper = getattr(cluster, "_own_zookeeper", None)
        if zookeeper is not None and zookeeper.process is not None:
            self.pids["zookeeper"] = zookeeper.process.pid
        self.seconds: dict[str, float] = {}

    def _sample(self) -> dict[str, float]:
        times = os.times()
        return {**{name: process_cpu(pid) for name, pid in self.pids.items()}, "client": times.user + times.system}

    def __enter__(self) -> "CpuMeter":
        self._start = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        end = self._sample()
        self.seconds = {name: end[name] - self._start[name] for name in end}

    def summary(self, messages: int) -> str:
        total = sum(self.seconds.values())
        parts = "  ".join(f"{name} {sec:.2f}" for name, sec in self.seconds.items())
        return f"CPU s: {parts}  total {total:.2f} = {total / messages * 1e6:.1f} us/msg"


def create(cluster: MinikafkaCluster, name: str, rf: int, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(30)
    cluster.wait_until(lambda m: any(t.name == name and all(p.leader_id >= 0 and len(p.isr_nodes) == rf
                                                             for p in t.partitions) for t in m.topics),
                       f"{name} led", 60)


def produce_rate(bootstrap: str, topic: str, acks: str, count: int, size: int) -> tuple[float, float]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10000})
    value = b"x" * size
    delivered = 0

    def on_delivery(err, _msg):
        nonlocal delivered
        if err is None:
            delivered += 1

    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    seconds = time.perf_counter() - start
    assert delivered == count, f"{delivered} of {count} delivered"
    return count / seconds, count * size / seconds / 1e6


def latencies(bootstrap: str, topic: str, count: int) -> list[float]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    out = []
    for _ in range(count):
        start = time.perf_counter()
        producer.produce(topic, b"y" * 100)
        producer.flush(30)
        out.append((time.perf_counter() - start) * 1000)
    return out


def time_to_first_ack(bootstrap: str, topic: str, fault) -> float:
    """From the fault to the first produce acknowledged with acks=all."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": 60000, "retry.backoff.ms": 20,
                         "topic.metadata.refresh.interval.ms": 100})
    producer.produce(topic, b"before")
    producer.flush(30)
    acked = []
    start = time.perf_counter()
    fault()
    while not acked:
        producer.produce(topic, b"after", on_delivery=lambda err, msg: err is None and acked.append(time.perf_counter()))
        producer.flush(60)
    return acked[0] - start


def log_bytes(partition_dir: Path) -> int:
    """Bytes of message sets a replica holds (its segment files)."""
    return sum(p.stat().st_size for p in partition_dir.glob("*.log")) if partition_dir.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--catch-up-mb", type=int, default=100)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for every broker (e.g. replica.fetch.max.bytes=4194304)")
    args = parser.parse_args()
    overrides = {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
    overrides.update(item.split("=", 1) for item in args.override)
    print("replica fetch settings: " + ", ".join(
        f"{key}={overrides.get(key, CONFIG_KEYS_BY_NAME[key].default)}" for key in REPLICA_FETCH_KEYS))
    work = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    try:
        # links=False: brokers connect directly, so no proxy in the test process carries replication.
        with MinikafkaCluster(work, 3, overrides, links=False) as cluster:
            create(cluster, "rf1", 1)
            create(cluster, "rf3", 3)
            rows = []
            for topic, acks in (("rf1", "1"), ("rf3", "all"), ("rf1", "1"), ("rf3", "all")):
                with CpuMeter(cluster) as cpu:
                    rate, mbs = produce_rate(cluster.bootstrap, topic, acks, args.messages, args.size)
                rows.append((topic, acks, rate, mbs, cpu))
            best = {}
            for topic, acks, rate, mbs, cpu in rows:
                best[(topic, acks)] = max(best.get((topic, acks), (0, 0, None)), (rate, mbs, cpu),
                                          key=lambda row: row[0])
            one, all_ = best[("rf1", "1")], best[("rf3", "all")]
            print(f"produce {args.messages} x {args.size} B, confluent-kafka (best of 2):")
            print(f"  acks=1   RF 1: {one[0]:10,.0f} msg/s  {one[1]:6.1f} MB/s")
            print(f"      {one[2].summary(args.messages)}")
            print(f"  acks=all RF 3: {all_[0]:10,.0f} msg/s  {all_[1]:6.1f} MB/s  "
                  f"({all_[0] / one[0]:.0%} of acks=1 RF 1; goal >= 50%)")
            print(f"      {all_[2].summary(args.messages)}")
            lat = sorted(latencies(cluster.bootstrap, "rf3", 500))
            print(f"acks=all latency, one message: p50 {statistics.median(lat):.2f} ms, "
                  f"p99 {lat[int(len(lat) * 0.99) - 1]:.2f} ms")

            create(cluster, "failover", 3)
            leader = cluster.broker(cluster.leader("failover", 0))
            others = ",".join(b.bootstrap for b in cluster.brokers if b is not leader)
            seconds = time_to_first_ack(others, "failover", leader.kill)
            print(f"failover after kill -9 of the leader: {seconds * 1000:.0f} ms to the first acknowledged "
                  f"produce (goal < {2 * SESSION_TIMEOUT_MS} ms = 2 x zookeeper.session.timeout.ms)")
            leader.start()
            cluster.wait_until(lambda m: any(t.name == "failover" and len(t.partitions[0].isr_nodes) == 3
                                             for t in m.topics), "failover ISR back to 3", 60)
            leader = cluster.broker(cluster.leader("failover", 0))
            others = ",".join(b.bootstrap for b in cluster.brokers if b is not leader)
            seconds = time_to_first_ack(others, "failover", leader.stop)
            print(f"failover after a controlled shutdown of the leader: {seconds * 1000:.0f} ms (goal < 1000 ms)")
            leader.start()

            create(cluster, "catch-up", 3)
            produce_rate(cluster.bootstrap, "catch-up", "all", args.catch_up_mb * 1000, 1000)
            follower = next(b for i, b in enumerate(cluster.brokers, 1) if i != cluster.leader("catch-up", 0))
            follower.stop()
            shutil.rmtree(follower.log_dir / "catch-up-0")
            leader_dir = cluster.broker(cluster.leader("catch-up", 0)).log_dir / "catch-up-0"
            target = log_bytes(leader_dir)
            follower.start()  # returns once the broker is serving: the catch-up starts here
            with CpuMeter(cluster) as cpu:
                start = time.perf_counter()
                while log_bytes(follower.log_dir / "catch-up-0") < target:
                    time.sleep(0.01)
                copied = time.perf_counter() - start
            cluster.wait_until(lambda m: any(t.name == "catch-up" and len(t.partitions[0].isr_nodes) == 3
                                             for t in m.topics), "the wiped follower back in the ISR", 300)
            in_isr = time.perf_counter() - start
            print(f"wiped follower copied {target / 1e6:.0f} MB in {copied:.2f} s: {target / 1e6 / copied:.0f} MB/s "
                  f"(goal >= 100 MB/s); back in the ISR after {in_isr:.2f} s")
            print("      " + "  ".join(f"{name} {sec:.2f}" for name, sec in cpu.seconds.items()) + " CPU s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
