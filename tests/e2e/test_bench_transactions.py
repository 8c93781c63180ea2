"""bench/bench_transactions.py runs end to end with minikafka alone (Tansu is not downloaded): a
real ``minikafka serve`` process, confluent-kafka's idempotent and transactional producers, and
every figure printed. No figure is checked against a speed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_transactions.py"


def test_a_short_run_with_minikafka_alone_prints_both_rates_and_the_ratio(tmp_path):
    result = subprocess.run(
        [sys.executable, str(BENCH), "--transactions", "2", "--only", "minikafka", "--cache-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^  idempotent: +[\d,]+ records/s", result.stdout, re.M), result.stdout
    assert re.search(r"^  transactional: +[\d,]+ records/s +\(\d+% of idempotent\)", result.stdout, re.M), result.stdout
    assert re.search(r"^  commit latency: p50 [\d.]+ ms, p99 [\d.]+ ms$", result.stdout, re.M), result.stdout
    assert re.search(r"^transactional / idempotent: minikafka \d+%$", result.stdout, re.M), result.stdout
    assert "Tansu" not in result.stdout and not any(tmp_path.iterdir())


def test_an_unknown_broker_is_refused_by_name(tmp_path):
    result = subprocess.run([sys.executable, str(BENCH), "--only", "minikafka,kafka", "--cache-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "unknown broker(s) kafka" in result.stderr
