"""Topic creation: partitions/s for one big CreateTopics, and how the broker answers meanwhile.

    python3 bench/bench_topics.py                     # 5,000 partitions
    python3 bench/bench_topics.py --partitions 2000   # any number

Against a real ``minikafka serve`` process (data directory under ``--dir``, default a fresh
temporary directory; the disk's fsync speed matters): one connection sends CreateTopics for a
topic of N partitions while a second connection keeps sending Metadata requests for another,
existing topic, one at a time. Printed: the creation rate (partitions / seconds until the
CreateTopics response), the number of Metadata answers received during it, and the slowest of
them. A broker that stops serving while it creates shows as a slowest answer close to the whole
creation time.

Creating files is what a new partition costs, and on a shared disk its speed swings widely, so
the same run first measures a ceiling on the same filesystem with no broker: N directories,
each with the five files a new partition holds (segment, two indexes, topic id, leader epochs),
made by a plain Python loop.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

from minikafka.broker.pytest_plugin import MinikafkaBroker
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.framing import ClientConnection


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


def ceiling(work: Path, partitions: int) -> float:
    """Partitions/s of bare file creation: mkdir and five empty files per directory."""
    root = work / "ceiling"
    root.mkdir(parents=True)
    start = time.perf_counter()
    for p in range(partitions):
        directory = root / f"t-{p}"
        directory.mkdir()
        for name in ("00000000000000000000.log", "00000000000000000000.index",
                     "00000000000000000000.timeindex", "partition.metadata", "leader-epoch-checkpoint"):
            open(directory / name, "wb").close()
    elapsed = time.perf_counter() - start
    shutil.rmtree(root)
    return partitions / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--dir", type=Path, help="work directory (default: a new temporary one)")
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-topics-"))
    bare = ceiling(work, args.partitions)
    with MinikafkaBroker(work) as broker:
        admin, prober = Client(broker.bootstrap), Client(broker.bootstrap)
        assert create_topic(admin, "probe", 1).error_code == 0
        latencies: list[float] = []
        done = threading.Event()

        def probe() -> None:
            while not done.is_set():
                sent = time.perf_counter()
                body = prober.request(ApiKey.METADATA, 1, {"topics": [{"name": "probe"}]})
                latencies.append(time.perf_counter() - sent)
                assert body.topics[0].error_code == 0
                time.sleep(0.01)

        thread = threading.Thread(target=probe, daemon=True)
        thread.start()
        start = time.perf_counter()
        result = create_topic(admin, "big", args.partitions)
        elapsed = time.perf_counter() - start
        done.set()
        thread.join(timeout=60)
        admin.close()
        prober.close()
    if result.error_code:
        raise SystemExit(f"CreateTopics failed: error {result.error_code}: {result.error_message}")
    rate = args.partitions / elapsed
    print(f"created {args.partitions:,} partitions in {elapsed:.2f} s: {rate:,.0f} partitions/s "
          f"(ceiling on this filesystem: {bare:,.0f}/s; ratio {rate / bare:.2f})")
    print(f"Metadata answered {len(latencies)} times meanwhile; slowest {max(latencies) * 1000:.1f} ms, "
          f"median {sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
