"""pytest fixtures that run a real minikafka broker for the duration of a test.

Installed with minikafka (entry point ``pytest11: minikafka``), so any project that has
minikafka installed gets them without a ``conftest.py``::

    def test_roundtrip(minikafka_broker):
        producer = KafkaProducer(bootstrap_servers=minikafka_broker.bootstrap)
        ...

    def test_small_messages(minikafka_broker_factory):
        broker = minikafka_broker_factory(**{"message.max.bytes": "2000"})

Each broker is a separate ``minikafka serve --port 0`` process with its own data directory
(a fresh directory from pytest's ``tmp_path_factory``), so tests never share state and the
broker is exercised exactly as a user runs it. The process is always reaped, and when a test fails the broker's stderr is
attached to the failure report.

``MinikafkaBroker`` is also usable directly (it is a context manager) for fixtures of wider
scope, e.g. one broker per module.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

__all__ = ["MinikafkaBroker", "MinikafkaCluster", "BrokerStartError", "BrokerCrashed", "kafka_request"]

READY_LINE = re.compile(r"^minikafka ready: bootstrap\.servers=(?P<host>\S+):(?P<port>\d+) log\.dirs=(?P<log_dirs>.+)$")

# The broker is started through its console-script entry point (minikafka.broker.cli:main),
# run by the same interpreter as the tests (so the same minikafka install: a wheel, or
# `pip install -e .`), which works without the `minikafka` script on PATH.
_LAUNCHER = "import sys; from minikafka.broker.cli import main; sys.exit(main())"

_LIVE_BROKERS: list["MinikafkaBroker"] = []


class BrokerStartError(RuntimeError):
    """The broker process exited or stayed silent before printing its ready line."""


class BrokerCrashed(RuntimeError):
    """The broker process exited while running without being told to stop."""


class MinikafkaBroker:
    """One ``minikafka serve`` subprocess with a data directory that outlives restarts.

    ``bootstrap`` is ``"127.0.0.1:PORT"``; ``log_dir`` is the broker's data directory.
    ``stop()`` sends SIGTERM (clean shutdown), ``kill()`` SIGKILL (no shutdown at all);
    ``restart()`` starts the process again on the same data directory and, if it is still free,
    the same port, so connected clients find it again. The process's stdout and stderr go to
    files next to the data directory (``stdout_path``, ``stderr_path``; ``stderr_since_start()``
    is the latest process's share).

    A process that exits without being told to is a crash: its status is kept in
    ``unexpected_exits`` and ``close()`` raises ``BrokerCrashed`` after cleaning up, so a test
    whose broker died fails even if the test itself did not notice.
    """

    def __init__(
        self,
        work_dir: Path | str | None = None,
        overrides: dict[str, str] | None = None,
        *,
        host: str = "127.0.0.1",
        start_timeout: float = 30.0,
        stop_timeout: float = 15.0,
    ) -> None:
        self._own_work_dir = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix="minikafka-")) if work_dir is None else Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.work_dir / "data"
        self.stdout_path = self.work_dir / "broker.stdout"
        self.stderr_path = self.work_dir / "broker.stderr"
        self.overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        self.host = host
        self.port = 0
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self._start_of_stderr = 0
        self.unexpected_exits: list[int] = []

    @property
    def bootstrap(self) -> str:
        from minikafka.broker.config import host_port  # here: loading the plugin stays cheap

        return host_port(self.host, self.port)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def command(self, port: int) -> list[str]:
        cmd = [sys.executable, "-c", _LAUNCHER, "serve",
               "--host", self.host, "--port", str(port), "--log-dir", str(self.log_dir)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> "MinikafkaBroker":
        """Start the process and block until it prints its ready line."""
        if self.running:
            raise RuntimeError("minikafka broker is already running")
        self._note_crash()
        if self.port:
            try:
                self._spawn(self.port)
                return self
            except BrokerStartError:
                # The old port was taken in the meantime; any free one will do.
                pass
        self._spawn(0)
        return self

    def _spawn(self, port: int) -> None:
        self.starts += 1
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            start_of_stdout = out.tell()
            self._start_of_stderr = err.tell()
            err.write(f"--- minikafka start #{self.starts}: {' '.join(self.command(port))}\n".encode())
            err.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self.process = subprocess.Popen(
                self.command(port), stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                cwd=self.work_dir,
            )
        _LIVE_BROKERS.append(self)
        deadline = time.monotonic() + self.start_timeout
        while True:
            match = self._ready_match(start_of_stdout)
            if match:
                self.port = int(match["port"])
                return
            if self.process.poll() is not None:
                self._reap()
                raise BrokerStartError(
                    f"minikafka exited with status {self.process.returncode} before it was ready:\n"
                    + self.stderr_tail())
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerStartError(
                    f"minikafka printed no ready line within {self.start_timeout}s:\n" + self.stderr_tail())
            time.sleep(0.01)

    def _ready_match(self, start: int) -> re.Match | None:
        with open(self.stdout_path, "rb") as out:
            out.seek(start)
            for line in out.read().decode(errors="replace").splitlines():
                match = READY_LINE.match(line.strip())
                if match:
                    return match
        return None

    def stop(self) -> int | None:
        """SIGTERM and wait for a clean shutdown (SIGKILL after ``stop_timeout``)."""
        if self.process is None:
            return None
        self._note_crash()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self._reap()

    def kill(self) -> int | None:
        """SIGKILL: the broker gets no chance to flush, checkpoint or mark a clean shutdown."""
        if self.process is None:
            return None
        self._note_crash()
        if self.process.poll() is None:
            self.process.kill()
        return self._reap()

    def restart(self, *, clean: bool = True) -> "MinikafkaBroker":
        """Stop (SIGTERM, or SIGKILL when ``clean=False``) and start on the same data dir."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()

    def _note_crash(self) -> None:
        """Record and reap a started process that has exited without being asked to."""
        if self.process is not None and self in _LIVE_BROKERS and self.process.poll() is not None:
            self.unexpected_exits.append(self.process.returncode)
            self._reap()

    def _reap(self) -> int | None:
        returncode = self.process.wait() if self.process is not None else None
        if self in _LIVE_BROKERS:
            _LIVE_BROKERS.remove(self)
        return returncode

    def stderr_since_start(self) -> str:
        """What the latest started process wrote on stderr (its log) so far."""
        with open(self.stderr_path, "rb") as err:
            err.seek(self._start_of_stderr)
            return err.read().decode(errors="replace")

    def stderr_tail(self, max_chars: int = 20000) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text[-max_chars:]

    def close(self) -> None:
        """Stop the process and, if this object created it, remove the work directory.
        Raises ``BrokerCrashed`` if the process ever exited on its own."""
        try:
            self.stop()
            crash_report = self.stderr_tail() if self.unexpected_exits else ""
        finally:
            if self._own_work_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)
        if self.unexpected_exits:
            raise BrokerCrashed(
                f"minikafka exited on its own (status {', '.join(map(str, self.unexpected_exits))}):\n"
                + crash_report)

    def __enter__(self) -> "MinikafkaBroker":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<MinikafkaBroker {self.bootstrap} {state} log_dir={self.log_dir}>"


def kafka_request(bootstrap: str, api_key: int, version: int, body: dict, timeout: float = 10.0):
    """One request to a broker over a plain blocking socket (the protocol layer's client side),
    for fixtures that read the cluster's own view of itself."""
    import socket

    from minikafka.protocol.framing import ClientConnection

    host, _, port = bootstrap.rpartition(":")
    conn = ClientConnection(client_id="minikafka-pytest")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
        _, frame = conn.send_request(api_key, version, body)
        sock.sendall(frame)
        while True:
            response = conn.next_response()
            if response is not None:
                return response.body
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError(f"{bootstrap} closed the connection")
            conn.receive_data(data)


class MinikafkaCluster:
    """A ZooKeeper and ``brokers`` minikafka processes forming one cluster (broker ids 1..N).

    ``zookeeper`` is a connect string of a ZooKeeper to use (a fresh chroot is taken in it);
    without one the cluster starts its own (Debian's ``zookeeper`` package). ``bootstrap``
    lists every broker; ``brokers[i]`` are :class:`MinikafkaBroker` objects (``broker(id)``
    by id); ``leader(topic, partition)`` and ``controller()`` ask the cluster itself.
    """

    def __init__(self, work_dir: Path | str, brokers: int = 3, overrides: dict[str, str] | None = None, *,
                 zookeeper: str | None = None, start_timeout: float = 60.0) -> None:
        import uuid

        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._own_zookeeper = None
        if zookeeper is None:
            from minikafka.replication.zk_server import ZooKeeperServer

            self._own_zookeeper = ZooKeeperServer(self.work_dir / "zookeeper")
        self._zookeeper_base = zookeeper
        self.chroot = f"/minikafka-{uuid.uuid4().hex[:12]}"
        self.overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        self.size = brokers
        self.start_timeout = start_timeout
        self.brokers: list[MinikafkaBroker] = []

    @property
    def zookeeper_connect(self) -> str:
        base = self._own_zookeeper.connect_string if self._own_zookeeper is not None else self._zookeeper_base
        return base + self.chroot

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.running)

    def broker(self, broker_id: int) -> MinikafkaBroker:
        return self.brokers[broker_id - 1]

    def start(self) -> "MinikafkaCluster":
        if self._own_zookeeper is not None and self._own_zookeeper.process is None:
            self._own_zookeeper.start()
        if not self.brokers:
            for broker_id in range(1, self.size + 1):
                overrides = {"zookeeper.connect": self.zookeeper_connect, "broker.id": str(broker_id),
                             "zookeeper.session.timeout.ms": "4000",
                             "controlled.shutdown.retry.backoff.ms": "500", **self.overrides}
                self.brokers.append(MinikafkaBroker(self.work_dir / f"broker-{broker_id}", overrides,
                                                    start_timeout=self.start_timeout))
        for broker in self.brokers:
            if not broker.running:
                broker.start()
        self.wait_until(lambda m: len(m.brokers) == self.size, "every broker registered")
        return self

    def metadata(self, topics: list[str] | None = None, *, via: MinikafkaBroker | None = None):
        """A Metadata v1 answer from ``via`` (default: the first running broker)."""
        from minikafka.protocol.apis import ApiKey

        target = via or next(b for b in self.brokers if b.running)
        body = {"topics": None if topics is None else [{"name": t} for t in topics]}
        return kafka_request(target.bootstrap, ApiKey.METADATA, 1, body)

    def wait_until(self, condition, what: str, timeout: float = 30.0, *, via: MinikafkaBroker | None = None):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                metadata = self.metadata(via=via)
                if condition(metadata):
                    return metadata
            except OSError as exc:
                last_error = exc
            time.sleep(0.05)
        raise TimeoutError(f"cluster: not {what} within {timeout} s ({last_error or 'condition false'})")

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader id as the cluster reports it (-1: none)."""
        for entry in self.metadata([topic]).topics:
            for p in entry.partitions:
                if p.partition_index == partition:
                    return p.leader_id
        raise KeyError(f"{topic}-{partition} is not in the cluster's metadata")

    def controller(self) -> int:
        return self.metadata().controller_id

    def close(self) -> None:
        crashes = []
        try:
            for broker in self.brokers:
                try:
                    broker.close()
                except BrokerCrashed as crash:
                    crashes.append(crash)
        finally:
            if self._own_zookeeper is not None:
                self._own_zookeeper.stop()
        if crashes:
            raise crashes[0]

    def __enter__(self) -> "MinikafkaCluster":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc_info) -> None:
        self.close()


@pytest.fixture
def minikafka_broker_factory(tmp_path_factory):
    """Factory: ``minikafka_broker_factory(**{"message.max.bytes": "2000"})`` -> started broker.

    Keyword arguments are Kafka broker config names with string values; every broker made is
    stopped when the test ends.
    """
    brokers: list[MinikafkaBroker] = []

    def make(**overrides: str) -> MinikafkaBroker:
        broker = MinikafkaBroker(tmp_path_factory.mktemp("minikafka"), overrides)
        brokers.append(broker)
        return broker.start()

    yield make
    crashes = []
    for broker in brokers:
        try:
            broker.close()
        except BrokerCrashed as crash:
            crashes.append(crash)
    if crashes:
        raise crashes[0]


@pytest.fixture
def minikafka_broker(minikafka_broker_factory) -> MinikafkaBroker:
    """A running broker with default settings, on a free port, private to this test."""
    return minikafka_broker_factory()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for broker in list(_LIVE_BROKERS):
            report.sections.append((f"minikafka broker stderr ({broker.bootstrap})", broker.stderr_tail()))
