"""bench/bench_peers.py runs end to end with minikafka alone (no peer is downloaded): it starts
real ``minikafka serve`` processes, drives them with confluent-kafka and prints the table with a
figure in every minikafka row. No figure is checked against a speed."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_peers.py"


def test_quick_run_with_minikafka_alone_prints_every_row(tmp_path):
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--only", "minikafka", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "| metric | minikafka |" in lines
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in lines if line.startswith("| ")}
    for label in ("produce acks=1, none, msg/s", "produce acks=1, lz4, msg/s", "consume from offset 0, msg/s",
                  "spawn -> first message consumed back, ms", "port open -> first message, ms",
                  "produce latency p50 (one message, flush), ms", "produce latency p99 (one message, flush), ms",
                  "socket -> file ceiling, msg/s", "minikafka produce none / ceiling",
                  "client CPU per produced message (the bench's producer process), none, µs",
                  "client CPU per produced message (the bench's producer process), lz4, µs",
                  "produce acks=1, none, 2 producer processes at once, msg/s of all",
                  "consume from offset 0, 2 consumer processes at once, msg/s of all"):
        assert rows[label] not in ("", "—"), (label, result.stdout)
    assert rows["error code for a produce with a wrong CRC (2 CORRUPT_MESSAGE, 0 stored)"] == "2"
    if shutil.which("kcat"):
        (kcat,) = [label for label in rows if label.startswith("one C client (kcat 100,000 messages")]
        for label in (kcat, "one C client (kcat): produce acks=1, lz4, msg/s",
                      "one C client (kcat): consume from offset 0, msg/s", "  kcat's CPU per consumed message, µs"):
            assert rows[label.strip()] not in ("", "—"), (label, result.stdout)
        assert "skip" not in result.stdout
    else:
        assert [line for line in result.stdout.splitlines() if "skip" in line] == [
            "skip the kcat rows: no kcat on PATH"]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_an_unknown_peer_is_refused_by_name(tmp_path):
    result = subprocess.run([sys.executable, str(BENCH), "--only", "minikafka,kafka", "--cache-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "unknown peer(s) kafka" in result.stderr


def test_a_peer_that_exits_at_start_is_reported_with_its_last_words(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH.parent))
    bench_peers = importlib.import_module("bench_peers")
    broken = bench_peers.Peer("broken", [sys.executable, "-c", "print('no Kafka here on port {port}'); exit(3)"])
    with pytest.raises(bench_peers.PeerUnavailable, match=r"exited with status 3 .*no Kafka here on port \d+"):
        bench_peers.start(broken, tmp_path)
