"""Produce and consume throughput of a real ``minikafka serve`` process, against a ceiling.

    python3 bench/bench_broker.py            # full run, a few minutes
    python3 bench/bench_broker.py --quick    # a tenth of the messages

For each client (confluent-kafka, kafka-python), message size (100 B, 1 KiB) and codec (none,
lz4) it produces N messages to a fresh topic in the clients' default configuration (plus the
codec), waits for every acknowledgement, then consumes them all back from offset 0 with an
assigned partition. Throughput counts message values only (MB = 10^6 bytes).

The ceiling is what this machine does with no Kafka at all: the same value bytes pushed through
a loopback TCP socket into a file by a minimal Python reader in another process (recv_into a
1 MiB buffer, write). The broker/ceiling ratio says how much of that the broker keeps.

A third "client", ``raw``, takes client libraries out of the picture: it sends Produce v2
requests holding ready-made 1 MB message sets and reads the partition back with Fetch v3, one
request at a time over one connection, using this repository's own protocol codecs. Its figures
are close to what the broker itself can do.

TLS rows (listener ``SSL``, a ``trustme`` certificate, TLS 1.3 by default) repeat some
workloads against the SSL listener of the same broker, next to the PLAINTEXT figures. Over TLS
the broker cannot sendfile fetched segments: it reads them in 1 MiB chunks in a worker thread
and encrypts them in the event loop, so the consume figures show that cost.

It also reports the time from starting ``minikafka serve`` to the first message a consumer
receives (start-up, ready line, topic auto-creation, one produce and one fetch).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

MB = 1_000_000

# (client, value size, codec, messages in a full run)
WORKLOADS = [
    ("confluent-kafka", 100, "none", 300_000),
    ("confluent-kafka", 100, "lz4", 300_000),
    ("confluent-kafka", 1024, "none", 100_000),
    ("confluent-kafka", 1024, "lz4", 100_000),
    ("kafka-python", 100, "none", 100_000),
    ("kafka-python", 100, "lz4", 100_000),
    ("kafka-python", 1024, "none", 40_000),
    ("kafka-python", 1024, "lz4", 40_000),
    ("raw", 100, "none", 300_000),
    ("raw", 100, "lz4", 300_000),
    ("raw", 1024, "none", 100_000),
    ("raw", 1024, "lz4", 100_000),
    ("confluent-kafka/SSL", 100, "none", 300_000),
    ("confluent-kafka/SSL", 1024, "none", 100_000),
    ("kafka-python/SSL", 1024, "none", 40_000),
]

# Client settings per bootstrap address: the SSL listener's CA; empty for PLAINTEXT.
SETTINGS: dict[str, dict[str, dict]] = {}


def _confluent(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, **SETTINGS.get(bootstrap, {}).get("confluent-kafka", {})}


def _kafka_python(bootstrap: str) -> dict:
    return {"bootstrap_servers": bootstrap, **SETTINGS.get(bootstrap, {}).get("kafka-python", {})}

READER = textwrap.dedent("""
    import socket, sys, time
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    total = 0
    start = time.perf_counter()
    with open(sys.argv[1], "wb") as out:
        while True:
            n = conn.recv_into(buffer)
            if not n:
                break
            out.write(view[:n])
            total += n
    print(total, time.perf_counter() - start, flush=True)
""")


def make_values(count: int, size: int, seed: int = 7) -> list[bytes]:
    """Log-like values: words from a small vocabulary and a counter, so lz4 has work to do
    (about 2-3x) but nothing is trivially repetitive."""
    rng = random.Random(seed)
    words = [uuid.UUID(int=rng.getrandbits(128)).hex[: rng.randint(3, 10)] for _ in range(500)]
    pool = []
    for i in range(1000):
        text = f"{i:08d} " + " ".join(rng.choice(words) for _ in range(size // 4))
        pool.append(text.encode()[:size].ljust(size, b"."))
    return [pool[i % len(pool)] for i in range(count)]


def ceiling(values: list[bytes], directory: str, attempts: int = 5) -> float:
    """Seconds to push the concatenated values through loopback into a file: the best of
    ``attempts`` runs, since a ceiling is what the machine can do when nothing interferes."""
    payload = b"".join(values)
    return min(_push_through_loopback(payload, directory) for _ in range(attempts))


def _push_through_loopback(payload: bytes, directory: str) -> float:
    target = os.path.join(directory, f"ceiling-{uuid.uuid4().hex}")
    reader = subprocess.Popen([sys.executable, "-c", READER, target], stdout=subprocess.PIPE, text=True)
    try:
        port = int(reader.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as sock:
            view = memoryview(payload)
            for start in range(0, len(payload), 1 << 20):
                sock.sendall(view[start:start + (1 << 20)])
        total, seconds = reader.stdout.readline().split()
        assert int(total) == len(payload)
        return float(seconds)
    finally:
        reader.wait()
        os.unlink(target)


def confluent_produce(bootstrap, topic, values, codec, blocked: list | None = None, **settings) -> float:
    """``settings`` are extra librdkafka properties (bench_peers sets ``acks``). ``blocked``, if
    given, gets the seconds of each wait on librdkafka's full queue: the time the producer
    waited for the broker's acknowledgements rather than working itself."""
    producer = Producer({**_confluent(bootstrap), "compression.type": codec, **settings})
    failures = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for value in values:
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                if blocked is None:
                    producer.poll(0.005)
                else:
                    waited = time.perf_counter()
                    producer.poll(0.005)
                    blocked.append(time.perf_counter() - waited)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    assert remaining == 0 and not failures, (remaining, failures[:3])
    return elapsed


def confluent_consume(bootstrap, topic, count, partitions: int = 1, **settings) -> float:
    consumer = Consumer({**_confluent(bootstrap), "group.id": "bench", **settings})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    received = 0
    start = time.perf_counter()
    deadline = start + 300
    while received < count and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                received += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    assert received == count, (received, count)
    return elapsed


def kafka_python_produce(bootstrap, topic, values, codec) -> float:
    producer = KafkaProducer(**_kafka_python(bootstrap), compression_type=None if codec == "none" else codec)
    start = time.perf_counter()
    futures = [producer.send(topic, value) for value in values]
    producer.flush(300)
    elapsed = time.perf_counter() - start
    assert all(f.succeeded() for f in futures)
    producer.close(10)
    return elapsed


def kafka_python_consume(bootstrap, topic, count) -> float:
    consumer = KafkaConsumer(**_kafka_python(bootstrap))
    tp = KafkaTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    received = 0
    start = time.perf_counter()
    deadline = start + 300
    while received < count and time.perf_counter() < deadline:
        received += len(consumer.poll(timeout_ms=1000).get(tp, []))
    elapsed = time.perf_counter() - start
    consumer.close()
    assert received == count, (received, count)
    return elapsed


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far: Linux's CPU clock of the process (to the
    nanosecond), else /proc's clock ticks (10 ms, too coarse for rounds of a few ms), 0 elsewhere."""
    try:
        # The clock id clock_getcpuclockid(3) gives: MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED).
        return time.clock_gettime(((~pid) << 3) | 2)
    except (AttributeError, OSError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(pid: int, run, *args) -> tuple[float, float]:
    """(wall seconds, broker CPU share of that time) of ``run(*args)``, which returns its own
    wall time so client set-up outside the measured loop is not counted."""
    cpu_before = cpu_seconds(pid)
    elapsed = run(*args)
    return elapsed, (cpu_seconds(pid) - cpu_before) / elapsed


class RawConnection:
    """One blocking connection speaking requests built by ``protocol.framing``."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.correlation_id = 0

    def call(self, api_key: int, version: int, body: dict):
        from minikafka.protocol.framing import decode_response, encode_request

        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "bench-raw", body))
        size = self._read(4)
        return decode_response(api_key, version, size + self._read(int.from_bytes(size, "big")))

    def _read(self, n: int) -> bytes:
        buffer = bytearray(n)
        view = memoryview(buffer)
        got = 0
        while got < n:
            read = self.sock.recv_into(view[got:])
            if not read:
                raise ConnectionError("broker closed the connection")
            got += read
        return bytes(buffer)

    def close(self) -> None:
        self.sock.close()


def raw_produce(bootstrap, topic, values, codec) -> float:
    from minikafka.protocol.records import Codec, build_message_set
    from minikafka.testing.clients import create_topics_body

    connection = RawConnection(bootstrap)
    # Ready-made magic 1 sets of 1 MB, for a magic 1 topic: a magic 2 one would up-convert each
    # into one batch over max.message.bytes, which it refuses (as Kafka does).
    connection.call(19, 0, create_topics_body(topic, 1, 1, 30, {"message_format_version": "0.10.2"}))
    per_set = max(1, MB // len(values[0]))
    now = int(time.time() * 1000)
    sets = [build_message_set([(None, v, now) for v in values[i:i + per_set]], codec=Codec[codec.upper()])
            for i in range(0, len(values), per_set)]
    start = time.perf_counter()
    for message_set in sets:
        response = connection.call(0, 2, {"acks": 1, "timeout_ms": 30000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": message_set}]}]})
        assert response.responses[0].partition_responses[0].error_code == 0
    elapsed = time.perf_counter() - start
    connection.close()
    return elapsed


def raw_consume(bootstrap, topic, count) -> float:
    from minikafka.protocol.records import iter_entries

    connection = RawConnection(bootstrap)
    offset = 0
    start = time.perf_counter()
    while offset < count:
        response = connection.call(1, 3, {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1,
                                          "max_bytes": 52428800, "topics": [{"topic": topic, "partitions": [
                                              {"partition": 0, "fetch_offset": offset,
                                               "partition_max_bytes": 1048576}]}]})
        partition = response.responses[0].partitions[0]
        assert partition.error_code == 0
        last = None
        for entry in iter_entries(partition.records or b""):
            last = entry.offset  # a compressed wrapper's offset is its last inner message's
        offset = offset if last is None else last + 1
    elapsed = time.perf_counter() - start
    connection.close()
    return elapsed


CLIENTS = {
    "confluent-kafka": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "raw": (raw_produce, raw_consume),
    "confluent-kafka/SSL": (confluent_produce, confluent_consume),
    "kafka-python/SSL": (kafka_python_produce, kafka_python_consume),
}


def tls_config(workdir: str) -> str:
    """A properties file adding an SSL listener with a ``trustme`` certificate; the CA goes
    in the SSL clients' settings once the port is known."""
    import trustme

    ca = trustme.CA()
    keystore, ca_path = os.path.join(workdir, "broker.pem"), os.path.join(workdir, "ca.pem")
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(keystore)
    ca.cert_pem.write_to_path(ca_path)
    path = os.path.join(workdir, "server.properties")
    with open(path, "w") as out:
        out.write(f"listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0\nssl.keystore.location={keystore}\n")
    SETTINGS["ca"] = {"path": ca_path}
    return path


def serve_command() -> list[str]:
    script = shutil.which("minikafka")
    if script:
        return [script]
    return [sys.executable, "-c", "import sys; from minikafka.broker.cli import main; sys.exit(main())"]


def start_broker(stderr, config: str) -> tuple[subprocess.Popen, str, str, float, float]:
    """Start ``minikafka serve``; return (process, PLAINTEXT bootstrap, SSL bootstrap, seconds
    to ready line, seconds to the first consumed message)."""
    start = time.perf_counter()
    process = subprocess.Popen([*serve_command(), "serve", "--port", "0", "--ephemeral", "--config", config],
                               stdout=subprocess.PIPE, stderr=stderr, text=True)
    listeners = {}
    while (line := process.stdout.readline().strip()).startswith("minikafka listener: "):
        name, _, address = line.split(": ", 1)[1].partition("://")
        listeners[name] = address
    ready = time.perf_counter() - start
    if not line.startswith("minikafka ready: "):
        process.kill()
        raise SystemExit(f"minikafka did not start: {line!r}")
    bootstrap = line.split("bootstrap.servers=")[1].split()[0]

    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("first-message", b"hello")
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    consumer.assign([TopicPartition("first-message", 0, 0)])
    while True:
        msg = consumer.poll(10)
        if msg is not None and msg.error() is None:
            break
    first_message = time.perf_counter() - start
    consumer.close()
    ca_path = SETTINGS.pop("ca")["path"]
    SETTINGS[listeners["SSL"]] = {"confluent-kafka": {"security.protocol": "SSL", "ssl.ca.location": ca_path},
                                  "kafka-python": {"security_protocol": "SSL", "ssl_cafile": ca_path}}
    return process, bootstrap, listeners["SSL"], ready, first_message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0

    workdir = tempfile.mkdtemp(prefix="minikafka-bench-")
    stderr = open(os.path.join(workdir, "broker.stderr"), "w")
    process, bootstrap, ssl_bootstrap, ready, first_message = start_broker(stderr, tls_config(workdir))
    try:
        print(f"minikafka serve -> ready line: {ready * 1000:.0f} ms; "
              f"-> first consumed message: {first_message * 1000:.0f} ms")
        print("ratio = broker MB/s / ceiling MB/s; cpu = broker process CPU time / wall time; "
              "µs/msg = broker CPU time per produced message")
        print(f"{'client':20} {'size':>5} {'codec':5} {'msgs':>7} | "
              f"{'produce MB/s':>12} {'msg/s':>9} {'ratio':>6} {'cpu':>4} {'µs/msg':>6} | "
              f"{'consume MB/s':>12} {'msg/s':>9} {'ratio':>6} {'cpu':>4} | {'ceiling MB/s':>12}")
        for client, size, codec, full_count in WORKLOADS:
            count = int(full_count * scale)
            values = make_values(count, size)
            megabytes = count * size / MB
            ceiling_mbs = megabytes / ceiling(values, workdir)
            produce, consume = CLIENTS[client]
            topic = f"bench-{client.replace('/', '-')}-{size}-{codec}-{uuid.uuid4().hex[:6]}"
            target = ssl_bootstrap if client.endswith("/SSL") else bootstrap
            produce_s, produce_cpu = timed(process.pid, produce, target, topic, values, codec)
            consume_s, consume_cpu = timed(process.pid, consume, target, topic, count)
            print(f"{client:20} {size:>5} {codec:5} {count:>7} | "
                  f"{megabytes / produce_s:>12.1f} {count / produce_s:>9.0f} "
                  f"{megabytes / produce_s / ceiling_mbs:>6.3f} {produce_cpu:>4.0%} "
                  f"{produce_cpu * produce_s / count * 1e6:>6.2f} | "
                  f"{megabytes / consume_s:>12.1f} {count / consume_s:>9.0f} "
                  f"{megabytes / consume_s / ceiling_mbs:>6.3f} {consume_cpu:>4.0%} | "
                  f"{ceiling_mbs:>12.1f}", flush=True)
    finally:
        process.terminate()
        process.wait(30)
        stderr.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
