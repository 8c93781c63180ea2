"""The deterministic cluster simulator as CI runs it: through its command line, as the replay
line a failing seed prints does, so that what fails here replays exactly on a laptop."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

# CI's budget: these seeds, at the default fault duration (about 3 s of CPU each). On the code
# before issue 23's fixes they find defect 5 from seed 0, 1 from seed 2, 3 from seed 4 and 2 from
# seed 17.
CI_FIRST_SEED = 0
CI_SEEDS = 20


def simulate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minikafka.replication.simulation", *args],
                          env=dict(os.environ, PYTHONHASHSEED="0"), capture_output=True, text=True, timeout=600)


def digest(output: str) -> str:
    found = re.search(r"^seed \d+: .*digest ([0-9a-f]{16})$", output, re.MULTILINE)
    assert found, output
    return found.group(1)


def test_a_seed_replays_exactly():
    first = simulate("--seed", "7", "--duration", "12")
    second = simulate("--seed", "7", "--duration", "12")
    assert digest(first.stdout) == digest(second.stdout)


@pytest.mark.xfail(reason="issue 23 defects 1, 2, 3 and 5 (fixed on the replfix branch), the "
                          "controlled shutdown's BrokerEndpoint.id slip and the controller dropping a "
                          "LeaderAndIsr it failed to send (seeds 4, 31) are still here: drop this "
                          "mark once those fixes are merged", strict=False)
def test_ci_seeds_find_no_violation():
    result = simulate("--first", str(CI_FIRST_SEED), "--seeds", str(CI_SEEDS))
    assert result.returncode == 0, result.stdout + result.stderr
