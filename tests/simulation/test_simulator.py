"""The deterministic cluster simulator as CI runs it: through its command line, as the replay
line a failing seed prints does, so that what fails here replays exactly on a laptop."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

# CI's budget: these seeds, at the default fault duration (about 3 s of CPU each; the consumer-group
# workload adds about a fifth). On the code before issue 23's fixes, and before that workload drew
# from the seeds too, they found defect 5 from seed 0, 1 from seed 2, 3 from seed 4 and 2 from seed 17.
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
    # the consumer groups' rebalances, commits and offset fetches are part of what replays
    groups = re.search(r"^groups: .*?(\d+) commits acknowledged.*?(\d+) generations synced.*?(\d+) offset fetches",
                       first.stdout, re.MULTILINE)
    assert groups and all(int(count) > 0 for count in groups.groups()), first.stdout


@pytest.mark.xfail(reason="issue 23's defects 1, 2, 3, 5 and the controlled shutdown's .id slip are "
                          "fixed; two findings remain in seeds 0-19 (with the consumer-group workload): a "
                          "restarted follower of a magic 0/1 log truncating below its high watermark (its "
                          "batches carry no epochs: seeds 9, 15, 16, __consumer_offsets' magic-1 events too; "
                          "needs issue 25's v2 batches), and the controller not resending a "
                          "LeaderAndIsr/UpdateMetadata it failed to deliver, so a restarted broker may "
                          "never be ready (seed 4 does not settle). Drop this mark once both are fixed.",
                   strict=False)
@pytest.mark.timeout(150)  # 20 seeds take ~80 s; a run that never settles must not hold CI longer
def test_ci_seeds_find_no_violation():
    result = simulate("--first", str(CI_FIRST_SEED), "--seeds", str(CI_SEEDS))
    assert result.returncode == 0, result.stdout + result.stderr
