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


# 20 seeds take ~80 s of CPU, 240 s beside another test worker, and over 300 s on a slowed
# host (a clean clone of 2026-11-29); a run that never settles is still stopped, at the
# subprocess's own 600 s.
@pytest.mark.timeout(660)
def test_ci_seeds_find_no_violation():
    result = simulate("--first", str(CI_FIRST_SEED), "--seeds", str(CI_SEEDS))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(120)  # ~5 s of CPU once it settles; before the fix it never did
@pytest.mark.parametrize("seed", [6, 18])
def test_a_broker_restarted_while_the_controller_cannot_reach_it_is_told_once_it_can(seed):
    """Seed 18 restarts broker 3 while the controller's link to it is cut: its first
    UpdateMetadata and LeaderAndIsr fail. Dropped, they left it waiting for metadata (never
    ready, so the run never settled); the controller retries them until the broker takes it.
    Seed 6 restarts a broker as the faults end, with such a cut in place: the cut has to be
    undone then, not only after the restart, which waits for the controller's metadata."""
    result = simulate("--seed", str(seed))
    assert "had not settled" not in result.stdout, result.stdout
    digest(result.stdout)


@pytest.mark.timeout(120)
def test_a_broker_in_controlled_shutdown_is_not_made_to_follow_again():
    """Seed 0 stops broker 2, a follower of every partition, while the controller's requests
    to it are delivered in the background: made to follow again by the controller's LeaderAndIsr
    that took it out of an ISR it had rejoined, it fetched, rejoined, and so on until it exited."""
    result = simulate("--seed", "0")
    assert "its controlled shutdown answered" not in result.stdout, result.stdout
    digest(result.stdout)


@pytest.mark.timeout(120)
def test_a_leader_in_controlled_shutdown_is_demoted_before_its_successor_leads():
    """With ``--slow-demotion`` the controller's requests to a broker in controlled shutdown
    arrive late, as to a loaded process. Sent the new leaders' LeaderAndIsr at the same time
    as the old leader's (Kafka 0.10.2's order), seeds 0 and 1 saw the old leader acknowledge
    acks=1 writes after its successor had taken up the leadership (the nemesis run's
    ``stale_producer`` finding): writes its log would truncate when it followed."""
    result = simulate("--first", "0", "--seeds", "2", "--slow-demotion")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "took up epoch" not in result.stdout


@pytest.mark.timeout(120)
def test_a_controller_that_loses_zookeeper_gives_up_control_and_the_broker_runs_on():
    """Seed 28 cuts the controller off from ZooKeeper during a controlled shutdown: the
    ZooKeeperError must reach the broker's handler, which gives up /controller, not come out
    of the controller's nursery as an ExceptionGroup that brought the whole broker down."""
    result = simulate("--seed", "28")
    assert "Traceback" not in result.stderr, result.stderr
    digest(result.stdout)


@pytest.mark.timeout(180)
def test_a_broker_that_registers_again_as_its_old_session_ends_is_seen_to_bounce():
    """Seed 100 (with transactions) restarts broker 3 after a power loss; it registers again
    1 ms after its old session ends, before the controller's children watch re-reads
    /brokers/ids. Reported as no change, the controller never saw it leave or join: it stayed
    leader in ZooKeeper of partitions its emptied log no longer had, and the restart never
    got its metadata (so no fault ran after it)."""
    result = simulate("--seed", "100", "--duration", "20", "--transactions")
    assert result.returncode == 0, result.stdout + result.stderr
    digest(result.stdout)


@pytest.mark.timeout(300)
def test_the_transactional_workload_finds_no_violation_and_replays():
    """Issue 26's workload (``--transactions``): transactions committed and aborted through
    the brokers' transaction coordinator amid the faults, some EndTxns abandoned mid-request,
    read with READ_COMMITTED; a seed replays exactly with it too. Before the coordinator ran a
    request's state change in its own task, this seed's first abandoned EndTxn left the id
    answered CONCURRENT_TRANSACTIONS to the end of the run (as CI's exactly-once test saw)."""
    first = simulate("--seed", "2", "--duration", "12", "--transactions")
    assert first.returncode == 0, first.stdout + first.stderr
    figures = re.search(r"^transactions: (.*)$", first.stdout, re.MULTILINE).group(1)
    assert all(re.search(rf"[1-9]\d* {what}", figures)
               for what in ("committed values read", "transactions aborted", "EndTxn abandoned")), figures
    assert digest(first.stdout) == digest(simulate("--seed", "2", "--duration", "12", "--transactions").stdout)


@pytest.mark.timeout(300)
def test_partition_moves_amid_the_faults_find_no_violation_and_replay():
    """``--reassignments``: partitions moved through the controller (AlterPartitionReassignments'
    event) and moves cancelled, racing crashes, pauses, cut links and controller changes. A
    controller that completed a move before its target was in sync (the removed replicas taken
    out, the leadership given to a replica behind) loses acknowledged writes: of seeds
    5000-5019 with that mutation, 5004 finds it (six values read, then rewritten)."""
    first = simulate("--seed", "0", "--duration", "20", "--reassignments", "-v")
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr
    assert re.search(r"fault +move of p\d: NONE", first.stdout), first.stdout[-5000:]
    assert re.search(r"reassigned to \[", first.stdout), first.stdout[-5000:]
    assert digest(first.stdout) == digest(simulate("--seed", "0", "--duration", "20", "--reassignments").stdout)


@pytest.mark.timeout(120)  # ~10 s of CPU
def test_a_replica_whose_stop_died_with_its_controller_is_deleted_all_the_same():
    """Seed 28 ``--reassignments`` completes a move of p2 off broker 1 and crashes the
    controller (also p2's leader) at once: the StopReplica queued for broker 1 died with it,
    and no later controller tells broker 1 of a partition it no longer holds, so it followed
    p2 to the end of the run, fenced. Found by the final check that no live broker
    replicates a partition not assigned to it; broker 1 now deletes the copy when an
    UpdateMetadata names p2 without it."""
    result = simulate("--seed", "28", "--reassignments")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr
    assert "still replicates it" not in result.stdout
