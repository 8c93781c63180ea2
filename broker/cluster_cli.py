"""``minikafka cluster``: a ZooKeeper and N brokers on this machine, in the foreground.

Starts a ZooKeeper (Debian's ``zookeeper`` package, on a free port with its own data dir)
unless ``--zookeeper HOST:PORT`` names one, then ``--brokers N`` ``minikafka serve``
processes with ids 1..N, each with its own log dir under ``--log-dir`` and a free port,
prints one ready line with the bootstrap list, and on Ctrl-C or SIGTERM stops the brokers
(each one a controlled shutdown) and the ZooKeeper it started.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

READY = re.compile(r"^minikafka ready: bootstrap\.servers=(?P<address>\S+) ")
START_TIMEOUT_S = 60.0


class ClusterStartError(Exception):
    """One line saying what did not start."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "cluster", help="run a ZooKeeper and several brokers in the foreground",
        description="Run a local cluster: a ZooKeeper (unless --zookeeper) and --brokers brokers.")
    parser.add_argument("--brokers", type=int, default=3, metavar="N", help="how many brokers (default 3)")
    parser.add_argument("--zookeeper", metavar="HOST:PORT", help="use this ZooKeeper instead of starting one")
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--log-dir", type=Path, default=Path("./minikafka-cluster-data"),
                      help="parent of the brokers' data dirs (default ./minikafka-cluster-data)")
    data.add_argument("--ephemeral", action="store_true", help="keep all data in a temporary directory")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a config key for every broker (repeatable)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        print("minikafka: --brokers must be at least 1", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="minikafka-cluster-")) if args.ephemeral else args.log_dir
    zookeeper = None
    brokers: list[subprocess.Popen] = []
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        base.mkdir(parents=True, exist_ok=True)
        connect = args.zookeeper
        if connect is None:
            from minikafka.replication.zk_server import ZooKeeperNotInstalled, ZooKeeperServer, ZooKeeperStartError

            zookeeper = ZooKeeperServer(base / "zookeeper")
            try:
                zookeeper.start()
            except (ZooKeeperNotInstalled, ZooKeeperStartError) as exc:
                raise ClusterStartError(str(exc).splitlines()[0]) from None
            connect = zookeeper.connect_string + "/minikafka"
        elif "/" not in connect:
            connect += f"/minikafka-{uuid.uuid4().hex[:8]}" if args.ephemeral else ""
        addresses = []
        for broker_id in range(1, args.brokers + 1):
            process, address = _start_broker(base, broker_id, connect, args.override)
            brokers.append(process)
            addresses.append(address)
        print(f"minikafka cluster ready: bootstrap.servers={','.join(addresses)} zookeeper.connect={connect}",
              flush=True)
        while not stop.wait(0.2):
            for broker_id, process in enumerate(brokers, 1):
                if process.poll() is not None:
                    raise ClusterStartError(f"broker {broker_id} exited with status {process.returncode}")
        return 0
    except ClusterStartError as exc:
        print(f"minikafka: {exc}", file=sys.stderr)
        return 1
    finally:
        for process in brokers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in brokers:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if zookeeper is not None:
            zookeeper.stop()
        if args.ephemeral:
            shutil.rmtree(base, ignore_errors=True)


def _start_broker(base: Path, broker_id: int, connect: str, overrides: list[str]) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "minikafka.broker", "serve", "--port", "0", "--log-dir",
           str(base / f"broker-{broker_id}"), "--zookeeper", connect, "--broker-id", str(broker_id)]
    for override in overrides:
        cmd += ["--override", override]
    # The brokers log to this process's stderr; their ready lines come back on a pipe.
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            process.wait()
            raise ClusterStartError(f"broker {broker_id} exited with status {process.returncode} before it was ready")
        match = READY.match(line.strip())
        if match:
            return process, match["address"]
    process.kill()
    raise ClusterStartError(f"broker {broker_id} was not ready within {START_TIMEOUT_S:.0f} s")
