"""bench/nemesis.py: its checker catches each kind of violation in a history made by hand, the
seed alone draws the schedule, and a short seeded run against a real cluster finds nothing.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "nemesis.py"


@pytest.fixture(scope="module")
def nemesis():
    spec = importlib.util.spec_from_file_location("nemesis", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["nemesis"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def clean_history(nemesis):
    """Two partitions; a value acked twice apart (a producer retry), a few reads."""
    h = nemesis.History()
    log0 = {0: b"a", 1: b"b", 2: b"c", 3: b"b"}
    log1 = {0: b"x", 1: b"y"}
    h.sent = {v: "t" for v in (b"a", b"b", b"c", b"x", b"y", b"never-acked")}
    h.acked = [(b"a", "t", 0, 0), (b"b", "t", 0, 3), (b"c", "t", 0, 2), (b"x", "t", 1, 0), (b"y", "t", 1, 1)]
    h.reads = [("t", 0, 0, b"a"), ("t", 0, 1, b"b"), ("t", 1, 1, b"y")]
    h.final = {("t", 0): log0, ("t", 1): log1}
    h.high_watermarks = {("t", 0): 4, ("t", 1): 2}
    h.replicas = {("t", 0): {1: b"same", 2: b"same", 3: b"same"}, ("t", 1): {1: b"ok", 2: b"ok", 3: b"ok"}}
    h.recovery_s = 1.5
    return h


def test_a_clean_history_passes_and_counts_duplicates(nemesis):
    verdict = nemesis.check(clean_history(nemesis))
    assert verdict.violations == []
    assert verdict.figures["duplicates (producer retries)"] == 1
    assert verdict.figures["lost acknowledged"] == 0
    assert verdict.figures["recovery after the last heal (s)"] == 1.5


def test_an_acknowledged_value_removed_from_the_log_is_lost(nemesis):
    history = clean_history(nemesis)
    del history.final[("t", 0)][2]
    verdict = nemesis.check(history)
    assert verdict.figures["lost acknowledged"] == 1
    assert verdict.violations == ["acknowledged b'c' at t-0@2 is lost"]


@pytest.mark.parametrize("spoil, expected", [
    (lambda h: h.final[("t", 1)].update({0: b"y", 1: b"x"}), "acknowledged at another offset"),
    (lambda h: h.reads.append(("t", 1, 0, b"ghost")), "phantom reads"),
    (lambda h: h.final[("t", 0)].update({4: b"ghost"}), "phantom reads"),
    (lambda h: h.replicas[("t", 1)].update({3: b"oj"}), "diverged replicas"),
    (lambda h: h.stale_acks.append((b"late", "t", 0, 4)), "acks by a demoted leader"),
    (lambda h: h.leaderless.append("t-0 still led by dead broker 2"), "leaderless after a leader died"),
])
def test_each_kind_of_violation_is_caught(nemesis, spoil, expected):
    history = clean_history(nemesis)
    spoil(history)
    verdict = nemesis.check(history)
    assert verdict.violations
    assert verdict.figures[expected] >= 1


def test_two_values_at_one_offset_are_violations_not_duplicates(nemesis):
    history = clean_history(nemesis)
    history.reads.append(("t", 0, 2, b"a"))  # a read that the log no longer holds there
    history.acked.append((b"x", "t", 0, 0))  # two acks for one offset
    violations = nemesis.check(history).violations
    assert "read b'a' at t-0@2, the log now holds b'c' there" in violations
    assert any(v.startswith("two values acknowledged at t-0@0") for v in violations)


def test_the_seed_alone_draws_the_schedule(nemesis):
    assert nemesis.schedule(7, 600) == nemesis.schedule(7, 600)
    assert nemesis.schedule(7, 600) != nemesis.schedule(8, 600)
    steps = nemesis.schedule(7, 600)
    assert {s.fault for s in steps} == {"kill", "stop", "pause", "partition", "move_leader", *nemesis.COMPOUND}
    assert all(s.at_s + s.duration_s <= 600 for s in steps)


@pytest.mark.timeout(400)
def test_a_seeded_nemesis_run_finds_no_violation(minikafka_zookeeper, tmp_path):
    # About a minute of faults, the length CI can afford; README says how to run it longer.
    run = subprocess.run([sys.executable, str(BENCH), "--minutes", "0.85", "--seed", "20261124",
                          "--work-dir", str(tmp_path / "cluster"),
                          "--zookeeper", minikafka_zookeeper.connect_string],
                         capture_output=True, text=True, timeout=380)
    print(run.stdout)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]
    assert "no violations (seed 20261124)" in run.stdout
    assert "lost acknowledged: 0" in run.stdout
    assert "nemesis:" in run.stdout and "everything healed" in run.stdout
