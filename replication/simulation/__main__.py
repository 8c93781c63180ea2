"""``python -m minikafka.replication.simulation [--seeds N] [--first F] [--seed S] [--transactions]
[--slow-demotion] [--reassignments] [-v]``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

REPLAY = "PYTHONHASHSEED=0 {python} -m minikafka.replication.simulation --seed {seed} --duration {duration:g}{options} -v"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minikafka.replication.simulation")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds to run")
    parser.add_argument("--first", type=int, default=0, help="the first seed of --seeds")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--duration", type=float, default=None, help="virtual seconds of faults per run")
    parser.add_argument("--max-wall", type=float, default=None, help="stop starting runs after this many seconds")
    parser.add_argument("--transactions", action="store_true",
                        help="add the transactional workload (issue 26): transactions, markers, a READ_COMMITTED reader")
    parser.add_argument("--slow-demotion", action="store_true",
                        help="the controller's requests reach a broker in controlled shutdown late (a loaded process)")
    parser.add_argument("--reassignments", action="store_true",
                        help="the faults also move partitions to other replicas (AlterPartitionReassignments)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the run's trace and broker logs")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        # set iteration order depends on string hashes: fixed, so a seed replays exactly
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "minikafka.replication.simulation", *sys.argv[1:]])

    from minikafka.replication.simulation.run import DURATION_S, run_seed

    duration = args.duration if args.duration is not None else DURATION_S
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    started = time.perf_counter()
    runs = failed = failovers = 0
    group_figures: Counter[str] = Counter()
    txn_figures: Counter[str] = Counter()
    virtual = 0.0
    for seed in seeds:
        if args.max_wall is not None and time.perf_counter() - started > args.max_wall:
            break
        result = run_seed(seed, duration_s=duration, verbose=args.verbose, transactions=args.transactions,
                          slow_demotion=args.slow_demotion, reassignments=args.reassignments)
        runs += 1
        failovers += result.failovers
        group_figures += result.group_figures
        txn_figures += result.txn_figures
        virtual += result.virtual_s
        if result.violations:
            failed += 1
            print(f"seed {seed}: {len(result.violations)} violation(s), digest {result.digest}")
            for line in result.violations:
                print(f"  {line}")
            print("  replay: " + REPLAY.format(python=sys.executable, seed=seed, duration=duration,
                                               options=" --transactions" * args.transactions
                                               + " --slow-demotion" * args.slow_demotion
                                               + " --reassignments" * args.reassignments), flush=True)
        elif args.seed is not None or args.verbose:
            print(f"seed {seed}: ok, digest {result.digest}")
    wall = time.perf_counter() - started
    print(f"{runs} runs, {failed} with violations ({failed / max(runs, 1) * 10000:.0f} per 10,000 runs); "
          f"{failovers} simulated failovers in {virtual:.0f} virtual s, {failovers / max(wall, 1e-9):.2f} "
          f"failovers per wall second; wall time {wall:.1f} s ({runs / max(wall, 1e-9):.3f} runs/s)")
    print("groups: " + ", ".join(f"{count} {what}" for what, count in sorted(group_figures.items())))
    if args.transactions:
        print("transactions: " + ", ".join(f"{count} {what}" for what, count in sorted(txn_figures.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
