"""Storage benchmark: append throughput and partition start-up time.

    python3 bench/bench_storage.py [--append-mib 256] [--total-mib 1024] [--segments 100] [--dir PATH]

1. Appends of 1 MiB message sets (982 uncompressed magic-1 messages of 1000-byte values) through
   ``Log.append_as_leader`` (validation, offset assignment, write, indexing), next to a plain
   ``write()`` of the same bytes to a file in the same run; the ratio is the figure. The
   protocol layer's ``validate_and_assign`` alone is timed too, to show where time goes.
   Then the same appends with 64 MiB segments: the slowest append that rolls next to the
   other appends, and the time the broker's flush duty (``LogManager.flush_due``, in a worker
   thread) then spends fsyncing the rolled segments, which the append path no longer does.
2. Start-up of one partition holding ``--total-mib`` in ``--segments`` segments, via
   ``LogManager.startup``: after a clean shutdown, after an unclean stop with a recent
   recovery-point checkpoint (Kafka's normal crash case: only the active segment is
   scanned), and after an unclean stop with no recovery point (every segment scanned).
3. On that partition, the cost of ``Log.read`` (slice computation, as for a fetch served by
   sendfile) for a consumer's successive 1 MiB fetches and for random offsets.

Files are in the page cache when measured (just written), so the figures are CPU cost.
Throughput is in MB/s (10**6 bytes a second); sizes (1 MiB sets, segments) are in MiB.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import tempfile
import time
from pathlib import Path


from minikafka.protocol.records import ValidationConfig, build_message_set, validate_and_assign  # noqa: E402
from minikafka.storage import FakeClock, LogConfig, LogManager  # noqa: E402
from minikafka.storage.log_manager import RECOVERY_POINT_CHECKPOINT  # noqa: E402
from minikafka.storage.segment import iter_headers  # noqa: E402

MIB = 1 << 20
MB = 10**6
NOW_MS = 1_700_000_000_000


def mb_per_s(nbytes: float, seconds: float) -> float:
    return nbytes / MB / max(seconds, 1e-9)


def one_mib_set(value_size: int = 1000) -> bytes:
    count = MIB // (value_size + 34 + 12 + 4)  # value + magic-1 overhead + key/value lengths
    return build_message_set([(None, os.urandom(value_size), NOW_MS + i) for i in range(count)])


def _plain_write(directory: Path, data: bytes, rounds: int) -> float:
    path = directory / "plain.bin"
    start = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        for _ in range(rounds):
            f.write(data)
    seconds = time.perf_counter() - start
    path.unlink()
    return seconds


def _log_append(directory: Path, data: bytes, rounds: int) -> float:
    manager = LogManager([directory / "append"], LogConfig(), FakeClock(NOW_MS))
    manager.startup()
    log = manager.create_topic("bench", 1, {})[0]
    start = time.perf_counter()
    for _ in range(rounds):
        log.append_as_leader(data)
    seconds = time.perf_counter() - start
    manager.shutdown()
    shutil.rmtree(directory / "append")
    return seconds


def _validate_only(data: bytes, rounds: int) -> float:
    config = ValidationConfig(magic=1)
    start = time.perf_counter()
    next_offset = 0
    for _ in range(rounds):
        next_offset = validate_and_assign(data, next_offset, NOW_MS, config).last_offset + 1
    return time.perf_counter() - start


def bench_append(directory: Path, total_mib: int, repeats: int = 3) -> None:
    data = one_mib_set()
    rounds = max(1, total_mib * MIB // len(data))
    plain, appended, validated = [], [], []
    for _ in range(repeats):  # interleaved, so page-cache and writeback weather hits both alike
        plain.append(_plain_write(directory, data, rounds))
        appended.append(_log_append(directory, data, rounds))
        validated.append(_validate_only(data, rounds))
    plain_s, log_s, validate_s = min(plain), min(appended), min(validated)
    nbytes = rounds * len(data)
    print(f"append: {rounds} sets of {len(data)} bytes ({len(data) // 1050} messages each), "
          f"{nbytes / MIB:.0f} MiB, best of {repeats}")
    print(f"  plain file write       {mb_per_s(nbytes, plain_s):9.1f} MB/s")
    print(f"  Log.append_as_leader   {mb_per_s(nbytes, log_s):9.1f} MB/s   ratio {log_s / plain_s:.1f}x the plain write's time")
    print(f"  of which validation    {mb_per_s(nbytes, validate_s):9.1f} MB/s   "
          f"({validate_s / log_s:.0%} of append time: protocol.records.validate_and_assign)")
    print(f"  storage alone          {mb_per_s(nbytes, log_s - validate_s):9.1f} MB/s   "
          f"(write + indexes: append time minus validation)")


def bench_rolls(directory: Path, total_mib: int, segment_mib: int = 64) -> None:
    data = one_mib_set()
    rounds = max(1, total_mib * MIB // len(data))
    manager = LogManager([directory / "rolls"], LogConfig(segment_bytes=segment_mib * MIB), FakeClock(NOW_MS))
    manager.startup()
    log = manager.create_topic("bench", 1, {})[0]
    rolling, plain = [], []
    for _ in range(rounds):
        segments = len(log.segments())
        start = time.perf_counter()
        log.append_as_leader(data)
        seconds = time.perf_counter() - start
        (rolling if len(log.segments()) > segments else plain).append(seconds)
    start = time.perf_counter()
    manager.flush_due()
    flush_s = time.perf_counter() - start
    manager.shutdown()
    shutil.rmtree(directory / "rolls")
    plain.sort()
    print(f"rolls: {rounds} appends with {segment_mib} MiB segments, {len(rolling)} of them roll")
    if rolling:
        print(f"  appends that roll        slowest {max(rolling) * 1000:6.1f} ms (no fsync on this path)")
    else:
        print(f"  (no append rolled: --append-mib must exceed the {segment_mib} MiB segment size)")
    print(f"  other appends            median {plain[len(plain) // 2] * 1000:6.1f} ms, slowest {plain[-1] * 1000:6.1f} ms")
    print(f"  flush duty (worker thread) fsyncing the rolled segments afterwards: {flush_s * 1000:.0f} ms")


SETS_PER_SEGMENT = 10
BIG_VALUE = 10_000
BIG_MESSAGE = BIG_VALUE + 42  # 12-byte log overhead + 22-byte magic-1 header + key/value lengths


def partition_segment_bytes(total_mib: int, segments: int) -> tuple[bytes, int]:
    """A set and a segment.bytes such that ``segments`` segments of SETS_PER_SEGMENT sets
    hold about ``total_mib``."""
    count = max(1, round(total_mib * MIB / (segments * SETS_PER_SEGMENT) / BIG_MESSAGE))
    data = build_message_set([(None, os.urandom(BIG_VALUE), NOW_MS + i) for i in range(count)])
    return data, SETS_PER_SEGMENT * len(data)


def build_partition(log_dir: Path, total_mib: int, segments: int) -> LogConfig:
    data, segment_bytes = partition_segment_bytes(total_mib, segments)
    config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1)
    manager = LogManager([log_dir], config, FakeClock(NOW_MS))
    manager.startup()
    log = manager.create_topic("big", 1, {})[0]
    start = time.perf_counter()
    for _ in range(segments * SETS_PER_SEGMENT):
        log.append_as_leader(data)
    print(f"startup: built {log.size_in_bytes / MIB:.0f} MiB in {len(log.segments())} segments "
          f"in {time.perf_counter() - start:.1f} s")
    manager.shutdown()
    return config


def timed_startup(log_dir: Path, config: LogConfig) -> tuple[float, LogManager]:
    gc.collect()
    manager = LogManager([log_dir], config, FakeClock(NOW_MS))
    start = time.perf_counter()
    manager.startup()
    return time.perf_counter() - start, manager


def bench_reads(log_dir: Path, config: LogConfig) -> None:
    """Fetch-path cost of computing slices (the broker then moves the bytes by sendfile):
    a consumer reading the whole log in 1 MiB fetches, and fetches at random offsets."""
    _, manager = timed_startup(log_dir, config)
    log = manager.get_log("big", 0)
    fetch_offsets, offset = [], 0
    while offset < log.log_end_offset:  # where a consumer's successive fetches start
        fetch_offsets.append(offset)
        chunk = log.read(offset, MIB, max_offset=log.log_end_offset)
        heads = iter_headers(chunk.fileno(), chunk.position, chunk.position + chunk.length)
        offset = max(head.offset for head in heads) + 1
    rng = random.Random(1)
    random_offsets = [rng.randrange(log.log_end_offset) for _ in range(len(fetch_offsets))]
    figures = []
    for offsets in (fetch_offsets, random_offsets):
        start = time.perf_counter()
        for offset in offsets:
            log.read(offset, MIB, max_offset=log.log_end_offset)
        figures.append((time.perf_counter() - start) / len(offsets) * 1e6)
    manager.shutdown()
    print(f"  read(offset, 1 MiB, max_offset): {figures[0]:.0f} us per sequential fetch, "
          f"{figures[1]:.0f} us at random offsets ({len(fetch_offsets)} calls each)")


def bench_startup(directory: Path, total_mib: int, segments: int, repeats: int = 3) -> None:
    log_dir = directory / "startup"
    config = build_partition(log_dir, total_mib, segments)
    bench_reads(log_dir, config)

    clean = []
    for _ in range(repeats):
        seconds, manager = timed_startup(log_dir, config)
        clean.append(seconds)
        manager.shutdown()

    unclean = []
    for _ in range(repeats):
        seconds, manager = timed_startup(log_dir, config)
        manager.checkpoint()  # the periodic checkpoint; then the process dies (no shutdown)
        del manager
        seconds, manager = timed_startup(log_dir, config)
        unclean.append(seconds)
        manager.checkpoint()
        del manager

    full = []
    for _ in range(repeats):
        (log_dir / RECOVERY_POINT_CHECKPOINT).unlink()
        seconds, manager = timed_startup(log_dir, config)
        full.append(seconds)
        manager.checkpoint()
        del manager

    print(f"  start-up after clean shutdown            {min(clean) * 1000:8.1f} ms (best of {repeats})")
    print(f"  start-up after unclean stop (checkpoint) {min(unclean) * 1000:8.1f} ms (best of {repeats}; "
          f"scans the active segment)")
    print(f"  start-up after unclean stop (full scan)  {min(full) * 1000:8.1f} ms (best of {repeats}, "
          f"no recovery-point checkpoint: {mb_per_s(total_mib * MIB, min(full)):.0f} MB/s)")
    shutil.rmtree(log_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--append-mib", type=int, default=256)
    parser.add_argument("--total-mib", type=int, default=1024)
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        bench_append(Path(tmp), args.append_mib)
        bench_rolls(Path(tmp), args.append_mib)
        bench_startup(Path(tmp), args.total_mib, args.segments)


if __name__ == "__main__":
    main()
