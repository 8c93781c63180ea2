"""bench/fetch_shape.py and bench/consume_threads.py run end to end against minikafka alone (no
peer is downloaded): a real ``minikafka serve``, a real confluent-kafka consumer, the relay in
between. What is checked is the answers' shape, which is the broker's behaviour: every record
produced comes back once, in whole batches, each partition's share within the 1 MiB asked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_fetch_shape_reports_whole_batches_within_the_partition_limit(tmp_path):
    result = subprocess.run(
        [sys.executable, str(BENCH / "fetch_shape.py"), "--only", "minikafka", "--count", "30000",
         "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "== minikafka:" in out and "versions {11:" in out, out
    assert "records in whole batches 30,000 (1.00 x" in out, out
    assert "with a partial batch at a partition's end: 0 " in out, out
    largest = int(re.search(r"records bytes per partition answer: .* max ([\d,]+)", out).group(1).replace(",", ""))
    assert largest <= 1 << 20, out


def test_consume_threads_prints_each_thread(tmp_path):
    result = subprocess.run(
        [sys.executable, str(BENCH / "consume_threads.py"), "--only", "minikafka", "--count", "20000",
         "--rounds", "1", "--reads", "1", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "python consume() loop" in result.stdout and "rdk:broker" in result.stdout, result.stdout
