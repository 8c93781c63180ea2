"""bench/bench_crash_loop.py runs end to end for a few kill -9 cycles and finds nothing lost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_crash_loop.py"


def test_a_few_cycles_lose_nothing():
    result = subprocess.run([sys.executable, str(BENCH), "--cycles", "8", "--seed", "3"],
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    total = result.stdout.splitlines()[-1]
    assert total.startswith("total: 8 kill -9 cycles, ") and "acknowledged records lost: 0; topic states wrong: 0" in total
