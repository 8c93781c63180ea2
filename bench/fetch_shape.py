"""The shape of the Fetch answers one confluent-kafka consumer gets, broker by broker (issue 25).

Counts and bytes, not speed: a relay process between the consumer and the broker keeps every
Fetch request and answer, and this prints what they held. Each broker (minikafka, Tansu; see
bench_peers) is started fresh, advertising the relay's port so that the consumer's every
connection goes through it; 200,000 x 100 B values are produced as bench_peers produces them
(confluent-kafka, acks=1, 3 partitions, codec none), then one consumer with bench_peers'
settings reads them all from offset 0, as bench_peers' "consume from offset 0" row does.

    python3 bench/fetch_shape.py [--only minikafka,tansu] [--count 200000] [--set key=value ...]

``--set`` passes librdkafka consumer properties (e.g. ``--set fetch.max.bytes=1000000``) to see
what the same broker's answers look like asked for another shape. The relay adds a hop, so the
consumer may send its fetches at another pace than without it; the figures are the answers'
shapes, which the pace moves little (each fetch is answered from data already there).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import confluent_produce, make_values  # noqa: E402
from bench_latency import free_port, stop, wait_for_port  # noqa: E402
from bench_peers import CONSUMER_SETTINGS, PARTITIONS, PEERS, VALUE_SIZE, create_topic  # noqa: E402

FETCH = 1


# ---------------------------------------------------------------------------------------------
# The relay: one thread per direction per connection; each frame is kept whole, with its time.

def _pump(source: socket.socket, sink: socket.socket, frames: list, direction: str, lock: threading.Lock) -> None:
    buffer = bytearray()
    try:
        while True:
            data = source.recv(1 << 20)
            if not data:
                break
            buffer += data
            # A frame is kept before its last bytes go on, so the consumer cannot be done (and
            # the relay stopped) with an answer not yet kept.
            while len(buffer) >= 4:
                (size,) = struct.unpack_from(">i", buffer, 0)
                if len(buffer) < 4 + size:
                    break
                with lock:
                    frames.append((direction, id(source) if direction == "req" else id(sink), time.perf_counter(),
                                   bytes(buffer[4:4 + size])))
                del buffer[:4 + size]
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _relay(listen_port: int, target_port: int, out: str, stop_event) -> None:
    listener = socket.create_server(("127.0.0.1", listen_port))
    listener.settimeout(0.2)
    frames: list = []
    lock = threading.Lock()
    threads = []
    while not stop_event.is_set():
        try:
            client, _ = listener.accept()
        except TimeoutError:
            continue
        upstream = socket.create_connection(("127.0.0.1", target_port))
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for args in ((client, upstream, frames, "req", lock), (upstream, client, frames, "resp", lock)):
            thread = threading.Thread(target=_pump, args=args, daemon=True)
            thread.start()
            threads.append(thread)
    with lock:
        with open(out, "wb") as f:
            pickle.dump(frames, f)


# ---------------------------------------------------------------------------------------------
# Reading the Fetch requests and answers back (the protocol package's schemas).

def _batches(records) -> tuple[list[tuple[int, int, int, int]], int]:
    """(base offset, size, record count, attributes) of each whole batch, and the bytes of a
    partial one at the end."""
    data = bytes(records or b"")
    pos, out = 0, []
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if pos + 12 + length > len(data):
            break
        attributes = struct.unpack_from(">h", data, pos + 21)[0]
        count = struct.unpack_from(">i", data, pos + 57)[0]
        out.append((base, 12 + length, count, attributes))
        pos += 12 + length
    return out, len(data) - pos


class _Reader:
    """Just enough of the flexible (v12+) Fetch layout, which the protocol package does not
    serve (minikafka answers up to v11; librdkafka asks Tansu at v16)."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def take(self, fmt: str):
        value = struct.unpack_from(">" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(">" + fmt)
        return value[0] if len(value) == 1 else value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()

    def compact_bytes(self):
        n = self.uvarint() - 1
        if n < 0:
            return None
        value = self.data[self.pos:self.pos + n]
        self.pos += n
        return value


def _flexible_request(frame: bytes) -> dict:
    r = _Reader(frame, 8)
    (n,) = struct.unpack_from(">h", frame, 8)
    r.pos = 10 + max(n, 0)
    r.tags()
    version = struct.unpack_from(">h", frame, 2)[0]
    body = {}
    if version < 15:
        body["replica_id"] = r.take("i")
    body["max_wait_ms"], body["min_bytes"], body["max_bytes"] = r.take("iii")
    body["isolation_level"], body["session_id"], body["session_epoch"] = r.take("bii")
    topics = []
    for _ in range(r.uvarint() - 1):
        topic = r.take("16s") if version >= 13 else r.compact_bytes()
        parts = []
        for _ in range(r.uvarint() - 1):
            partition, _epoch, offset, _last_epoch, _log_start, max_bytes = r.take("iiqiqi")
            r.tags()
            parts.append({"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes})
        r.tags()
        topics.append({"topic": topic.hex()[:8] if version >= 13 else topic, "partitions": parts})
    body["topics"] = topics
    return body


def _flexible_response(frame: bytes) -> dict:
    r = _Reader(frame, 4)
    r.tags()
    throttle, error, session = r.take("ihi")
    responses = []
    for _ in range(r.uvarint() - 1):
        r.take("16s")
        parts = []
        for _ in range(r.uvarint() - 1):
            index, error_code, hw, lso, log_start = r.take("ihqqq")
            n = r.uvarint() - 1
            aborted = None if n < 0 else [r.take("qq") for _ in range(n) if r.tags() is None]
            preferred = r.take("i")
            records = r.compact_bytes()
            r.tags()
            parts.append({"partition_index": index, "error_code": error_code, "high_watermark": hw,
                          "last_stable_offset": lso, "log_start_offset": log_start,
                          "aborted_transactions": aborted, "preferred_read_replica": preferred, "records": records})
        r.tags()
        responses.append({"partitions": parts})
    return {"throttle_time_ms": throttle, "error_code": error, "session_id": session, "responses": responses}


def analyse(frames: list) -> dict:
    from minikafka.protocol import decode_response, parse_request

    requests = {}
    fetches = []
    for direction, conn, at, frame in frames:
        if direction == "req":
            api_key, version, corr = struct.unpack_from(">hhi", frame, 0)
            if api_key == FETCH:
                body = _flexible_request(frame) if version >= 12 else parse_request(frame).body
                requests[(conn, corr)] = (version, body, at)
        else:
            (corr,) = struct.unpack_from(">i", frame, 0)
            asked = requests.pop((conn, corr), None)
            if asked is not None:
                version, body, sent = asked
                answer = (_flexible_response(frame) if version >= 12
                          else decode_response(FETCH, version, struct.pack(">i", len(frame)) + frame))
                fetches.append((version, body, sent, at, len(frame) + 4, answer))
    return {"fetches": fetches}


def _get(obj, name, default=None):
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def report(name: str, fetches: list, count: int) -> None:
    versions = Counter(v for v, *_ in fetches)
    first = fetches[0][1] if fetches else None
    print(f"\n== {name}: {len(fetches)} Fetch answers, versions {dict(versions)}")
    if first is not None:
        parts = [(_get(t, "topic"), [(_get(p, "partition"), _get(p, "fetch_offset"), _get(p, "partition_max_bytes")) for p in _get(t, "partitions")])
                 for t in _get(first, "topics")]
        print(f"   first request: max_wait_ms {_get(first, 'max_wait_ms')} min_bytes {_get(first, 'min_bytes')} "
              f"max_bytes {_get(first, 'max_bytes')} isolation {_get(first, 'isolation_level')} "
              f"session {_get(first, 'session_id')}/{_get(first, 'session_epoch')} partitions {parts}")
    sizes, waits, per_answer_parts = [], [], Counter()
    empty = partial = 0
    batches, batch_sizes, records, codecs, partial_bytes = 0, [], [], Counter(), []
    part_bytes = []
    messages = 0
    fields = Counter()
    for version, body, sent, at, size, answer in fetches:
        sizes.append(size)
        waits.append((at - sent) * 1000)
        got = 0
        data_parts = 0
        for topic in _get(answer, "responses", None) or _get(answer, "topics", []):
            for p in _get(topic, "partitions", []):
                recs = _get(p, "records")
                whole, rest = _batches(recs)
                n = len(bytes(recs or b""))
                if n:
                    data_parts += 1
                    part_bytes.append(n)
                if rest:
                    partial += 1
                    partial_bytes.append(rest)
                for base, bsize, rc, attributes in whole:
                    batches += 1
                    batch_sizes.append(bsize)
                    records.append(rc)
                    codecs[attributes & 7] += 1
                    got += rc
                fields[("error", _get(p, "error_code"))] += 1
                aborted = _get(p, "aborted_transactions")
                fields[("aborted", "null" if aborted is None else len(aborted))] += 1
                fields[("preferred_replica", _get(p, "preferred_read_replica"))] += 1
                if got and _get(p, "high_watermark") is not None:
                    fields[("hw==lso", _get(p, "high_watermark") == _get(p, "last_stable_offset"))] += 1
                    fields[("log_start", _get(p, "log_start_offset"))] += 1
        per_answer_parts[data_parts] += 1
        messages += got
        if not got:
            empty += 1
    q = lambda xs: (f"min {min(xs):,} median {statistics.median(xs):,.0f} max {max(xs):,} sum {sum(xs):,}"
                    if xs else "-")
    print(f"   answer bytes: {q(sizes)}")
    print(f"   answers without a whole batch: {empty}; with a partial batch at a partition's end: {partial} "
          f"({q(partial_bytes)} bytes cut)")
    print(f"   partitions with data per answer: {dict(sorted(per_answer_parts.items()))}")
    print(f"   records bytes per partition answer: {q(part_bytes)}")
    print(f"   batches {batches:,}: bytes {q(batch_sizes)}; records per batch {q(records)}; codecs {dict(codecs)}")
    print(f"   records in whole batches {messages:,} ({messages / count:.2f} x the {count:,} produced)")
    print(f"   answer delay at the relay, ms: {q([round(w, 1) for w in waits])}")
    print(f"   fields: {dict(sorted(fields.items(), key=str))}")


def run(peer_name: str, count: int, settings: dict, workdir: Path, cache: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition

    peer = PEERS[peer_name](cache)
    broker_port, relay_port = free_port(), free_port()
    data = Path(tempfile.mkdtemp(prefix=f"{peer.name}-", dir=workdir))
    argv = peer.argv(broker_port, str(data))
    advertised = f"127.0.0.1:{relay_port}"
    if peer_name == "minikafka":
        argv += ["--override", f"advertised.listeners=PLAINTEXT://{advertised}"]
    elif peer_name == "tansu":
        argv[argv.index("--advertised-listener-url") + 1] = f"tcp://{advertised}"
    log = open(data / "process.log", "wb")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=peer.env)
    stop_event = multiprocessing.Event()
    out = str(data / "frames.pickle")
    relay = multiprocessing.Process(target=_relay, args=(relay_port, broker_port, out, stop_event))
    try:
        wait_for_port("127.0.0.1", broker_port, process, time.perf_counter() + 30)
        relay.start()
        wait_for_port("127.0.0.1", relay_port, process, time.perf_counter() + 30)
        bootstrap = advertised
        topic = create_topic(bootstrap, PARTITIONS)
        confluent_produce(bootstrap, topic, make_values(count, VALUE_SIZE), "none", acks=1)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", **CONSUMER_SETTINGS, **settings})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        received = 0
        deadline = time.perf_counter() + 120
        while received < count and time.perf_counter() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is None:
                    received += 1
        consumer.close()
        assert received == count, (received, count)
    finally:
        stop_event.set()
        relay.join(30)
        stop(process)
    with open(out, "rb") as f:
        frames = pickle.load(f)
    fetches = analyse(frames)["fetches"]
    # The consumer's fetches come after the produce: those that carried records of the topic.
    report(peer.name, fetches, count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="minikafka,tansu")
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a librdkafka consumer property (repeatable)")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "minikafka-bench")
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    workdir = Path(tempfile.mkdtemp(prefix="minikafka-fetch-shape-"))
    try:
        for name in [n.strip() for n in args.only.split(",") if n.strip()]:
            run(name, args.count, settings, workdir, args.cache_dir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
