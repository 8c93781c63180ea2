"""How fast a test gets its broker: warm-started (forked) fixture brokers against spawned ones,
beside Tansu and the Python floor, in one run (issue 30).

    python3 bench/bench_fixture_start.py              # 15 interleaved rounds and the 100-test file
    python3 bench/bench_fixture_start.py --rounds 5 --tests 30
    python3 bench/bench_fixture_start.py --trace      # one warm start and one Tansu start, traced

Per round, in turn (so a slow moment of the machine is shared out):

- warm / spawn: ``MinikafkaBroker(...).start()`` as the pytest fixture calls it, with warm starts
  on (``minikafka.testing.warm``: forked from the session's pre-imported parent) and off
  (``minikafka serve`` spawned); fixture start -> ready (``start()`` returned: the ready line was
  read), -> first message acknowledged and -> first consumed message (bench_latency.first_message:
  confluent-kafka produces one message to a new topic, which the broker creates, and a consumer
  reads it back; the acknowledgement splits the producer's part from the consumer's);
- Tansu: its binary (bench_peers' install) spawned -> first consumed message;
- the Python floor: this interpreter spawned to exit at once, and to ``import trio``.

``--trace`` instead prints, for one warm fixture start and one Tansu start, librdkafka's
debug log of the same first message (its connections, each request sent and each answer
received), in ms from the start: where the clients wait on the broker, and on their own timers.

Then the end-to-end figure: one generated test file of ``--tests`` tests, each asking for its own
``minikafka_broker`` and producing and consuming one message, run by pytest in a subprocess with
warm starts on and off; wall time of each and the ratio.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_latency import first_message, free_port, python_floor_times, stop, wait_for_port  # noqa: E402
from bench_peers import PeerUnavailable, start, tansu_peer  # noqa: E402

from minikafka.testing import MinikafkaBroker  # noqa: E402
from minikafka.testing.broker import warm_starter  # noqa: E402
from minikafka.testing.warm import ENV_SWITCH  # noqa: E402

# The generated tests' bodies, each with the import it needs: a client's produce and consume
# (its start-up and teardown cost tens of ms, the same with either kind of broker), and one raw
# produce and fetch request, so the broker's own share shows (without importing the client
# libraries that bench_latency does, ~0.15 s of the file's time in either mode).
BODIES = {
    "confluent-kafka produce + consume": ("from bench_latency import first_message",
                                          "first_message(minikafka_broker.bootstrap)"),
    "raw Produce + Fetch requests": ("", "produce_and_fetch(minikafka_broker.bootstrap)"),
}
TEST_FILE = textwrap.dedent("""
    import pytest
    {imports}
    from minikafka.testing import kafka_request
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.records import build_message_set

    def produce_and_fetch(bootstrap):
        records = build_message_set([(None, b"hello", 0)], magic=1)
        kafka_request(bootstrap, ApiKey.METADATA, 1, {{"topics": [{{"name": "t"}}]}})
        kafka_request(bootstrap, ApiKey.PRODUCE, 2, {{"acks": 1, "timeout_ms": 5000, "topic_data": [
            {{"name": "t", "partition_data": [{{"index": 0, "records": records}}]}}]}})
        answer = kafka_request(bootstrap, ApiKey.FETCH, 2, {{"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
            "topics": [{{"topic": "t", "partitions": [{{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}}]}}]}})
        assert answer.responses[0].partitions[0].records

    @pytest.mark.parametrize("n", range({tests}))
    def test_own_broker(minikafka_broker, n):
        {body}
""")


def fixture_start(workdir: Path, warm: bool) -> tuple[float, float, float]:
    """(start -> ready, start -> first message acknowledged, start -> first consumed message)
    in ms, for one fixture broker."""
    os.environ[ENV_SWITCH] = "1" if warm else "0"
    starter = warm_starter()
    starter._unavailable = None if warm else f"{ENV_SWITCH}=0"  # the session's starter, switched per run
    broker = MinikafkaBroker(Path(tempfile.mkdtemp(dir=workdir)))
    began = time.perf_counter()
    broker.start()
    ready = time.perf_counter()
    acknowledged = first_message(broker.bootstrap)
    done = time.perf_counter()
    broker.stop()
    return (ready - began) * 1000, (acknowledged - began) * 1000, (done - began) * 1000


# librdkafka's debug lines that make the timeline: a broker thread connecting, each request
# sent and answer received.
TRACED = ("Connecting to", "Sent ", "Received ", "Sending TERMINATE")


class _Timeline(logging.Handler):
    """librdkafka's debug log (confluent-kafka's ``logger``), each line stamped on arrival."""

    def __init__(self, began: float) -> None:
        super().__init__(logging.DEBUG)
        self.began = began
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(((time.perf_counter() - self.began) * 1000, record.getMessage()))

    def mark(self, what: str) -> None:
        self.lines.append(((time.perf_counter() - self.began) * 1000, f"--- {what}"))


def traced_first_message(bootstrap: str, timeline: _Timeline) -> None:
    client_log = logging.getLogger(f"rdkafka-trace-{id(timeline)}")
    client_log.propagate = False
    client_log.setLevel(logging.DEBUG)
    client_log.addHandler(timeline)
    acknowledged = first_message(bootstrap, client_config={"debug": "broker,protocol,topic,fetch,msg",
                                                           "logger": client_log})
    timeline.lines.append(((acknowledged - timeline.began) * 1000, "--- first message acknowledged"))
    timeline.mark("first message consumed (the consumer closes after this)")
    timeline.lines.sort(key=lambda line: line[0])


def print_timeline(title: str, timeline: _Timeline) -> None:
    print(f"\n{title} (ms from the start)")
    for at, line in timeline.lines:
        if line.startswith("---") or any(word in line for word in TRACED):
            print(f"{at:8.2f}  {line[:160]}")


def trace(workdir: Path, cache_dir: Path) -> None:
    fixture_start(workdir, warm=True)  # unmeasured: starts the warm parent
    broker = MinikafkaBroker(Path(tempfile.mkdtemp(dir=workdir)))
    timeline = _Timeline(time.perf_counter())
    broker.start()
    timeline.mark("fixture start() returned (ready)")
    traced_first_message(broker.bootstrap, timeline)
    broker.stop()
    print_timeline("warm fixture broker", timeline)
    try:
        tansu = tansu_peer(cache_dir)
    except (PeerUnavailable, OSError, subprocess.SubprocessError) as exc:
        print(f"skip Tansu: {exc}")
        return
    port = free_port()
    timeline = _Timeline(time.perf_counter())
    process = subprocess.Popen(tansu.argv(port, tempfile.mkdtemp(dir=workdir)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=tansu.env)
    try:
        wait_for_port("127.0.0.1", port, process, time.perf_counter() + 30)
        timeline.mark("port open")
        traced_first_message(f"127.0.0.1:{port}", timeline)
    finally:
        stop(process)
    print_timeline("Tansu, spawned", timeline)


def run_test_file(workdir: Path, tests: int, body: tuple[str, str], warm: bool) -> float:
    imports, call = body
    (workdir / "test_many.py").write_text(TEST_FILE.format(tests=tests, imports=imports, body=call))
    env = dict(os.environ, **{ENV_SWITCH: "1" if warm else "0"},
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")]))
    began = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                             "test_many.py"], cwd=workdir, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"the {tests}-test file failed:\n{result.stdout[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tests", type=int, default=100, help="tests in the generated file (default 100)")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "minikafka-bench")
    parser.add_argument("--trace", action="store_true",
                        help="print the clients' timeline of one warm start and one Tansu start instead")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="minikafka-bench-fixture-"))
    if args.trace:
        try:
            trace(workdir, args.cache_dir)
        finally:
            warm_starter().close()
            shutil.rmtree(workdir, ignore_errors=True)
        return 0
    samples: dict[str, list[float]] = {}
    try:
        try:
            tansu = tansu_peer(args.cache_dir)
        except (PeerUnavailable, OSError, subprocess.SubprocessError) as exc:
            print(f"skip Tansu: {exc}")
            tansu = None
        fixture_start(workdir, warm=True)  # unmeasured: starts the warm parent, warms the caches
        fixture_start(workdir, warm=False)
        if tansu is not None:
            start(tansu, workdir).process.kill()
        for round_number in range(1, args.rounds + 1):
            for name, warm in (("warm", True), ("spawn", False)):
                ready, acked, first = fixture_start(workdir, warm)
                samples.setdefault(f"{name} ready", []).append(ready)
                samples.setdefault(f"{name} acked", []).append(acked)
                samples.setdefault(f"{name} first", []).append(first)
            if tansu is not None:
                running = start(tansu, workdir)
                running.process.kill()
                running.process.wait()
                samples.setdefault("Tansu first", []).append(running.spawn_to_first_ms)
            interpreter, with_trio = python_floor_times(sys.executable, runs=1)
            samples.setdefault("floor", []).append(interpreter[0] * 1000)
            samples.setdefault("floor trio", []).append(with_trio[0] * 1000)
            print(f"  round {round_number}: " + " ".join(f"{k}={v[-1]:.1f}" for k, v in samples.items()),
                  file=sys.stderr, flush=True)
        warm_starter().close()
        files = {name: (run_test_file(workdir, args.tests, body, warm=True),
                        run_test_file(workdir, args.tests, body, warm=False))
                 for name, body in BODIES.items()}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    median = {key: statistics.median(values) for key, values in samples.items()}
    print(f"\nfixture broker start-up, medians of {args.rounds} interleaved rounds (ms)")
    print("| | start -> ready | start -> first message acknowledged | start -> first consumed message |")
    print("|---|---|---|---|")
    for label, name in (("fixture, warm start (forked)", "warm"), ("fixture, spawned", "spawn")):
        print(f"| {label} | {median[name + ' ready']:.1f} | {median[name + ' acked']:.1f} | {median[name + ' first']:.1f} |")
    if "Tansu first" in median:
        print(f"| Tansu, spawned | — | — | {median['Tansu first']:.1f} |")
    print(f"| Python floor: interpreter / + import trio | {median['floor']:.1f} / {median['floor trio']:.1f} | | |")
    if "Tansu first" in median:
        print(f"\nwarm / Tansu, start -> first consumed message: {median['warm first'] / median['Tansu first']:.2f}")
    print(f"\n{args.tests} tests, each with its own broker (pytest end to end)")
    print("| test body | warm start, s | spawned, s | warm is faster by |")
    print("|---|---|---|---|")
    for name, (warm_file, spawn_file) in files.items():
        print(f"| {name} | {warm_file:.1f} | {spawn_file:.1f} | {spawn_file / warm_file:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
