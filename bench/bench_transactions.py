"""Transactional produce against idempotent produce on one ``minikafka serve`` process (issue 26).

    python3 bench/bench_transactions.py                          # 30 transactions of 1,000 x 100 B
    python3 bench/bench_transactions.py --transactions 100 --records 1000 --size 100

confluent-kafka produces the same records twice in one run, interleaved round by round so the
machine's load falls on both alike: ``--records`` per round with ``enable.idempotence`` and a
flush (the baseline), and ``--records`` per round as one transaction (begin, produce, commit).
It prints both throughputs, their ratio (the issue's goal: transactional >= 70% of
idempotent), the commit latency (``commit_transaction``: flush, EndTxn) p50 / p99, and per
round the broker's CPU and the client's (this process: confluent-kafka's threads included), so
what the broker adds to a transaction shows apart from the client and from the machine's load
(the markers, written after EndTxn is answered, can fall in the next round's count).
Each producer's first round is a warm-up and is not counted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from minikafka.testing import MinikafkaBroker  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_broker import cpu_seconds  # noqa: E402

TOPIC = "bench-txn"


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


def idempotent_round(producer: Producer, payload: bytes, records: int) -> float:
    start = time.perf_counter()
    for _ in range(records):
        producer.produce(TOPIC, payload)
    producer.flush(60)
    return time.perf_counter() - start


def transactional_round(producer: Producer, payload: bytes, records: int) -> tuple[float, float]:
    """(seconds for the whole transaction, seconds of its commit)."""
    start = time.perf_counter()
    producer.begin_transaction()
    for _ in range(records):
        producer.produce(TOPIC, payload)
    committing = time.perf_counter()
    producer.commit_transaction(60)
    end = time.perf_counter()
    return end - start, end - committing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=30)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    payload = b"x" * args.size
    with MinikafkaBroker() as broker:
        broker.create_topic(TOPIC)
        common = {"bootstrap.servers": broker.bootstrap, "linger.ms": 5}
        idempotent = Producer({**common, "enable.idempotence": True})
        transactional = Producer({**common, "transactional.id": "bench"})
        transactional.init_transactions(30)
        idempotent_round(idempotent, payload, args.records)   # warm-ups
        transactional_round(transactional, payload, args.records)
        plain_s: list[float] = []
        txn_s: list[float] = []
        commit_s: list[float] = []
        plain_cpu, txn_cpu = Cpu(broker.process.pid), Cpu(broker.process.pid)
        for _ in range(args.transactions):
            plain_s.append(plain_cpu.measure(idempotent_round, idempotent, payload, args.records))
            total, commit = txn_cpu.measure(transactional_round, transactional, payload, args.records)
            txn_s.append(total)
            commit_s.append(commit)
    records = args.records * args.transactions
    plain_rate = records / sum(plain_s)
    txn_rate = records / sum(txn_s)

    def line(name: str, rate: float, ratio: str, cpu: Cpu) -> str:
        return (f"{name:15s}{rate:10,.0f} records/s  {ratio:24s}CPU per round: broker "
                f"{cpu.broker / args.transactions * 1000:.2f} ms, client {cpu.client / args.transactions * 1000:.2f} ms")

    print(f"{args.transactions} rounds of {args.records} x {args.size} B, confluent-kafka, one broker")
    print(line("idempotent:", plain_rate, "", plain_cpu))
    print(line("transactional:", txn_rate, f"({txn_rate / plain_rate:.0%} of idempotent)", txn_cpu))
    print(f"commit latency: p50 {statistics.median(commit_s) * 1000:.1f} ms, "
          f"p99 {quantile(commit_s, 0.99) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
