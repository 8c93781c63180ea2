"""A standalone ZooKeeper server process for tests and ``minikafka cluster``.

Cluster mode keeps its state in a real ZooKeeper (consensus is ZooKeeper's job, never ours);
this module only runs Debian's ZooKeeper 3.8 (``apt-get install zookeeper``: the jar at
``/usr/share/java/zookeeper.jar``, Java 17) as a one-node server with its own data dir::

    with ZooKeeperServer(tmp_path / "zk") as zk:
        client = ZkClient(zk.connect_string)

Synchronous and trio-free on purpose: pytest fixtures and the CLI call it outside any event
loop. The JVM's own log goes to ``<data_dir>/zookeeper.log``, never to the caller's stderr.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["ZooKeeperNotInstalled", "ZooKeeperServer", "ZooKeeperStartError", "ZOOKEEPER_JAR"]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# Without a binding slf4j drops every log line; Debian's libslf4j-java ships the simple one,
# which writes to stderr, i.e. to our log file.
_SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# A test server holds a few hundred znodes: a small heap and the C1 compiler start the JVM
# sooner and leave memory to the brokers sharing the machine.
_JVM_OPTIONS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
_EXCEPTION_LINE = re.compile(r"^[\w.$]+(Exception|Error): ")
_ERROR_LINE = re.compile(r"\bERROR\b")


class ZooKeeperNotInstalled(RuntimeError):
    """Java or Debian's ZooKeeper jar is missing."""


class ZooKeeperStartError(RuntimeError):
    """The server process exited, or did not answer ``ruok``, before ``start``'s timeout."""


class ZooKeeperServer:
    """One ZooKeeper server (standalone mode) listening on 127.0.0.1.

    ``port=0`` picks a free port. ``tick_time_ms`` bounds the session timeouts the server
    grants (2×tick … 20×tick), so tests keep it small to make sessions expire quickly.
    """

    def __init__(self, data_dir: Path, port: int = 0, tick_time_ms: int = 500):
        self.data_dir = Path(data_dir)
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.process: subprocess.Popen | None = None
        self.log_path = self.data_dir / "zookeeper.log"

    @property
    def connect_string(self) -> str:
        if self.process is None:
            raise RuntimeError("ZooKeeperServer is not started")
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Spawn the server and return once it answers ``ruok`` with ``imok`` and serves."""
        if self.process is not None:
            raise RuntimeError("ZooKeeperServer is already started")
        java = shutil.which("java")
        if java is None or not ZOOKEEPER_JAR.exists():
            missing = "java" if java is None else str(ZOOKEEPER_JAR)
            raise ZooKeeperNotInstalled(
                f"{missing} not found: run `apt-get install zookeeper` (Debian's ZooKeeper and Java)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        # A free port picked here can be taken by someone else before the JVM binds it; a
        # server that dies for that reason is retried on a new port.
        attempts = 3 if self.port == 0 else 1
        for attempt in range(attempts):
            port = self.port or _free_port()
            self._spawn(java, port)
            try:
                self._wait_ready(port, deadline)
            except ZooKeeperStartError:
                self._kill_and_reap()
                if attempt + 1 == attempts or time.monotonic() >= deadline or not _port_taken(port):
                    raise
                continue
            self.port = port
            return

    def _spawn(self, java: str, port: int) -> None:
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={port}\n"
            "clientPortAddress=127.0.0.1\n"
            # The admin server would bind port 8080, which other servers on the machine want.
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
        )
        classpath = [str(ZOOKEEPER_JAR)]
        if _SLF4J_SIMPLE_JAR.exists():
            classpath.append(str(_SLF4J_SIMPLE_JAR))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [java, *_JVM_OPTIONS, "-cp", ":".join(classpath), _MAIN_CLASS, str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C meant for the test run reaches the server only
                # through stop(), in order.
                start_new_session=True,
            )
        self.port = port

    def _wait_ready(self, port: int, deadline: float) -> None:
        assert self.process is not None
        while True:
            if self.process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with status {self.process.returncode} during start-up: "
                    f"{self._log_tail()}"
                )
            # `ruok` says imok as soon as the port is bound, before the database is loaded;
            # `srvr` reports a Mode only once requests are served.
            if (four_letter_word("127.0.0.1", port, "ruok", timeout=1.0) == "imok"
                    and "Mode:" in (four_letter_word("127.0.0.1", port, "srvr", timeout=1.0) or "")):
                return
            if time.monotonic() >= deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper did not answer ruok on 127.0.0.1:{port} in time; see {self.log_path}"
                )
            time.sleep(0.05)

    def _log_tail(self) -> str:
        """The log line that says why start-up failed: the first exception, else the first
        ERROR line, else the last line."""
        try:
            lines = [line.strip() for line in self.log_path.read_text(errors="replace").splitlines()
                     if line.strip() and not line.startswith("SLF4J:")]
        except OSError:
            return f"(no log at {self.log_path})"
        for pattern in (_EXCEPTION_LINE, _ERROR_LINE):
            for line in lines:
                if pattern.search(line):
                    return line
        return lines[-1] if lines else f"(empty log {self.log_path})"

    def stop(self) -> None:
        """SIGTERM, wait up to 10 s, then SIGKILL; always reaps the process."""
        if self.process is None:
            return
        if self.process.poll() is None:
            # A SIGSTOPped server (tests pause it) must wake up to act on SIGTERM.
            self._signal(signal.SIGCONT)
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self._kill_and_reap()

    def _kill_and_reap(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process = None

    def _signal(self, sig: int) -> None:
        assert self.process is not None
        try:
            os.kill(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def pause(self) -> None:
        """SIGSTOP the server: clients see a server that accepts nothing and answers nothing."""
        if self.process is None:
            raise RuntimeError("ZooKeeperServer is not started")
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self.process is None:
            raise RuntimeError("ZooKeeperServer is not started")
        self._signal(signal.SIGCONT)

    def __enter__(self) -> "ZooKeeperServer":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str | None:
    """Send a four-letter command (``ruok``, ``srvr``, ``stat``); None if nothing answered."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", "replace")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False
