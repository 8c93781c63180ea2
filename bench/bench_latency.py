"""Start-up and small-request latency of a real ``minikafka serve`` process (issue 17).

    python3 bench/bench_latency.py                       # this checkout's broker, 5 start-ups
    python3 bench/bench_latency.py --python /usr/bin/python3 --runs 3 --rounds 500
    python3 bench/bench_latency.py --python A/python --python B/python   # two checkouts, interleaved

It prints, each as the median and the best of ``--runs`` fresh processes (on a shared machine
the best says what the code costs, the median what a user meets):

* the Python floor: spawn → exit of ``python -c pass``, and of ``python -c "import trio"``
  (no trio broker can start faster than the second);
* spawn → ready line, spawn → port open (the first TCP connect that succeeds), spawn → first
  message consumed back, and port open → first message;
* produce latency p50 / p99: one message produced and flushed by confluent-kafka with
  ``acks=1`` and ``linger.ms=0``, ``--rounds`` round trips after a warm-up, on one broker;
  with the broker's CPU time per round trip.

The measurement functions are importable for benchmarks that compare brokers side by side
(``bench/bench_peers.py``): :func:`measure_startup` takes any command and the address it will
listen on, :func:`wait_for_port` and :func:`first_message` any process and bootstrap address,
:func:`measure_produce_latency` any bootstrap address, :func:`spawn_times` / :func:`spawn_floor`
any command that exits by itself, :func:`python_floor_times` any interpreter,
:func:`python_env` the environment to spawn Python processes with, :func:`stop` any process.
They return seconds and never assert anything; a broker that exits, does not listen or does
not serve the first message in time raises :class:`NotServing`.

Python processes are spawned with their bytecode cached, as a ``pip install``-ed package has
it: with ``PYTHONDONTWRITEBYTECODE`` set (as on this machine) every start of an editable
checkout would compile its sources again, some 80 ms that no user pays. The first run of each
kind is a warm-up and is not counted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_broker import cpu_seconds  # noqa: E402

# Polling for the port is a connect() every this many seconds: fine enough for a figure in
# milliseconds, coarse enough not to steal the broker's CPU on a 2-core machine.
PORT_POLL_INTERVAL = 0.0005


class NotServing(Exception):
    """A broker exited, did not open its port, or did not serve the first message in time;
    the message says which."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def python_env() -> dict[str, str]:
    """This process's environment for spawning Python with cached bytecode: without
    ``PYTHONDONTWRITEBYTECODE``, and if that was set, with the cache in a directory of its own
    (``PYTHONPYCACHEPREFIX``) rather than beside the sources of whoever asked for none."""
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        env.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "minikafka-bench-pycache"))
    return env


def spawn_times(argv: list[str], runs: int = 7, env: dict | None = None) -> list[float]:
    """Seconds from spawning ``argv`` to its exit, for ``runs`` runs after an unmeasured one."""
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - start)
    return times[1:]


def spawn_floor(argv: list[str], runs: int = 7, env: dict | None = None) -> float:
    """Median seconds from spawning ``argv`` to its exit (``[python, "-c", "pass"]`` is the
    interpreter's floor)."""
    return statistics.median(spawn_times(argv, runs, env))


def python_floor_times(python: str = sys.executable, runs: int = 7) -> tuple[list[float], list[float]]:
    """Seconds from spawn to exit of the interpreter alone and of ``import trio``, ``runs``
    of each after an unmeasured one, spawned with :func:`python_env`."""
    env = python_env()
    return (spawn_times([python, "-c", "pass"], runs, env),
            spawn_times([python, "-c", "import trio"], runs, env))


def python_floors(python: str = sys.executable, runs: int = 7) -> tuple[float, float]:
    """(interpreter alone, interpreter + ``import trio``), median seconds from spawn to exit."""
    interpreter, with_trio = python_floor_times(python, runs)
    return statistics.median(interpreter), statistics.median(with_trio)


@dataclass
class Startup:
    """Seconds from spawning a broker; ``ready`` is None for a broker that prints no line
    starting with the ready prefix."""

    ready: float | None
    port_open: float
    first_message: float

    @property
    def port_to_first_message(self) -> float:
        return self.first_message - self.port_open


def wait_for_port(host: str, port: int, process: subprocess.Popen, deadline: float) -> float:
    """perf_counter() of the first TCP connect to ``host:port`` that succeeds; raises
    NotServing if ``process`` exits first or nothing listens by ``deadline`` (a perf_counter())."""
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                return time.perf_counter()
        except OSError:
            if process.poll() is not None:
                raise NotServing(f"exited with status {process.returncode} before opening its port") from None
            if time.perf_counter() > deadline:
                raise NotServing(f"nothing listens on {host}:{port}") from None
            time.sleep(PORT_POLL_INTERVAL)


def first_message(bootstrap: str, topic: str | None = None, timeout: float = 30.0,
                  client_config: dict | None = None) -> float:
    """Produce one message to partition 0 of ``topic`` (a new one by default, created by the
    broker on first use), then consume it back from offset 0, as a new application would;
    returns the perf_counter() at which the produce was acknowledged (where the producer's
    part ends: the Metadata that creates the topic and the Produce), raises NotServing if it
    cannot within ``timeout``. No consumer group: the figure is about
    the broker, not the coordinator. ``acks=1``, as in the other figures: a single broker
    answers it as it does ``all``. ``client_config`` is added to both clients' configuration
    (bench_fixture_start --trace: librdkafka's debug log)."""
    topic = topic or f"first-{uuid.uuid4().hex[:8]}"
    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, **(client_config or {})})
    producer.produce(topic, b"hello", partition=0, on_delivery=lambda err, _msg: err and errors.append(err))
    if producer.flush(timeout):
        raise NotServing(f"{bootstrap}: the first message was not acknowledged in {timeout} s")
    if errors:
        raise NotServing(f"{bootstrap}: the first produce failed: {errors[0]}")
    acknowledged = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"first-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10, **(client_config or {})})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                return acknowledged
        raise NotServing(f"{bootstrap}: the first message was not consumed in {timeout} s")
    finally:
        consumer.close()


def measure_startup(cmd: list[str], bootstrap: str, *, ready_prefix: str | None = None,
                    env: dict | None = None, timeout: float = 30.0) -> Startup:
    """Spawn ``cmd`` (a broker that will listen on ``bootstrap``, "host:port"), time the
    port opening and the first message produced and consumed back, then terminate it.

    The clients start as soon as a connect() succeeds, not at the ready line: the time the
    broker spends between listening and accepting counts, as it does for any application.
    ``ready_prefix``: the stdout line announcing readiness (minikafka's ``"minikafka ready:"``);
    stdout is read in a thread so a chatty broker cannot block on a full pipe."""
    host, _, port = bootstrap.rpartition(":")
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                               text=True)
    ready_at: list[float] = []

    def read_stdout() -> None:
        for line in process.stdout:
            if ready_prefix is not None and not ready_at and line.startswith(ready_prefix):
                ready_at.append(time.perf_counter() - start)

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    try:
        port_open = wait_for_port(host, int(port), process, start + timeout) - start
        first_message(bootstrap, timeout=timeout)
        consumed = time.perf_counter() - start
    finally:
        stop(process, timeout)
        reader.join(5)
    return Startup(ready_at[0] if ready_at else None, port_open, consumed)


def stop(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM, and SIGKILL if ``process`` has not exited ``timeout`` seconds later."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Latency:
    """Round trips of one produced and flushed message, in seconds, in the order measured."""

    samples: list[float]
    broker_cpu: float | None = None  # broker CPU seconds over the measured round trips

    def percentile(self, p: float) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    @property
    def p50(self) -> float:
        return self.percentile(50)

    @property
    def p99(self) -> float:
        return self.percentile(99)

    @property
    def broker_cpu_per_round_trip(self) -> float | None:
        return None if self.broker_cpu is None else self.broker_cpu / len(self.samples)


def measure_produce_latency(bootstrap: str, *, rounds: int = 2000, warmup: int = 200,
                            topic: str | None = None, broker_pid: int | None = None) -> Latency:
    """``rounds`` round trips of one 100-byte message produced with confluent-kafka
    (``acks=1``, ``linger.ms=0``) and flushed, after ``warmup`` unmeasured ones that also
    create the topic. With ``broker_pid``, the broker's CPU time over the measured rounds."""
    topic = topic or f"latency-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    value = b"x" * 100
    failures: list = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(err)

    def round_trip() -> None:
        producer.produce(topic, value, partition=0, on_delivery=delivered)
        if producer.flush(30):
            raise KafkaException(f"{bootstrap}: a message was not delivered in 30 s")

    for _ in range(warmup):
        round_trip()
    failures.clear()  # the first few may meet a topic still being created
    samples = []
    cpu_before = cpu_seconds(broker_pid) if broker_pid else None
    for _ in range(rounds):
        start = time.perf_counter()
        round_trip()
        samples.append(time.perf_counter() - start)
    cpu = cpu_seconds(broker_pid) - cpu_before if broker_pid else None
    if failures:
        raise KafkaException(failures[0])
    return Latency(samples, cpu)


def minikafka_command(python: str, port: int, log_dir: str) -> list[str]:
    return [python, "-m", "minikafka.broker", "serve", "--port", str(port), "--log-dir", log_dir]


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append",
                        help="interpreter that runs the broker (its minikafka is measured); give it "
                             "twice or more to compare checkouts, their runs interleaved "
                             "(default: this interpreter)")
    parser.add_argument("--runs", type=int, default=5, help="fresh broker processes for start-up, each")
    parser.add_argument("--rounds", type=int, default=2000, help="measured produce round trips, each")
    args = parser.parse_args()
    pythons = args.python or [sys.executable]
    env = python_env()
    workdir = tempfile.mkdtemp(prefix="minikafka-latency-")
    try:
        floors = {python: python_floor_times(python, args.runs) for python in pythons}
        startups: dict[str, list[Startup]] = {python: [] for python in pythons}
        for i in range(args.runs + 1):  # interleaved: load on a shared machine hits all alike
            for python in pythons:
                port = free_port()
                command = minikafka_command(python, port, os.path.join(workdir, f"{len(startups[python])}-{i}"))
                run = measure_startup(command, f"127.0.0.1:{port}", ready_prefix="minikafka ready:", env=env)
                if i:  # the first round was the warm-up
                    startups[python].append(run)
        latencies = {}
        for python in pythons:
            port = free_port()
            process = subprocess.Popen(minikafka_command(python, port, os.path.join(workdir, f"latency-{len(latencies)}")),
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            try:
                line = process.stdout.readline()
                if not line.startswith("minikafka ready:"):
                    raise SystemExit(f"minikafka did not start: {line!r}")
                latencies[python] = measure_produce_latency(f"127.0.0.1:{port}", rounds=args.rounds,
                                                            broker_pid=process.pid)
            finally:
                stop(process, 30)
        for python in pythons:
            interpreter, with_trio = floors[python]
            runs, latency = startups[python], latencies[python]
            print(f"== {python}")
            for label, values in (("floor: python -c pass", interpreter),
                                  ("floor: python -c 'import trio'", with_trio),
                                  ("spawn -> ready line", [r.ready for r in runs]),
                                  ("spawn -> port open", [r.port_open for r in runs]),
                                  ("spawn -> first consumed message", [r.first_message for r in runs]),
                                  ("port open -> first message", [r.port_to_first_message for r in runs])):
                print(f"{label:32} median {_ms(values):6.1f} ms, best {min(values) * 1000:6.1f} ms "
                      f"({args.runs} runs)")
            print(f"produce latency (confluent-kafka, acks=1, 1 message + flush, {args.rounds} round trips): "
                  f"p50 {latency.p50 * 1000:.3f} ms, p99 {latency.p99 * 1000:.3f} ms; "
                  f"broker CPU {latency.broker_cpu_per_round_trip * 1e6:.0f} us per round trip")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
