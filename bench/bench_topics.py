"""Topic creation: partitions/s for one big CreateTopics, and how the broker answers meanwhile.

    python3 bench/bench_topics.py                       # 5,000 partitions, 4 Metadata clients
    python3 bench/bench_topics.py --partitions 2000     # any number
    python3 bench/bench_topics.py --metadata-clients 0  # no other load
    python3 bench/bench_topics.py --then-topics 500     # then 500 small topics beside the big one

Against a real ``minikafka serve`` process (data directory under ``--dir``, default a fresh
temporary directory, removed at the end): one connection sends CreateTopics for a topic of N
partitions while ``--metadata-clients`` other connections (default 4) each send a Metadata
request for another, existing topic, wait for the answer, then pause ``--metadata-interval-ms``
(default 10 ms): 400 requests/s in all, far more than clients send (a producer or consumer
refreshes metadata every ``metadata.max.age.ms``, 5 minutes, or ``retry.backoff.ms``, 100 ms,
apart while it waits for a topic), but not a tight loop that would starve the broker of
anything else to do. Printed: the creation rate (partitions / seconds until the CreateTopics
response), the Metadata answers received during it, their median and slowest. A broker that
stops serving while it creates shows as a slowest answer close to the whole creation time.
``--then-topics M`` then creates M one-partition topics, one CreateTopics each, beside the N
partitions (the Metadata clients stopped), and prints their median and slowest creation: a
cost that grows with the partitions a broker already holds shows there.

Creating files is what a new partition costs, and its speed swings widely, so the same run
first measures a reference on the same filesystem with no broker: N directories, each with
five empty files, made by a plain Python loop (the time per file creation is printed too).
On a filesystem without a journal (ext4 as mounted on the development machines) a new inode
is found by scanning past every inode deleted in the last one to six minutes, so creations
right after a large deletion, by anyone on the machine, are many times slower (0.3 to 0.6 ms
instead of 15 us): runs back to back slow each other down through the previous run's
clean-up. The reference directory is removed only at the end for the same reason.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.framing import ClientConnection
from minikafka.testing import MinikafkaBroker


class Client:
    """One blocking connection speaking the protocol with this repository's codecs."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.conn = ClientConnection("bench-topics")

    def request(self, api_key: int, version: int, body):
        _, frame = self.conn.send_request(api_key, version, body)
        self.sock.sendall(frame)
        while (response := self.conn.next_response()) is None:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.conn.receive_data(data)
        return response.body

    def close(self) -> None:
        self.sock.close()


def create_topic(client: Client, name: str, partitions: int):
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []}], "timeout_ms": 600_000}
    (result,) = client.request(ApiKey.CREATE_TOPICS, 1, body).topics
    return result


def reference(work: Path, partitions: int) -> tuple[float, float]:
    """Directories/s and seconds per file of bare creation: mkdir and five empty files each.
    Left in place until the end: deleting them now would slow the broker's creations."""
    root = work / "reference"
    root.mkdir(parents=True)
    start = time.perf_counter()
    for p in range(partitions):
        directory = root / f"t-{p}"
        directory.mkdir()
        for name in ("00000000000000000000.log", "00000000000000000000.index",
                     "00000000000000000000.timeindex", "partition.metadata", "leader-epoch-checkpoint"):
            open(directory / name, "wb").close()
    elapsed = time.perf_counter() - start
    return partitions / elapsed, elapsed / (partitions * 6)


def probe(bootstrap: str, interval: float, done: threading.Event, latencies: list[float]) -> None:
    """Metadata for the existing topic, one request at a time, ``interval`` apart, until ``done``."""
    client = Client(bootstrap)
    try:
        while not done.is_set():
            sent = time.perf_counter()
            body = client.request(ApiKey.METADATA, 1, {"topics": [{"name": "probe"}]})
            latencies.append(time.perf_counter() - sent)
            assert body.topics[0].error_code == 0
            done.wait(interval)
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--dir", type=Path, help="work directory (default: a new temporary one, removed at the end)")
    parser.add_argument("--metadata-clients", type=int, default=4)
    parser.add_argument("--metadata-interval-ms", type=float, default=10.0)
    parser.add_argument("--then-topics", type=int, default=0)
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-topics-"))
    try:
        bare, per_file = reference(work, args.partitions)
        elapsed, result, latencies, small = run(work, args)
    finally:
        shutil.rmtree(work / "reference", ignore_errors=True)
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if result.error_code:
        raise SystemExit(f"CreateTopics failed: error {result.error_code}: {result.error_message}")
    rate = args.partitions / elapsed
    print(f"created {args.partitions:,} partitions in {elapsed:.2f} s: {rate:,.0f} partitions/s "
          f"(reference on this filesystem: {bare:,.0f} directories of five files/s, "
          f"{per_file * 1e6:.0f} us per file creation)")
    if args.metadata_clients:
        ordered = sorted(latencies) or [float("nan")]
        print(f"{args.metadata_clients} Metadata clients, one request each every {args.metadata_interval_ms:g} ms: "
              f"answered {len(latencies)} times meanwhile ({len(latencies) / elapsed:,.0f}/s); "
              f"median {ordered[len(ordered) // 2] * 1000:.1f} ms, slowest {ordered[-1] * 1000:.1f} ms")
    else:
        print("no Metadata load")
    if small:
        small.sort()
        print(f"then {len(small):,} one-partition topics, one CreateTopics each: median "
              f"{small[len(small) // 2] * 1000:.2f} ms, slowest {small[-1] * 1000:.1f} ms")


def run(work: Path, args) -> tuple[float, object, list[float], list[float]]:
    with MinikafkaBroker(work) as broker:
        admin = Client(broker.bootstrap)
        assert create_topic(admin, "probe", 1).error_code == 0
        latencies: list[float] = []
        done = threading.Event()
        threads = [threading.Thread(target=probe, daemon=True,
                                    args=(broker.bootstrap, args.metadata_interval_ms / 1000, done, latencies))
                   for _ in range(args.metadata_clients)]
        for thread in threads:
            thread.start()
        time.sleep(0.2)  # every client connected and asking
        latencies.clear()
        start = time.perf_counter()
        result = create_topic(admin, "big", args.partitions)
        elapsed = time.perf_counter() - start
        answered = list(latencies)
        done.set()
        for thread in threads:
            thread.join(timeout=60)
        small: list[float] = []
        for i in range(args.then_topics):
            sent = time.perf_counter()
            assert create_topic(admin, f"small-{i}", 1).error_code == 0
            small.append(time.perf_counter() - sent)
        admin.close()
    return elapsed, result, answered, small


if __name__ == "__main__":
    main()
