"""``minikafka cluster``: a ZooKeeper and N brokers on this machine, a place to practise failures.

``minikafka cluster [up]`` starts a ZooKeeper (Debian's ``zookeeper`` package, on a free port
with its own data dir) unless ``--zookeeper HOST:PORT`` names one, then ``--brokers N``
``minikafka serve`` processes with ids 1..N on ports ``--base-port``, +1, ... (each with its own
log dir under ``--log-dir``), and prints one ready line with the bootstrap list and the address of
its control port. It stays in the foreground: a broker that dies is reported and stays dead while
the others keep serving, as a broker of a real cluster would; Ctrl-C or SIGTERM stops everything
in about a second.

From another terminal, ``minikafka cluster status|kill|stop|restart|pause|resume [ID]`` asks the
running cluster (over its control port on 127.0.0.1, one JSON object per line) to show its brokers,
controller and under-replicated partitions, or to act on one broker: ``kill`` (SIGKILL), ``stop``
(SIGTERM: a controlled shutdown), ``restart`` (start it again on its port and data dir, stopping it
first if it runs), ``pause``/``resume`` (SIGSTOP/SIGCONT) — the same faults as the pytest cluster
fixture's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

READY = re.compile(r"^minikafka ready: bootstrap\.servers=(?P<address>\S+) ")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
DEFAULT_BASE_PORT = 19092
ACTIONS = ("up", "status", "kill", "stop", "restart", "pause", "resume")
BROKER_ACTIONS = ("kill", "stop", "restart", "pause", "resume")


class ClusterError(Exception):
    """One line saying what went wrong."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "cluster", help="run a ZooKeeper and several brokers, and fail them on demand",
        description="Run a local cluster in the foreground (up, the default), or act on the running "
                    "one from another terminal: status; kill, stop, restart, pause or resume a broker.",
        epilog="examples: minikafka cluster --brokers 3 | minikafka cluster status | "
               "minikafka cluster kill 2 | minikafka cluster restart 2")
    parser.add_argument("action", nargs="?", default="up", choices=ACTIONS,
                        help="up (default): start the cluster; the others act on a running one")
    parser.add_argument("broker", nargs="?", type=int, metavar="ID",
                        help="the broker kill/stop/restart/pause/resume act on")
    parser.add_argument("--brokers", type=int, default=3, metavar="N", help="up: how many brokers (default 3)")
    parser.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT, metavar="PORT",
                        help=f"broker N listens on PORT+N-1 and the control port is PORT-1 (default "
                             f"{DEFAULT_BASE_PORT}); 0 picks free ports, printed in the ready line")
    parser.add_argument("--control", metavar="HOST:PORT",
                        help="the running cluster's control address (default: from --base-port)")
    parser.add_argument("--zookeeper", metavar="HOST:PORT", help="up: use this ZooKeeper instead of starting one")
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--log-dir", type=Path, default=Path("./minikafka-cluster-data"),
                      help="up: parent of the brokers' data dirs (default ./minikafka-cluster-data)")
    data.add_argument("--ephemeral", action="store_true", help="up: keep all data in a temporary directory")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="up: a config key for every broker (repeatable)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "up":
            if args.broker is not None:
                raise ClusterError(f"up takes no broker id (did you mean --brokers {args.broker}?)")
            return _up(args)
        if args.action in BROKER_ACTIONS and args.broker is None:
            raise ClusterError(f"{args.action} needs a broker id, e.g. minikafka cluster {args.action} 2")
        answer = _ask(_control_address(args), {"op": args.action, "broker": args.broker})
    except ClusterError as exc:
        print(f"minikafka cluster: error: {exc}", file=sys.stderr)
        return 1
    print(answer["text"])
    return 0 if answer["ok"] else 1


def _control_address(args) -> tuple[str, int]:
    if args.control:
        from minikafka.broker.blocking_client import split_address

        try:
            return split_address(args.control)
        except ValueError as exc:
            raise ClusterError(str(exc)) from None
    if args.base_port < 2:
        raise ClusterError("with --base-port 0 give --control HOST:PORT (the cluster's ready line shows it)")
    return "127.0.0.1", args.base_port - 1


def _ask(address: tuple[str, int], request: dict) -> dict:
    try:
        with socket.create_connection(address, timeout=STOP_TIMEOUT_S + 5) as sock:
            sock.sendall(json.dumps(request).encode() + b"\n")
            line = sock.makefile("rb").readline()
    except OSError as exc:
        raise ClusterError(f"no cluster answers at {address[0]}:{address[1]} ({exc.strerror or exc}); "
                           f"is `minikafka cluster` running with the same --base-port?") from None
    if not line:
        raise ClusterError(f"the cluster at {address[0]}:{address[1]} closed the connection")
    return json.loads(line)


class _Broker:
    """One broker process of the cluster, and what became of it."""

    def __init__(self, broker_id: int, port: int, log_dir: Path, command: list[str]) -> None:
        self.broker_id = broker_id
        self.port = port
        self.log_dir = log_dir
        self.command = command
        self.process: subprocess.Popen | None = None
        self.state = "stopped"  # running, paused, stopped, killed, or "exited with status N"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def launch(self) -> None:
        cmd = self.command + ["--port", str(self.port)]
        # The brokers log to this process's stderr; their ready lines come back on a pipe.
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)

    def wait_ready(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                self.process.wait()
                self.state = f"exited with status {self.process.returncode}"
                raise ClusterError(f"broker {self.broker_id} exited with status {self.process.returncode} "
                                   f"before it was ready (is port {self.port} free?)")
            match = READY.match(line.strip())
            if match:
                self.port = int(match["address"].rpartition(":")[2])
                self.state = "running"
                # Nothing else comes on stdout; a thread drains it so a chatty broker never blocks.
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
                return
        self.process.kill()
        raise ClusterError(f"broker {self.broker_id} was not ready within {START_TIMEOUT_S:.0f} s")

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, signum)
            except ProcessLookupError:
                pass

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def reap(self, timeout: float) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Cluster:
    """The running cluster: starts brokers, acts on them on request, watches for deaths."""

    def __init__(self, brokers: list[_Broker], zookeeper_connect: str) -> None:
        self.brokers = {broker.broker_id: broker for broker in brokers}
        self.zookeeper_connect = zookeeper_connect
        self.lock = threading.Lock()

    def start_all(self) -> None:
        for broker in self.brokers.values():
            broker.launch()
        for broker in self.brokers.values():
            broker.wait_ready()

    def handle(self, request: dict) -> dict:
        op, broker_id = request.get("op"), request.get("broker")
        if op == "status":
            return {"ok": True, "text": self.status()}
        broker = self.brokers.get(broker_id)
        if broker is None:
            return {"ok": False, "text": f"minikafka cluster: error: no broker {broker_id} "
                                         f"(brokers: {', '.join(map(str, self.brokers))})"}
        if op not in BROKER_ACTIONS:
            return {"ok": False, "text": f"minikafka cluster: error: unknown action {op!r}"}
        with self.lock:
            try:
                return {"ok": True, "text": getattr(self, f"_{op}")(broker)}
            except ClusterError as exc:
                return {"ok": False, "text": f"minikafka cluster: error: {exc}"}

    def _kill(self, broker: _Broker) -> str:
        self._require_alive(broker, "kill")
        broker.signal(signal.SIGKILL)
        broker.reap(STOP_TIMEOUT_S)
        broker.state = "killed"
        return (f"broker {broker.broker_id} killed (SIGKILL): its leaderships move once ZooKeeper expires its "
                f"session (zookeeper.session.timeout.ms); `minikafka cluster restart {broker.broker_id}` starts it again")

    def _stop(self, broker: _Broker) -> str:
        self._require_alive(broker, "stop")
        broker.signal(signal.SIGCONT)
        broker.signal(signal.SIGTERM)  # a controlled shutdown: its leaderships move first
        broker.reap(STOP_TIMEOUT_S)
        broker.state = "stopped"
        return f"broker {broker.broker_id} stopped (controlled shutdown)"

    def _restart(self, broker: _Broker) -> str:
        if broker.alive():
            self._stop(broker)
        broker.launch()
        broker.wait_ready()
        return f"broker {broker.broker_id} running again on {broker.address}"

    def _pause(self, broker: _Broker) -> str:
        self._require_alive(broker, "pause")
        broker.signal(signal.SIGSTOP)
        broker.state = "paused"
        return f"broker {broker.broker_id} paused (SIGSTOP): connected clients wait, its ZooKeeper session expires"

    def _resume(self, broker: _Broker) -> str:
        if broker.state != "paused":
            raise ClusterError(f"broker {broker.broker_id} is {broker.state}, not paused")
        broker.signal(signal.SIGCONT)
        broker.state = "running"
        return f"broker {broker.broker_id} resumed"

    @staticmethod
    def _require_alive(broker: _Broker, action: str) -> None:
        if not broker.alive():
            raise ClusterError(f"cannot {action} broker {broker.broker_id}: it is {broker.state}")

    def reap_deaths(self) -> None:
        """Report each broker that died without being told to; the others keep serving."""
        with self.lock:
            for broker in self.brokers.values():
                if broker.state in ("running", "paused") and not broker.alive():
                    broker.state = f"exited with status {broker.process.returncode}"
                    print(f"minikafka cluster: broker {broker.broker_id} {broker.state}; the others keep "
                          f"serving (`minikafka cluster restart {broker.broker_id}` starts it again)",
                          file=sys.stderr, flush=True)

    def status(self) -> str:
        from minikafka.broker.blocking_client import kafka_request
        from minikafka.protocol.apis import ApiKey

        lines, metadata = [], None
        with self.lock:
            for broker in self.brokers.values():
                pid = f"pid {broker.process.pid}" if broker.alive() else ""
                lines.append(f"broker {broker.broker_id}  {broker.address:<16} {broker.state:<10} {pid}".rstrip())
            reachable = [b.address for b in self.brokers.values() if b.state == "running"]
        for address in reachable:
            try:
                metadata = kafka_request(address, ApiKey.METADATA, 1, {"topics": None}, timeout=5.0,
                                         client_id="minikafka-cluster")
                break
            except Exception:  # noqa: BLE001 - a broker going down as we ask: try the next
                continue
        lines.append(f"zookeeper.connect={self.zookeeper_connect}")
        if metadata is None:
            lines.append("controller: unknown (no running broker answered)")
            return "\n".join(lines)
        lines.append(f"controller: broker {metadata.controller_id}" if metadata.controller_id >= 0
                     else "controller: none")
        under = [f"{topic.name}-{p.partition_index} (replicas {_ids(p.replica_nodes)}, isr {_ids(p.isr_nodes)}, "
                 f"leader {p.leader_id})"
                 for topic in sorted(metadata.topics, key=lambda t: t.name)
                 for p in sorted(topic.partitions, key=lambda p: p.partition_index)
                 if len(p.isr_nodes) < len(p.replica_nodes)]
        lines.append(f"under-replicated partitions: {len(under)}")
        lines.extend(f"  {entry}" for entry in under)
        return "\n".join(lines)

    def shutdown(self) -> None:
        """Stop every broker at once: a second signal makes each skip the controlled shutdown
        (there is nobody left to take its leaderships) but still close its logs cleanly. It is
        SIGINT after SIGTERM, not SIGTERM twice: a signal still pending when the same one
        arrives again counts once."""
        live = [broker for broker in self.brokers.values() if broker.alive()]
        for broker in live:
            broker.signal(signal.SIGCONT)
            broker.signal(signal.SIGTERM)
        for broker in live:
            broker.signal(signal.SIGINT)
        for broker in live:
            broker.reap(STOP_TIMEOUT_S)


def _ids(nodes) -> str:
    return ",".join(map(str, nodes))


class _ControlServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _control_server(cluster: _Cluster, port: int) -> _ControlServer:
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline()
            try:
                request = json.loads(line)
            except ValueError:
                answer = {"ok": False, "text": "minikafka cluster: error: not a JSON request"}
            else:
                answer = cluster.handle(request)
            self.wfile.write(json.dumps(answer).encode() + b"\n")

    try:
        return _ControlServer(("127.0.0.1", port), Handler)
    except OSError as exc:
        raise ClusterError(f"control port 127.0.0.1:{port}: {exc.strerror or exc} "
                           f"(another cluster running? pick another --base-port)") from None


def _up(args) -> int:
    if args.brokers < 1:
        raise ClusterError("--brokers must be at least 1")
    if args.base_port and not 2 <= args.base_port <= 65536 - args.brokers:
        raise ClusterError(f"--base-port {args.base_port} leaves no room for {args.brokers} brokers and the control port")
    base = Path(tempfile.mkdtemp(prefix="minikafka-cluster-")) if args.ephemeral else args.log_dir
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    zookeeper = control = None
    cluster = _Cluster([], "")
    try:
        base.mkdir(parents=True, exist_ok=True)
        # Bound first, so a second cluster on the same ports is refused before it starts anything.
        control = _control_server(cluster, args.base_port - 1 if args.base_port else 0)
        connect = args.zookeeper
        if connect is None:
            from minikafka.replication.zk_server import ZooKeeperNotInstalled, ZooKeeperServer, ZooKeeperStartError

            zookeeper = ZooKeeperServer(base / "zookeeper")
            try:
                zookeeper.start()
            except (ZooKeeperNotInstalled, ZooKeeperStartError) as exc:
                raise ClusterError(str(exc).splitlines()[0]) from None
            connect = zookeeper.connect_string + "/minikafka"
        elif "/" not in connect:
            connect += f"/minikafka-{uuid.uuid4().hex[:8]}" if args.ephemeral else ""
        cluster.zookeeper_connect = connect
        for broker_id in range(1, args.brokers + 1):
            command = [sys.executable, "-m", "minikafka.broker", "serve", "--log-dir", str(base / f"broker-{broker_id}"),
                       "--zookeeper", connect, "--broker-id", str(broker_id)]
            for override in args.override:
                command += ["--override", override]
            port = args.base_port + broker_id - 1 if args.base_port else 0
            cluster.brokers[broker_id] = _Broker(broker_id, port, base / f"broker-{broker_id}", command)
        cluster.start_all()
        threading.Thread(target=control.serve_forever, daemon=True).start()
        control_host, control_port = control.server_address[:2]
        print(f"minikafka cluster ready: bootstrap.servers={','.join(b.address for b in cluster.brokers.values())} "
              f"zookeeper.connect={connect} control={control_host}:{control_port}", flush=True)
        while not stop.wait(0.2):
            cluster.reap_deaths()
        return 0
    finally:
        if control is not None:
            control.server_close()
        cluster.shutdown()
        if zookeeper is not None:
            zookeeper.stop()
        if args.ephemeral:
            shutil.rmtree(base, ignore_errors=True)
