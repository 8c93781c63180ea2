"""Log cleaner benchmark (issue 27): throughput and memory of a pass, and produce latency
beside it.

    python3 bench/bench_cleaner.py [--size-mb 1024] [--live 0.1] [--value-bytes 1000] [--dir PATH]
                                   [--message-format 0.10.2]

1. Writes one compacted partition of ``--size-mb`` MB (uncompressed 1 MiB sets of keyed
   records of ``--value-bytes`` values, 128 MiB segments; stored as one magic 2 batch each, or
   as magic 1 messages with ``--message-format 0.10.2``) whose keys are drawn at random from
   ``--live`` x the record count, so about that share of the records is the latest of its
   key. Then one cleaner pass (``storage.cleaner.Cleaner``, Kafka's default 128 MiB dedupe
   buffer) over the whole log below its active segment, in a fresh process: dirty MB read a
   second (the worker process's start included), the bytes written, and the peak RSS
   (ru_maxrss) of the worker process that does the pass's work.
2. A real ``minikafka serve`` on a copy of that partition, twice: with the cleaner off, and
   with it on (``log.cleaner.backoff.ms=200``): confluent-kafka produce round trips (one
   100-byte message, acks=1, flushed) to another topic, p50 / p99, for as long as the pass
   runs (until the broker writes its ``cleaner-offset-checkpoint``; the same count with the
   cleaner off); between each 100 of them, 100 Fetch round trips (v3, raw socket) of that
   topic's first message, p50 / p99 likewise.

Throughput is in MB/s (10**6 bytes a second). The files are in the page cache when read.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import RawConnection  # noqa: E402
from bench_latency import Latency, measure_produce_latency  # noqa: E402

from minikafka.protocol.records import build_message_set  # noqa: E402
from minikafka.storage import FakeClock, LogManager  # noqa: E402
from minikafka.storage.cleaner import CLEANER_OFFSET_CHECKPOINT, Cleaner, CleanerConfig, cleanable_range  # noqa: E402
from minikafka.storage.config import LogConfig  # noqa: E402
from minikafka.testing import MinikafkaBroker  # noqa: E402

MB = 10**6
MIB = 1 << 20
NOW_MS = 1_700_000_000_000
TOPIC = "changelog"


def write_log(log_dir: Path, size_mb: int, live: float, value_bytes: int, message_format: str) -> tuple[int, int]:
    """The compacted partition; returns its record count and key count."""
    manager = LogManager([log_dir], LogConfig(), FakeClock(NOW_MS))
    manager.startup()
    [log] = manager.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": str(128 * MIB),
                                            "message.format.version": message_format})
    per_set = max(MIB // (value_bytes + 60), 1)
    record_size = value_bytes + 12 + 22 + 8 + 4 + 4  # log overhead, magic 1 head, key, lengths
    records = size_mb * MB // record_size
    keys = max(int(records * live), 1)
    rng = random.Random(27)
    value = os.urandom(value_bytes)
    written = 0
    while written < records:
        count = min(per_set, records - written)
        log.append_as_leader(build_message_set(
            [(b"%08d" % rng.randrange(keys), value, NOW_MS) for _ in range(count)]))
        written += count
    log.roll()
    log.append_as_leader(build_message_set([(b"end", b"x", NOW_MS)]))
    log.high_watermark = log.log_end_offset
    manager.shutdown()
    return records, keys


def clean_once(log_dir: Path) -> None:
    manager = LogManager([log_dir], LogConfig(), FakeClock(NOW_MS))
    manager.startup()
    log = manager.get_log(TOPIC, 0)
    log.high_watermark = log.log_end_offset
    target = cleanable_range(log, 0, NOW_MS)
    cleaner = Cleaner(CleanerConfig())
    stats = cleaner.clean(log, target.first_dirty, target.first_uncleanable)
    cleaner.abort()
    print(f"pass: {target.dirty_bytes / MB:.0f} MB dirty read in {stats.seconds:.1f} s = "
          f"{target.dirty_bytes / MB / stats.seconds:.1f} MB/s; {stats.bytes_written / MB:.0f} MB written; "
          f"{stats.keys} keys; {stats.entries_kept} of {stats.entries_read} records kept; "
          f"the worker process's peak RSS {stats.worker_peak_rss / MIB:.0f} MiB")
    manager.shutdown()


def fetch_latency(connection: RawConnection, topic: str, rounds: int) -> list[float]:
    """Round trips of a Fetch of ``topic``'s first message (v3, one partition)."""
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        response = connection.call(1, 3, {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 4096,
                                          "topics": [{"topic": topic, "partitions": [
                                              {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 4096}]}]})
        samples.append(time.perf_counter() - start)
        assert response.responses[0].partitions[0].error_code == 0
    return samples


def request_latency(template: Path, work: Path, *, cleaner: bool,
                    rounds: int | None) -> tuple[Latency, Latency, int]:
    """Produce and fetch round trips on another topic while the broker cleans (or not) a copy
    of the log."""
    shutil.copytree(template, work / "data")
    (work / "data" / CLEANER_OFFSET_CHECKPOINT).unlink(missing_ok=True)
    overrides = {"log.cleaner.enable": str(cleaner).lower(), "log.cleaner.backoff.ms": "200"}
    with MinikafkaBroker(work, overrides, start_timeout=300) as broker:
        measure_produce_latency(broker.bootstrap, rounds=1, warmup=200, topic="latency")
        connection = RawConnection(broker.bootstrap)
        checkpoint = broker.log_dir / CLEANER_OFFSET_CHECKPOINT
        produced, fetched = [], []
        while (not checkpoint.exists()) if rounds is None else len(produced) < rounds:
            produced.extend(measure_produce_latency(broker.bootstrap, rounds=100, warmup=0, topic="latency").samples)
            fetched.extend(fetch_latency(connection, "latency", 100))
        connection.close()
    return Latency(produced), Latency(fetched), len(produced)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--live", type=float, default=0.1, help="distinct keys / records")
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--message-format", default="3.0", help="the topic's message.format.version")
    parser.add_argument("--pass-dir", type=Path, help=argparse.SUPPRESS)  # the pass's own process
    args = parser.parse_args()
    if args.pass_dir:
        clean_once(args.pass_dir)
        return
    root = Path(tempfile.mkdtemp(prefix="bench-cleaner-", dir=args.dir))
    try:
        template = root / "template"
        started = time.perf_counter()
        records, keys = write_log(template, args.size_mb, args.live, args.value_bytes, args.message_format)
        print(f"log: {args.size_mb} MB, {records} records of {args.value_bytes}-byte values, {keys} keys "
              f"({args.live:.0%} live), message.format.version {args.message_format}, "
              f"written in {time.perf_counter() - started:.0f} s")
        pass_dir = root / "pass"
        shutil.copytree(template, pass_dir)
        subprocess.run([sys.executable, __file__, "--pass-dir", str(pass_dir)], check=True)
        shutil.rmtree(pass_dir)
        produce_on, fetch_on, count = request_latency(template, root / "on", cleaner=True, rounds=None)
        produce_off, fetch_off, _ = request_latency(template, root / "off", cleaner=False, rounds=count)
        for request, name, latency in (("produce", "cleaner off", produce_off), ("produce", "cleaner running", produce_on),
                                       ("fetch", "cleaner off", fetch_off), ("fetch", "cleaner running", fetch_on)):
            print(f"{request} round trip, {name}: p50 {latency.p50 * 1000:.2f} ms, p99 {latency.p99 * 1000:.2f} ms "
                  f"({len(latency.samples)} round trips)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
