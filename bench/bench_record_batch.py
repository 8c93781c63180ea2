"""Magic 2 -> magic 1 conversion on the produce path, C accelerator vs pure Python.

    python3 bench/bench_record_batch.py                    # 1,000 and 8,000 records a batch
    python3 bench/bench_record_batch.py --records 5000 --repeat 20

One produce request's set as librdkafka sends it since Produce v3: ONE magic 2 batch of
``--records`` 100-byte values (null keys, CreateTime timestamps a few ms apart; librdkafka
fills a batch up to message.max.bytes, 1,000,000 by default: some 8,900 such records), uncompressed
and lz4. Printed per codec and implementation, best of ``--repeat`` runs (the machine may be
shared: the best run is the least disturbed one), in records/s and µs per record:

* ``loop``: the per-record loop alone (records section -> magic 1 messages), on the already
  decompressed section;
* ``conversion``: ``record_batch.magic_1_conversion`` (CRC-32C, decompression, the loop);
* ``validate``: ``records.validate_and_assign`` end to end (conversion, recompression of a
  compressed batch into one magic 1 wrapper, offset assignment), what a Produce costs the
  broker's CPU before the log append.
"""

from __future__ import annotations

import argparse
import time

from kafka.record.default_records import DefaultRecordBatchBuilder

from minikafka.protocol import record_batch, records
from minikafka.protocol.compression import Codec

NOW = 1_700_000_000_000
SIZE = 100


def build(count: int, codec: Codec) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for index in range(count):
        # Distinct, partly compressible values, as bench_broker's make_values.
        value = (b"%08d" % index + b"minikafka-bench-" * 8)[:SIZE]
        assert builder.append(index, timestamp=NOW + index // 50, key=None, value=value, headers=[]) is not None
    return bytes(builder.build())


def best_seconds(function, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, action="append", help="records per batch (repeatable)")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    config = records.ValidationConfig(magic=1)
    if records._native is None:
        print("the C accelerator is not built: Python figures only")
    print(f"CRC-32C in C by the SSE4.2 instruction: {bool(getattr(records._native, 'CRC32C_HARDWARE', 0))}")
    print(f"{'records':>8} {'codec':5} {'stage':10} {'impl':6} {'records/s':>12} {'µs/record':>10}")
    before = records.native_in_use()
    try:
        for count in args.records or [1000, 8000]:
            for codec in (Codec.NONE, Codec.LZ4):
                data = build(count, codec)
                [batch] = record_batch.iter_batches(data)
                section = record_batch._records_section(data, batch)
                loop_args = (section, batch.record_count, batch.codec, batch.timestamp_type, batch.base_timestamp,
                             batch.max_timestamp)
                stages = {
                    "loop": lambda: record_batch._magic_1_messages(*loop_args),
                    "conversion": lambda: list(record_batch.magic_1_conversion(data, config.max_message_bytes)),
                    "validate": lambda: records.validate_and_assign(data, 0, NOW, config),
                }
                for stage, function in stages.items():
                    for implementation in ("C", "Python"):
                        if not records.use_native(implementation == "C") and implementation == "C":
                            continue
                        seconds = best_seconds(function, args.repeat)
                        print(f"{count:8} {codec.name.lower():5} {stage:10} {implementation:6} "
                              f"{count / seconds:12,.0f} {seconds / count * 1e6:10.3f}")
    finally:
        records.use_native(before)


if __name__ == "__main__":
    main()
