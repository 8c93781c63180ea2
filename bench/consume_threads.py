"""Where one confluent-kafka consumer's CPU goes, thread by thread, against each broker (issue 25).

bench_peers' "consume from offset 0" row with the client's CPU split by librdkafka thread
(``/proc/self/task/*``: rdk:main, rdk:broker<id>, the bootstrap broker's thread, and the Python
thread of the consume() loop) and its context switches, read just before the consumer closes.
Each broker is started fresh (no relay between them: see fetch_shape.py for the answers' shape);
200,000 x 100 B values are produced as bench_peers produces them, then ``--reads`` fresh
consumers each read them all, the brokers interleaved round by round.

    python3 bench/consume_threads.py [--only minikafka,tansu] [--rounds 3] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import confluent_produce, make_values  # noqa: E402
from bench_latency import free_port, stop, wait_for_port  # noqa: E402
from bench_peers import CONSUMER_SETTINGS, PARTITIONS, PEERS, VALUE_SIZE, create_topic  # noqa: E402

TICK = 1 / os.sysconf("SC_CLK_TCK")


def threads() -> dict[str, tuple[float, int, int]]:
    """CPU seconds, voluntary and involuntary context switches of each live thread, by name
    (threads of one name summed)."""
    out: dict[str, list] = defaultdict(lambda: [0.0, 0, 0])
    main = threading.get_native_id()
    for tid in os.listdir("/proc/self/task"):
        try:
            base = f"/proc/self/task/{tid}"
            name = open(f"{base}/comm").read().strip()
            fields = open(f"{base}/stat").read().rsplit(")", 1)[1].split()
            status = dict(line.split(":", 1) for line in open(f"{base}/status") if ":" in line)
        except OSError:
            continue
        if int(tid) == main:
            name = "python consume() loop"
        elif name.startswith("rdk:broker") and not name[len("rdk:broker"):].lstrip("-").isdigit():
            name = "rdk:broker (other)"
        entry = out[name]
        entry[0] += (int(fields[11]) + int(fields[12])) * TICK
        entry[1] += int(status["voluntary_ctxt_switches"])
        entry[2] += int(status["nonvoluntary_ctxt_switches"])
    return {k: tuple(v) for k, v in out.items()}


def consume_once(bootstrap: str, topic: str, count: int, settings: dict) -> tuple[float, dict]:
    from confluent_kafka import Consumer, TopicPartition

    import resource

    def usage():
        process = resource.getrusage(resource.RUSAGE_SELF)
        thread = resource.getrusage(resource.RUSAGE_THREAD)
        return (time.perf_counter(), process.ru_utime + process.ru_stime, thread.ru_utime + thread.ru_stime)

    marks = [usage()]
    before = threads()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", **CONSUMER_SETTINGS, **settings})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    received = calls = 0
    marks.append(usage())
    start = time.perf_counter()
    while received < count:
        calls += 1
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                received += 1
    elapsed = time.perf_counter() - start
    after = threads()
    marks.append(usage())
    consumer.close()
    marks.append(usage())
    per = {}
    for name, (cpu, vol, invol) in after.items():
        b = before.get(name, (0.0, 0, 0)) if name == "python consume() loop" else (0.0, 0, 0)
        per[name] = (cpu - b[0], vol - b[1], invol - b[2])
    per["consume() calls"] = (0.0, calls, 0)
    for (name, i) in (("phase: create+assign", 0), ("phase: consume loop", 1), ("phase: close", 2)):
        wall, proc, main = (b - a for a, b in zip(marks[i], marks[i + 1]))
        per[name] = (proc, round(wall * 1e6), round(main * 1e6))
    return elapsed, per


PERF_EVENTS = ("syscalls:sys_enter_futex", "syscalls:sys_enter_recvfrom", "syscalls:sys_enter_recvmsg",
               "syscalls:sys_enter_poll", "syscalls:sys_enter_mmap", "syscalls:sys_enter_munmap",
               "syscalls:sys_enter_brk", "syscalls:sys_enter_madvise", "syscalls:sys_enter_sendmsg",
               "page-faults", "context-switches", "task-clock")


def perf_read(bootstrap: str, topic: str, count: int, settings: dict) -> dict[str, float]:
    """One read by a consumer in a child process under ``perf stat``: the counts of the
    events (software events and syscall tracepoints, which a loaded machine does not change
    much; this VM has no hardware counters) over the child's whole life, its start included."""
    import json
    command = ["perf", "stat", "-x", ";", "-e", ",".join(PERF_EVENTS), sys.executable, __file__, "--child",
               json.dumps([bootstrap, topic, count, settings])]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    counts = {}
    for line in result.stderr.splitlines():
        fields = line.split(";")
        if len(fields) > 2 and fields[2] in PERF_EVENTS:
            try:
                counts[fields[2].replace("syscalls:sys_enter_", "")] = float(fields[0])
            except ValueError:
                pass
    return counts


def valgrind_read(bootstrap: str, topic: str, count: int, settings: dict, out: Path) -> dict[str, float]:
    """One read by a consumer in a child process under callgrind: instructions executed per
    thread (exact counts, whatever the machine's load; valgrind runs the threads one at a time,
    so this is the work done, not the waits)."""
    import json
    import re
    command = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}.%p",
               sys.executable, __file__, "--child", json.dumps([bootstrap, topic, count, settings])]
    subprocess.run(command, capture_output=True, text=True, timeout=1800, check=True)
    totals = {}
    for path in sorted(out.parent.glob(out.name + ".*")):
        text = path.read_text(errors="replace")
        thread = re.search(r"^thread: (\d+)", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if thread and total:
            totals[f"thread {thread.group(1)}"] = float(total.group(1))
        path.unlink()
    return totals


def child(spec: str) -> int:
    import json
    bootstrap, topic, count, settings = json.loads(spec)
    consume_once(bootstrap, topic, count, settings)
    return 0


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf", action="store_true", help="each read in a child process under perf stat")
    parser.add_argument("--valgrind", action="store_true", help="each read in a child process under callgrind")
    parser.add_argument("--only", default="minikafka,tansu")
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--set-for", action="append", default=[], metavar="PEER:KEY=VALUE",
                        help="a consumer property for one peer only")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "minikafka-bench")
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    per_peer_settings: dict[str, dict] = defaultdict(dict)
    for item in args.set_for:
        peer, kv = item.split(":", 1)
        key, value = kv.split("=", 1)
        per_peer_settings[peer][key] = value
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    values = make_values(args.count, VALUE_SIZE)
    workdir = Path(tempfile.mkdtemp(prefix="minikafka-consume-threads-"))
    results: dict[str, list] = defaultdict(list)
    perf_results: dict[str, list] = defaultdict(list)
    try:
        for _ in range(args.rounds):
            for name in names:
                peer = PEERS[name.split("@")[0]](args.cache_dir)
                port = free_port()
                data = Path(tempfile.mkdtemp(prefix=f"{peer.name}-", dir=workdir))
                log = open(data / "process.log", "wb")
                process = subprocess.Popen(peer.argv(port, str(data)), stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=peer.env)
                try:
                    wait_for_port("127.0.0.1", port, process, time.perf_counter() + 30)
                    bootstrap = f"127.0.0.1:{port}"
                    topic = create_topic(bootstrap, PARTITIONS)
                    confluent_produce(bootstrap, topic, values, "none", acks=1)
                    for _ in range(args.reads):
                        if args.valgrind:
                            perf_results[name].append(valgrind_read(bootstrap, topic, args.count,
                                                                    {**settings, **per_peer_settings[name]},
                                                                    data / "callgrind.out"))
                            continue
                        if args.perf:
                            perf_results[name].append(perf_read(bootstrap, topic, args.count,
                                                                {**settings, **per_peer_settings[name]}))
                            continue
                        results[name].append(consume_once(bootstrap, topic, args.count,
                                                          {**settings, **per_peer_settings[name]}))
                finally:
                    stop(process)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.perf or args.valgrind:
        for name in names:
            runs = perf_results[name]
            print(f"\n== {name}: {len(runs)} reads of {args.count:,} under perf stat (a child process each); "
                  "median per read, and the reads")
            for key in sorted({k for r in runs for k in r}):
                vals = [r.get(key, 0) for r in runs]
                print(f"   {key:18s} {statistics.median(vals):>12,.0f}   ({', '.join(f'{v:,.0f}' for v in vals)})")
        return 0
    for name in names:
        runs = results[name]
        print(f"\n== {name}: {len(runs)} reads of {args.count:,}; msg/s median "
              f"{statistics.median(args.count / e for e, _ in runs):,.0f}")
        keys = sorted({k for _, per in runs for k in per})
        total = [sum(c for c, _, _ in per.values()) for _, per in runs]
        print(f"   all threads: {statistics.median(total) / args.count * 1e6:.2f} µs/msg "
              f"(reads: {', '.join(f'{t / args.count * 1e6:.2f}' for t in total)})")
        for key in keys:
            cpu = [per.get(key, (0, 0, 0))[0] for _, per in runs]
            vol = [per.get(key, (0, 0, 0))[1] for _, per in runs]
            invol = [per.get(key, (0, 0, 0))[2] for _, per in runs]
            if key.startswith("phase"):
                print(f"   {key:24s} process cpu {statistics.median(cpu) * 1e3:.1f} ms (reads: "
                      f"{', '.join(f'{c * 1e3:.0f}' for c in cpu)}); wall {statistics.median(vol) / 1e3:.1f} ms, "
                      f"main thread cpu {statistics.median(invol) / 1e3:.1f} ms")
                continue
            print(f"   {key:24s} cpu {statistics.median(cpu) / args.count * 1e6:.3f} µs/msg "
                  f"(reads: {', '.join(f'{c / args.count * 1e6:.2f}' for c in cpu)}); "
                  f"voluntary switches {statistics.median(vol):,.0f}, involuntary {statistics.median(invol):,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
