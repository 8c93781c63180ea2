"""What cluster mode pays for ZooKeeper: server start-up, a session, requests through trio.

    python3 bench/bench_zookeeper.py            # 2000 requests of each kind
    python3 bench/bench_zookeeper.py --quick    # 200

Starts a private ZooKeeperServer (Debian's 3.8, the JVM), opens a ZkClient, then times, one
request at a time: creates, gets, conditional sets, and a broker registration plus
live_brokers() read; and how long a change takes to come back as a watch event. Each figure
is the median of the run and the 99th percentile, in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from minikafka.replication.kafka_zk import BrokerInfo, KafkaZk
from minikafka.replication.zk_server import ZooKeeperServer
from minikafka.replication.zookeeper import ZkClient


def _report(name: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"{name:<32} median {statistics.median(ordered) * 1000:7.2f} ms   p99 {p99 * 1000:7.2f} ms"
          f"   ({len(ordered)} samples)")


async def _timed(samples: list[float], coroutine) -> None:
    started = time.perf_counter()
    await coroutine
    samples.append(time.perf_counter() - started)


async def _run(connect: str, count: int) -> None:
    started = time.perf_counter()
    zk = ZkClient(connect + "/bench")
    await zk.start()
    print(f"{'ZkClient.start (with chroot)':<32} {(time.perf_counter() - started) * 1000:7.1f} ms")
    try:
        creates, gets, sets = [], [], []
        for i in range(count):
            await _timed(creates, zk.create(f"/n/{i}", b"x" * 100))
        for i in range(count):
            await _timed(gets, zk.get(f"/n/{i}"))
        for i in range(count):
            await _timed(sets, zk.set(f"/n/{i}", b"y" * 100, version=0))
        _report("create", creates)
        _report("get", gets)
        _report("set (conditional)", sets)

        kafka = KafkaZk(zk)
        registrations = []
        for i in range(min(count, 200)):
            info = BrokerInfo(i, "127.0.0.1", 9000 + i, {"PLAINTEXT": ("127.0.0.1", 9000 + i)})
            await _timed(registrations, kafka.register_broker(info, wait_ms=0))
        _report("register_broker", registrations)
        reads = []
        for _ in range(20):
            await _timed(reads, kafka.live_brokers())
        _report(f"live_brokers ({len(registrations)} brokers)", reads)

        await zk.watch_data("/watched")
        await zk.events.receive()  # "connected"
        await zk.events.receive()  # the watch's first report
        round_trips = []
        for i in range(min(count, 500)):
            started = time.perf_counter()
            if i == 0:
                await zk.create("/watched", b"0")
            else:
                await zk.set("/watched", str(i).encode())
            while (await zk.events.receive()).data != str(i).encode():
                pass
            round_trips.append(time.perf_counter() - started)
        _report("write → watch event", round_trips)
    finally:
        await zk.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 requests of each kind")
    args = parser.parse_args(argv)
    count = 200 if args.quick else 2000
    with tempfile.TemporaryDirectory(prefix="bench-zk-") as data_dir:
        server = ZooKeeperServer(Path(data_dir))
        started = time.perf_counter()
        with server:
            print(f"{'ZooKeeperServer.start':<32} {(time.perf_counter() - started) * 1000:7.1f} ms")
            trio.run(_run, server.connect_string, count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
