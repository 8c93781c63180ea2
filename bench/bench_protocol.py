"""Throughput of the produce-side hot path: ``protocol.records.validate_and_assign``.

Run from the repository root::

    python3 bench/bench_protocol.py [--seconds 1.0]

For a 1 MiB magic 1 message set of 100-byte and of 1 KiB values (null keys), uncompressed
and lz4 (one wrapper holding the whole set, as a batching producer sends it), this prints
records/s and MB/s (of the set as received, and for lz4 also of the uncompressed inner set)
under CreateTime and LogAppendTime, next to a plain ``zlib.crc32`` pass over the same bytes
measured in the same run (over the set as received, and over the uncompressed messages):
validation has to CRC every message, so that pass is the floor any implementation pays.
Figures are best-of-repeats, MB = 10**6 bytes; "raw" is the uncompressed message bytes.

The "magic 2" rows time the same call on a 1 MiB magic 2 RecordBatch (built by kafka-python's
DefaultRecordBatchBuilder, as aiokafka sends them), which is converted to magic 1 first
(protocol.record_batch); "raw" there is the uncompressed magic 1 set it becomes, and the
crc32 columns stay those of the magic 1 set of the same records.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import zlib


from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from minikafka.protocol.compression import Codec  # noqa: E402
from minikafka.protocol.records import (  # noqa: E402
    CREATE_TIME,
    LOG_APPEND_TIME,
    ValidationConfig,
    build_message_set,
    iter_entries,
    validate_and_assign,
)

SET_BYTES = 1 << 20


_WORDS = [b"alpha", b"bravo", b"click", b"delta", b"event", b"fox", b"golf", b"hotel", b"india",
          b"juliet", b"kilo", b"lima", b"mike", b"november", b"oscar", b"papa", b"quebec"]


def _values(value_size: int, rng: random.Random):
    """Text values that lz4 shrinks about 2-3x, like typical JSON payloads."""
    while True:
        parts = [b'{"user": %08d, "score": %06d, "tags": "' % (rng.randrange(10**8), rng.randrange(10**6))]
        size = len(parts[0])
        while size < value_size:
            word = rng.choice(_WORDS) + b"%d " % rng.randrange(1000)
            parts.append(word)
            size += len(word)
        yield b"".join(parts)[: value_size - 2] + b'"}'


def _message_set(value_size: int, codec: Codec, now_ms: int) -> tuple[bytes, int]:
    rng = random.Random(value_size)
    values = _values(value_size, rng)
    per_message = 12 + 22 + value_size  # log overhead + magic 1 message with a null key
    count = SET_BYTES // per_message
    records = [(None, next(values), now_ms - count + index) for index in range(count)]
    return build_message_set(records, magic=1, codec=codec), count


def _record_batch(value_size: int, codec: Codec, now_ms: int) -> tuple[bytes, int]:
    """A 1 MiB magic 2 batch of the records ``_message_set`` holds (same values, timestamps)."""
    rng = random.Random(value_size)
    values = _values(value_size, rng)
    count = SET_BYTES // (12 + 22 + value_size)
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=4 * SET_BYTES,
    )
    for index in range(count):
        builder.append(index, timestamp=now_ms - count + index, key=None, value=next(values), headers=[])
    return bytes(builder.build()), count


def _best_seconds(function, seconds: float) -> float:
    best = float("inf")
    deadline = time.perf_counter() + seconds
    runs = 0
    while runs < 3 or time.perf_counter() < deadline:
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
        runs += 1
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time spent per figure")
    args = parser.parse_args()
    now_ms = int(time.time() * 1000)
    from minikafka.protocol import records

    loops = "C accelerator" if records.native_in_use() else "pure-Python loops (MINIKAFKA_PURE_PYTHON=1 or not built)"
    print(f"python {sys.version.split()[0]}, 1 MiB magic 1 sets, best of repeats over {args.seconds}s, {loops}")
    header = (
        f"{'case':34} {'records/s':>12} {'MB/s set':>10} {'MB/s raw':>10} "
        f"{'crc32 set':>10} {'crc32 raw':>10}"
    )
    print(header)
    print("-" * len(header))
    for value_size in (100, 1024):
        for codec in (Codec.NONE, Codec.LZ4):
            data, count = _message_set(value_size, codec, now_ms)
            raw = _message_set(value_size, Codec.NONE, now_ms)[0]
            crc_seconds = _best_seconds(lambda: zlib.crc32(data), args.seconds)
            crc_raw_seconds = _best_seconds(lambda: zlib.crc32(raw), args.seconds)
            for timestamp_type, type_name in ((CREATE_TIME, "CreateTime"), (LOG_APPEND_TIME, "LogAppendTime")):
                config = ValidationConfig(magic=1, max_message_bytes=2 * SET_BYTES, timestamp_type=timestamp_type)
                seconds = _best_seconds(lambda: validate_and_assign(data, 1000, now_ms, config), args.seconds)
                case = f"{value_size} B values, {codec.name.lower()}, {type_name}"
                print(
                    f"{case:34} {count / seconds:12,.0f} {len(data) / seconds / 1e6:10.1f} "
                    f"{len(raw) / seconds / 1e6:10.1f} {len(data) / crc_seconds / 1e6:10.1f} "
                    f"{len(raw) / crc_raw_seconds / 1e6:10.1f}"
                )
            assert sum(1 for _ in iter_entries(data)) == (count if codec == Codec.NONE else 1)
            batch, batch_count = _record_batch(value_size, codec, now_ms)
            config = ValidationConfig(magic=1, max_message_bytes=2 * SET_BYTES)
            seconds = _best_seconds(lambda: validate_and_assign(batch, 1000, now_ms, config), args.seconds)
            assert validate_and_assign(batch, 1000, now_ms, config).buffer == validate_and_assign(data, 1000, now_ms, config).buffer
            case = f"magic 2: {value_size} B, {codec.name.lower()}, CreateTime"
            print(
                f"{case:34} {batch_count / seconds:12,.0f} {len(batch) / seconds / 1e6:10.1f} "
                f"{len(raw) / seconds / 1e6:10.1f} {len(data) / crc_seconds / 1e6:10.1f} "
                f"{len(raw) / crc_raw_seconds / 1e6:10.1f}"
            )


if __name__ == "__main__":
    main()
