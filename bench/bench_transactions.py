"""Transactional produce against idempotent produce, on minikafka and on Tansu (issue 26).

    python3 bench/bench_transactions.py                          # 30 transactions of 1,000 x 100 B
    python3 bench/bench_transactions.py --transactions 100 --records 1000 --size 100
    python3 bench/bench_transactions.py --only minikafka         # no Tansu (nothing downloaded)

confluent-kafka produces the same records twice on each broker, ``--records`` per round with
``enable.idempotence`` and a flush (the baseline), and ``--records`` per round as one
transaction (begin, produce, commit). The brokers (a ``minikafka serve`` process and Tansu,
started and installed as bench_peers does) run side by side for the whole run and take turns
round by round, so the machine's load falls on every measurement alike.
For each broker it prints both throughputs, their ratio (the issue's goal: transactional >= 70%
of idempotent), the median round (a flush, or a whole transaction), the commit latency
(``commit_transaction``: flush, EndTxn) p50 / p99, and per round the broker's CPU and the client's (this process: confluent-kafka's threads, those of
the idle producers of the other broker included), so what the broker adds to a transaction
shows apart from the client and from the machine's load (the markers, written after EndTxn is
answered, can fall in the next round's count); then the ratios side by side. Tansu's ratio is
the peer's answer to how much of the gap is the client's round trips rather than the broker.
Each producer's first round is a warm-up and is not counted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException, Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_broker import cpu_seconds  # noqa: E402
from bench_latency import stop  # noqa: E402
from bench_peers import Peer, PeerUnavailable, Running, create_topic, minikafka_peer, start, tansu_peer  # noqa: E402

BROKERS = {"minikafka": minikafka_peer, "tansu": tansu_peer}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Cpu:
    """CPU seconds of the broker process and of this one, summed over the rounds measured."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.broker = 0.0
        self.client = 0.0

    def measure(self, run, *args):
        broker, client = cpu_seconds(self.broker_pid), time.process_time()
        result = run(*args)
        self.broker += cpu_seconds(self.broker_pid) - broker
        self.client += time.process_time() - client
        return result


def idempotent_round(producer: Producer, topic: str, payload: bytes, records: int) -> float:
    began = time.perf_counter()
    for _ in range(records):
        producer.produce(topic, payload)
    producer.flush(60)
    return time.perf_counter() - began


def transactional_round(producer: Producer, topic: str, payload: bytes, records: int) -> tuple[float, float]:
    """(seconds for the whole transaction, seconds of its commit)."""
    began = time.perf_counter()
    producer.begin_transaction()
    for _ in range(records):
        producer.produce(topic, payload)
    committing = time.perf_counter()
    producer.commit_transaction(60)
    end = time.perf_counter()
    return end - began, end - committing


@dataclass
class Side:
    """One broker's producers and what its rounds measured."""

    name: str
    running: Running
    topic: str
    idempotent: Producer
    transactional: Producer
    plain_s: list[float] = field(default_factory=list)
    txn_s: list[float] = field(default_factory=list)
    commit_s: list[float] = field(default_factory=list)
    plain_cpu: Cpu = field(init=False)
    txn_cpu: Cpu = field(init=False)

    def __post_init__(self) -> None:
        self.plain_cpu, self.txn_cpu = Cpu(self.running.process.pid), Cpu(self.running.process.pid)

    @classmethod
    def open(cls, peer: Peer, workdir: Path) -> Side:
        """Start ``peer`` and ready its producers; PeerUnavailable if it will not serve them."""
        running = start(peer, workdir)
        try:
            topic = create_topic(running.bootstrap, 1)
            common = {"bootstrap.servers": running.bootstrap, "linger.ms": 5}
            idempotent = Producer({**common, "enable.idempotence": True})
            transactional = Producer({**common, "transactional.id": "bench"})
            transactional.init_transactions(30)
        except KafkaException as exc:
            stop(running.process)
            raise PeerUnavailable(f"refused the producers: {exc}") from None
        except BaseException:
            stop(running.process)
            raise
        return cls(peer.name, running, topic, idempotent, transactional)

    def warm_up(self, payload: bytes, records: int) -> None:
        idempotent_round(self.idempotent, self.topic, payload, records)
        transactional_round(self.transactional, self.topic, payload, records)

    def measure_round(self, payload: bytes, records: int) -> None:
        self.plain_s.append(self.plain_cpu.measure(idempotent_round, self.idempotent, self.topic, payload, records))
        total, commit = self.txn_cpu.measure(transactional_round, self.transactional, self.topic, payload, records)
        self.txn_s.append(total)
        self.commit_s.append(commit)

    def close(self) -> None:
        for producer in (self.idempotent, self.transactional):  # before the broker: no reconnect noise
            producer.close()
        stop(self.running.process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=30)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--only", default=",".join(BROKERS),
                        help=f"comma-separated brokers to run (default {','.join(BROKERS)})")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "minikafka-bench",
                        help="where Tansu is installed (default ~/.cache/minikafka-bench, as bench_peers)")
    args = parser.parse_args()
    asked = {name.strip().lower() for name in args.only.split(",") if name.strip()}
    if asked - set(BROKERS):
        parser.error(f"unknown broker(s) {', '.join(sorted(asked - set(BROKERS)))}; known: {', '.join(BROKERS)}")
    payload = b"x" * args.size
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="minikafka-bench-transactions-"))
    sides: list[Side] = []
    try:
        for name in (n for n in BROKERS if n in asked):  # minikafka first, as in bench_peers
            try:
                sides.append(Side.open(BROKERS[name](args.cache_dir), workdir))
            except (PeerUnavailable, OSError, subprocess.TimeoutExpired, zipfile.BadZipFile) as exc:
                print(f"skip {name}: {exc}", flush=True)
        for side in sides:
            side.warm_up(payload, args.records)
        for _ in range(args.transactions):
            for side in sides:
                side.measure_round(payload, args.records)
    finally:
        for side in sides:
            side.close()
        shutil.rmtree(workdir, ignore_errors=True)

    records = args.records * args.transactions

    def line(name: str, rate: float, ratio: str, rounds: list[float], cpu: Cpu) -> str:
        return (f"  {name:15s}{rate:10,.0f} records/s  {ratio:24s}round p50 {statistics.median(rounds) * 1000:.2f} ms"
                f"  CPU per round: broker "
                f"{cpu.broker / args.transactions * 1000:.2f} ms, client {cpu.client / args.transactions * 1000:.2f} ms")

    print(f"{args.transactions} rounds of {args.records} x {args.size} B, confluent-kafka "
          f"{__import__('confluent_kafka').version()}, one broker each, rounds interleaved")
    ratios = {}
    for side in sides:
        plain_rate = records / sum(side.plain_s)
        txn_rate = records / sum(side.txn_s)
        ratios[side.name] = txn_rate / plain_rate
        print(f"{side.name}:")
        print(line("idempotent:", plain_rate, "", side.plain_s, side.plain_cpu))
        print(line("transactional:", txn_rate, f"({ratios[side.name]:.0%} of idempotent)", side.txn_s, side.txn_cpu))
        print(f"  commit latency: p50 {statistics.median(side.commit_s) * 1000:.1f} ms, "
              f"p99 {quantile(side.commit_s, 0.99) * 1000:.1f} ms")
    print("transactional / idempotent: " + ", ".join(f"{name} {ratio:.0%}" for name, ratio in ratios.items()))


if __name__ == "__main__":
    main()
