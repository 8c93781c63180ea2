"""kafka-python's produce: magic 1 stored as sent vs up-converted to record batches.

    python3 bench/bench_kafka_python_produce.py                 # 100,000 x 100 B, 3 rounds
    python3 bench/bench_kafka_python_produce.py --count 50000 --rounds 5

Issue 25 asks that kafka-python producing magic 1 (pinned to ``api_version=(0, 10, 2)``, as
before the log stored record batches) lose no more than 10% when its sets are up-converted to
magic 2 on a topic of the default format. Per round a fresh ``minikafka serve --ephemeral``
takes, for each codec (none, lz4) and each case in turn (rotated between rounds), ``--count``
values from kafka-python's default producer settings into a new single-partition topic:

* ``magic 1 topic``: ``message.format.version=0.10.2``, the client pinned to 0.10.2: the sets
  are stored as sent (the path every kafka-python produce took before record batches);
* ``v2 topic, up-converted``: the default format, the client pinned to 0.10.2;
* ``v2 topic, kafka-python 3``: the default format and client settings (record batches,
  idempotent), for reference.

Printed per codec and case, medians over the rounds (min..max next to msg/s: the machine may
be shared): msg/s, and the broker process's CPU per message (/proc/<pid>/stat), which a busy
machine moves less than throughput.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_broker  # noqa: E402
from bench_broker import cpu_seconds, kafka_python_produce, make_values  # noqa: E402
from bench_produce_cpu import start  # noqa: E402

from minikafka.protocol.apis import ApiKey  # noqa: E402
from minikafka.testing.clients import create_topics_body, kafka_request  # noqa: E402

CASES = (
    ("magic 1 topic", {"message_format_version": "0.10.2"}, {"api_version": (0, 10, 2)}),
    ("v2 topic, up-converted", {}, {"api_version": (0, 10, 2)}),
    ("v2 topic, kafka-python 3", {}, {}),
)
CODECS = ("none", "lz4")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    values = make_values(args.count, 100)
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for round_ in range(args.rounds):
        process, bootstrap = start(sys.executable, dict(os.environ))
        try:
            for codec in CODECS:
                for name, topic_configs, client in CASES[round_ % len(CASES):] + CASES[:round_ % len(CASES)]:
                    topic = f"kafka-python-{uuid.uuid4().hex[:8]}"
                    kafka_request(bootstrap, ApiKey.CREATE_TOPICS, 0, create_topics_body(topic, 1, 1, 10, topic_configs))
                    bench_broker.SETTINGS[bootstrap] = {"kafka-python": client}
                    before = cpu_seconds(process.pid)
                    seconds = kafka_python_produce(bootstrap, topic, values, codec)
                    cpu = cpu_seconds(process.pid) - before
                    figures.setdefault((codec, name), []).append((args.count / seconds, cpu / args.count * 1e6))
        finally:
            process.terminate()
            process.wait()
    print(f"{args.count:,} x 100 B values, kafka-python producer defaults; medians of {args.rounds} round(s)")
    for codec in CODECS:
        for name, _, _ in CASES:
            rates, cpus = (sorted(column) for column in zip(*figures[codec, name]))
            print(f"  {codec:5} {name:26} {statistics.median(rates):9,.0f} msg/s ({rates[0]:,.0f}..{rates[-1]:,.0f})"
                  f"  broker CPU {statistics.median(cpus):.2f} µs/msg")


if __name__ == "__main__":
    main()
