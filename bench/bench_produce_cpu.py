"""Produce hot path: confluent-kafka 100 B messages (none and lz4, acks=1) against brokers
that differ only in how ``protocol.records`` validates, side by side in one run.

    python3 bench/bench_produce_cpu.py                      # C accelerator vs pure Python
    python3 bench/bench_produce_cpu.py --count 300000 --runs 3 \\
        --broker before=/usr/bin/python3                    # plus another checkout's broker

Each run starts every broker fresh (``minikafka serve --ephemeral``), in turn (rotating which
goes first), and for each codec
produces ``--count`` values to a new single-partition topic with confluent-kafka's defaults
(acks=1 at librdkafka 2.x is acks=all on one broker: the same thing), then consumes them back
from offset 0. Printed per broker and codec, medians over the runs: produce msg/s, the broker
process's CPU time (/proc/<pid>/stat utime+stime over the produce run) per message in µs, and
consume msg/s (fetches stay zero-copy: sendfile). The machine may be shared: look at the spread
(min..max) next to each median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_broker import confluent_consume, confluent_produce, cpu_seconds, make_values  # noqa: E402

CODECS = ("none", "lz4")
SIZE = 100


def start(python: str, env: dict) -> tuple[subprocess.Popen, str]:
    code = "import sys; from minikafka.broker.cli import main; sys.exit(main())"
    process = subprocess.Popen([python, "-c", code, "serve", "--port", "0", "--ephemeral"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    while (line := process.stdout.readline()) and not line.startswith("minikafka ready: "):
        pass
    if not line:
        raise SystemExit(f"{python}: minikafka did not start")
    return process, line.split("bootstrap.servers=")[1].split()[0]


def which_path(python: str, env: dict) -> str:
    probe = ("import minikafka.protocol.records as r; "
             "print('C' if getattr(r, 'native_in_use', bool)() else 'Python', r.__file__)")
    return subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env).stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--broker", action="append", default=[], metavar="NAME=PYTHON",
                        help="another broker: the interpreter whose minikafka to run (pure-Python env unset)")
    args = parser.parse_args()

    base_env = {k: v for k, v in os.environ.items() if k != "MINIKAFKA_PURE_PYTHON"}
    brokers = [("C", sys.executable, base_env),
               ("pure Python", sys.executable, {**base_env, "MINIKAFKA_PURE_PYTHON": "1"})]
    for spec in args.broker:
        name, _, python = spec.partition("=")
        brokers.append((name, python, base_env))
    for name, python, env in brokers:
        print(f"{name:12} {python}: records loops in {which_path(python, env)}")

    values = make_values(args.count, SIZE)
    figures: dict[tuple[str, str], dict[str, list[float]]] = {}
    for run in range(args.runs):
        # Each run starts with another broker, so none always goes first on a busy machine.
        for name, python, env in brokers[run % len(brokers):] + brokers[:run % len(brokers)]:
            process, bootstrap = start(python, env)
            try:
                for codec in CODECS:
                    topic = f"produce-{codec}-{uuid.uuid4().hex[:8]}"
                    before = cpu_seconds(process.pid)
                    produce_s = confluent_produce(bootstrap, topic, values, codec)
                    cpu = cpu_seconds(process.pid) - before
                    consume_s = confluent_consume(bootstrap, topic, args.count)
                    row = figures.setdefault((name, codec), {"produce": [], "cpu": [], "consume": []})
                    row["produce"].append(args.count / produce_s)
                    row["cpu"].append(cpu / args.count * 1e6)
                    row["consume"].append(args.count / consume_s)
                    print(f"  run {run + 1} {name:12} {codec:4}: produce {args.count / produce_s:>9.0f} msg/s, "
                          f"broker CPU {cpu / args.count * 1e6:.2f} µs/msg, consume {args.count / consume_s:>9.0f} "
                          f"msg/s", flush=True)
            finally:
                process.terminate()
                process.wait(30)

    def cell(samples: list[float], fmt: str) -> str:
        return f"{statistics.median(samples):{fmt}} ({min(samples):{fmt}}..{max(samples):{fmt}})"

    print(f"\nconfluent-kafka, {args.count} x {SIZE} B, acks=1, medians of {args.runs} runs (min..max)")
    print(f"{'broker':12} {'codec':5} | {'produce msg/s':>25} | {'broker CPU µs/msg':>20} | {'consume msg/s':>25}")
    for (name, codec), row in figures.items():
        print(f"{name:12} {codec:5} | {cell(row['produce'], '.0f'):>25} | {cell(row['cpu'], '.2f'):>20} | "
              f"{cell(row['consume'], '.0f'):>25}")


if __name__ == "__main__":
    main()
