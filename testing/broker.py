"""One ``minikafka serve`` process for a test: :class:`MinikafkaBroker` starts it (forked from
the warm parent of :mod:`minikafka.testing.warm`, or spawned), waits for its ready line, stops,
kills, restarts, pauses it and queues faults in it over its test-control port.

The broker runs in a process of its own, exactly as a user runs it; loading this module
imports nothing of the broker, since the pytest plugin loads it in every session of every
project that has minikafka installed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from minikafka.testing.clients import client_settings, create_topics_body, kafka_request
from minikafka.testing.control import ControlClient, ControlError

__all__ = ["MinikafkaBroker", "BrokerStartError", "BrokerCrashed", "TrustmeMissing", "READY_LINE",
           "warm_starter", "close_warm_starter", "started_brokers", "finish_stopping", "close_all", "new_ca"]

READY_LINE = re.compile(r"^minikafka ready: bootstrap\.servers=(?P<host>\S+):(?P<port>\d+) log\.dirs=(?P<log_dirs>.+)$")
# With several listeners, each one's advertised address (before the ready line).
LISTENER_LINE = re.compile(r"^minikafka listener: (?P<name>[A-Za-z0-9_]+)://(?P<host>\S+):(?P<port>\d+)$")
# The announcement of the test-control port (broker/control.py's ANNOUNCEMENT), kept here so
# that loading the harness imports nothing of the broker.
CONTROL_LINE = re.compile(r"^minikafka test control: (?P<host>\S+):(?P<port>\d+)$")

# The broker is started through its console-script entry point (minikafka.broker.cli:main),
# run by the same interpreter as the tests (so the same minikafka install: a wheel, or
# `pip install -e .`), which works without the `minikafka` script on PATH.
_LAUNCHER = "import sys; from minikafka.broker.cli import main; sys.exit(main())"

# Brokers whose process this interpreter started and has not reaped yet.
_STARTED: list["MinikafkaBroker"] = []
# The threads finishing the stops that close(wait=False) began.
_STOPPING: list[threading.Thread] = []

_WARM_STARTER = None


def warm_starter():
    """This process's :class:`minikafka.testing.warm.WarmStarter`: brokers are forked from
    one pre-imported parent instead of each paying for an interpreter and its imports."""
    global _WARM_STARTER
    if _WARM_STARTER is None:
        from minikafka.testing.warm import WarmStarter

        _WARM_STARTER = WarmStarter()
    return _WARM_STARTER


def close_warm_starter() -> None:
    """Stop the warm parent, if one was started (running brokers are not its children)."""
    if _WARM_STARTER is not None:
        _WARM_STARTER.close()


def _fork_ahead() -> None:
    """A test is done with a broker: the warm parent's moment to fork the next one's spare."""
    if _WARM_STARTER is not None:
        _WARM_STARTER.fork_ahead()


def finish_stopping() -> None:
    """Wait until every broker closed with ``wait=False`` has stopped and been reaped."""
    while _STOPPING:
        _STOPPING.pop().join()


def finish_in_background(stop, name: str) -> None:
    """Run ``stop()`` (the rest of a shutdown already asked for) in a thread that
    :func:`finish_stopping` waits for."""
    stopping = threading.Thread(target=stop, name=name, daemon=True)
    stopping.start()
    _STOPPING.append(stopping)


def started_brokers() -> list["MinikafkaBroker"]:
    """The brokers whose process is started and not reaped yet (the plugin attaches their
    stderr to a failed test's report)."""
    return list(_STARTED)


class BrokerStartError(RuntimeError):
    """The broker process exited or stayed silent before printing its ready line."""


class BrokerCrashed(RuntimeError):
    """The broker process exited while running without being told to stop."""


class MinikafkaBroker:
    """One ``minikafka serve`` subprocess with a data directory that outlives restarts.

    ``bootstrap`` is ``"127.0.0.1:PORT"``; ``log_dir`` is the broker's data directory. With
    ``log_dirs=N`` it has N (Kafka's ``log.dirs``, JBOD): ``log_dirs`` lists them, ``log_dir``
    first.
    ``stop()`` sends SIGTERM (clean shutdown), ``kill()`` SIGKILL (no shutdown at all);
    ``restart()`` starts the process again on the same data directory and, if it is still free,
    the same port, so connected clients find it again. The process's stdout and stderr go to
    files next to the data directory (``stdout_path``, ``stderr_path``; ``stderr_since_start()``
    is the latest process's share).

    A process that exits without being told to is a crash: its status is kept in
    ``unexpected_exits`` and ``close()`` raises ``BrokerCrashed`` after cleaning up, so a test
    whose broker died fails even if the test itself did not notice.

    Faults (see README, "Faults on demand"): the broker is started with ``--test-control``
    unless ``test_control=False``, so ``inject()`` and ``delay()`` can make its next requests
    of an API fail or wait; ``pause()`` / ``resume()`` freeze and thaw the whole process
    (SIGSTOP / SIGCONT). Queued faults live in the process: a restart forgets them.
    """

    def __init__(
        self,
        work_dir: Path | str | None = None,
        overrides: dict[str, str] | None = None,
        *,
        host: str = "127.0.0.1",
        start_timeout: float = 30.0,
        stop_timeout: float = 15.0,
        test_control: bool = True,
        security_protocol: str = "PLAINTEXT",
        sasl_mechanism: str | None = None,
        users: dict[str, str] | None = None,
        ssl_client_auth: str = "none",
        ca=None,
        log_dirs: int = 1,
    ) -> None:
        self._own_work_dir = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix="minikafka-")) if work_dir is None else Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.work_dir / "data"
        self.log_dirs = [self.log_dir, *(self.work_dir / f"data-{n}" for n in range(2, log_dirs + 1))]
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
        self.test_control = test_control
        self.control_address: tuple[str, int] | None = None
        self.paused = False
        self.security_protocol = security_protocol.upper()
        self.sasl_mechanism = sasl_mechanism or ("PLAIN" if "SASL" in self.security_protocol else None)
        self.users = dict(users or {})
        self.ssl_client_auth = ssl_client_auth
        self.ca = ca
        # Listener name -> port, when the broker has several listeners (from `--config`).
        self.listener_ports: dict[str, int] = {}
        self.config_path: Path | None = None
        if self.security_protocol != "PLAINTEXT":
            self._write_security_config()

    @property
    def bootstrap(self) -> str:
        from minikafka.broker.config import host_port  # here: loading the harness stays cheap

        return host_port(self.host, self.port)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _write_security_config(self) -> None:
        """Certificates, users and a properties file in the work dir; the settings go in a
        file rather than on the command line, which the broker's stderr file records."""
        from minikafka.broker.security.scram import HASHES, CredentialStore

        uses_tls = self.security_protocol in ("SSL", "SASL_SSL")
        uses_sasl = self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        if self.security_protocol not in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security_protocol {self.security_protocol!r} is not one of PLAINTEXT, "
                             "SSL, SASL_PLAINTEXT, SASL_SSL")
        name = self.security_protocol.lower()
        props = {"listeners": f"{self.security_protocol}://{self.host}:0"}
        if uses_tls:
            if self.ca is None:
                self.ca = new_ca()
            self.ca_path = self.work_dir / "ca.pem"
            self.ca.cert_pem.write_to_path(str(self.ca_path))
            server = self.ca.issue_cert("127.0.0.1", "localhost", "::1")
            keystore = self.work_dir / "broker.pem"
            server.private_key_and_cert_chain_pem.write_to_path(str(keystore))
            props.update({"ssl.keystore.location": str(keystore), "ssl.truststore.location": str(self.ca_path),
                          "ssl.client.auth": self.ssl_client_auth})
        if uses_sasl:
            props["sasl.enabled.mechanisms"] = self.sasl_mechanism
            if self.sasl_mechanism == "PLAIN":
                accounts = " ".join(f'user_{user}="{jaas_escape(password)}"' for user, password in self.users.items())
                props[f"listener.name.{name}.plain.sasl.jaas.config"] = (
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {accounts};")
            elif self.sasl_mechanism in HASHES:
                store = CredentialStore(self.log_dir)
                for user, password in self.users.items():
                    store.add(user, password, [self.sasl_mechanism])
            else:
                raise ValueError(f"sasl_mechanism {self.sasl_mechanism!r} is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        self.config_path = write_properties(self.work_dir / "security.properties", props)

    def client_certificate(self, common_name: str = "client"):
        """A ``trustme.LeafCert`` for mutual TLS, issued by this broker's CA, whose principal
        is ``User:CN=<common_name>,...``; written to ``<work dir>/client-<cn>.pem``."""
        leaf = self.ca.issue_cert(f"{common_name}.client.test", common_name=common_name)
        return leaf

    def client_config(self, client: str = "kafka-python", *, user: str | None = None,
                      certificate=None) -> dict:
        """Settings for ``client`` ("kafka-python", "aiokafka", "confluent-kafka", whose names
        kcat's -X takes too) to reach this broker: bootstrap servers, security protocol, the
        CA, SASL credentials of ``user`` (the first of ``users`` by default) and, for mutual
        TLS, ``certificate`` (a ``client_certificate()``, made on demand when the broker
        requires one)."""
        if self.security_protocol in ("SSL", "SASL_SSL") and certificate is None and self.ssl_client_auth == "required":
            certificate = self.client_certificate()
        return client_settings(client, bootstrap=self.bootstrap, security_protocol=self.security_protocol,
                               sasl_mechanism=self.sasl_mechanism, users=self.users, user=user,
                               ca_path=getattr(self, "ca_path", None), certificate=certificate,
                               work_dir=self.work_dir)

    def command(self, port: int) -> list[str]:
        cmd = [sys.executable, "-c", _LAUNCHER, "serve",
               "--host", self.host, "--port", str(port), "--log-dir", ",".join(map(str, self.log_dirs))]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        if self.test_control:
            cmd.append("--test-control")
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
                # The old port was taken in the meantime. Another one, chosen here rather than by
                # the broker: whoever dials it by port (the cluster's link proxies, through which
                # the controller sends its first UpdateMetadata and LeaderAndIsr) must know it
                # before the ready line, which waits for those.
                self.port = free_port()
                self._spawn(self.port)
                return self
        self._spawn(0)
        return self

    def _spawn(self, port: int) -> None:
        self.starts += 1
        self.control_address = None
        self.paused = False
        # Writes are watched from before the process can write its ready line.
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err, \
                _Writes(self.stdout_path) as writes:
            start_of_stdout = out.tell()
            self._start_of_stderr = err.tell()
            err.write(f"--- minikafka start #{self.starts}: {' '.join(self.command(port))}\n".encode())
            err.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            command = self.command(port)
            launcher = [sys.executable, "-c", _LAUNCHER]
            # Forked when the command is minikafka's own (a subclass may run something else).
            self.process = None
            if command[:len(launcher)] == launcher:
                self.process = warm_starter().start(command[len(launcher):], cwd=str(self.work_dir), env=env,
                                                    stdout=out.fileno(), stderr=err.fileno())
            if self.process is None:
                self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                                env=env, cwd=self.work_dir)
            _STARTED.append(self)
            self._wait_until_ready(start_of_stdout, writes)

    def _wait_until_ready(self, start_of_stdout: int, writes: "_Writes") -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            match = self._ready_match(start_of_stdout)
            if match:
                self.port = int(match["port"])
                self.listener_ports = {m["name"]: int(m["port"])
                                       for m in self._stdout_matches(start_of_stdout, LISTENER_LINE)}
                control = self._stdout_match(start_of_stdout, CONTROL_LINE)
                if control:
                    self.control_address = (control["host"], int(control["port"]))
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
            writes.wait()

    def _ready_match(self, start: int) -> re.Match | None:
        return self._stdout_match(start, READY_LINE)

    def _stdout_match(self, start: int, pattern: re.Pattern) -> re.Match | None:
        return next(self._stdout_matches(start, pattern), None)

    def _stdout_matches(self, start: int, pattern: re.Pattern):
        with open(self.stdout_path, "rb") as out:
            out.seek(start)
            lines = out.read().decode(errors="replace").splitlines()
        for line in lines:
            match = pattern.match(line.strip())
            if match:
                yield match

    def stop(self) -> int | None:
        """SIGTERM and wait for a clean shutdown (SIGKILL after ``stop_timeout``)."""
        if self.process is None:
            return None
        self._ask_to_stop()
        return self._finish_stop()

    def _ask_to_stop(self) -> None:
        self._note_crash()
        if self.process.poll() is None:
            if self.paused:  # a stopped process would hold SIGTERM until continued
                self.resume()
            self.process.send_signal(signal.SIGTERM)
        _fork_ahead()

    def _finish_stop(self) -> int | None:
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
        _fork_ahead()
        return self._reap()

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 10.0, **configs: str) -> None:
        """CreateTopics with topic ``configs`` (``_`` for ``.``: ``message_format_version="0.10.2"``
        makes a topic of the magic 0/1 format); ControlError unless it is created."""
        from minikafka.protocol.apis import ApiKey
        from minikafka.protocol.errors import ErrorCode

        answer = kafka_request(self.bootstrap, ApiKey.CREATE_TOPICS, 0,
                               create_topics_body(name, partitions, 1, timeout, configs), timeout)
        code = answer.topics[0].error_code
        if code != ErrorCode.NONE:
            raise ControlError(f"CreateTopics {name}: {ErrorCode(code).name}")

    # ------------------------------------------------------------------ faults

    def inject(self, api: str | int, errors: list[str | int], topic: str | None = None,
               partition: int | None = None, *, ms: int = 0) -> None:
        """The next ``len(errors)`` requests of ``api`` (``"Produce"``, ``"Fetch"``, ... or the
        key number) are answered with these Kafka errors (names such as
        ``"NOT_LEADER_FOR_PARTITION"`` or numbers), one each, in order, each ``ms`` late.

        With ``topic`` (and ``partition``) only requests naming it count, and the error goes in
        that topic's (partition's) slot of the response; the request's other partitions are
        served for real. Without, every partition of the request gets the error (top-level
        for APIs without partitions)."""
        self._control("inject", api=api, errors=list(errors), topic=topic, partition=partition, ms=ms)

    def delay(self, api: str | int, ms: int, *, count: int = 1, topic: str | None = None,
              partition: int | None = None) -> None:
        """The next ``count`` requests of ``api`` are handled ``ms`` milliseconds late (and
        then answered for real); later requests on the same connection wait behind them."""
        self._control("delay", api=api, ms=ms, count=count, topic=topic, partition=partition)

    def drop_responses(self, api: str | int, *, count: int = 1, topic: str | None = None,
                       partition: int | None = None) -> None:
        """The next ``count`` requests of ``api`` are handled for real, but their responses are
        lost: the broker closes each one's connection instead of answering."""
        self._control("drop_response", api=api, count=count, topic=topic, partition=partition)

    def clear_faults(self, api: str | int | None = None) -> int:
        """Drop the queued faults (of ``api`` only, when given); returns how many there were."""
        return self._control("clear", api=api)["cleared"]

    def faults(self) -> dict:
        """``{"pending": [...], "served": [...]}``: the queues still waiting, and one entry per
        request that met a fault (api, correlation_id, client_id, delay_ms, errors)."""
        answer = self._control("status")
        return {"pending": answer["pending"], "served": answer["served"]}

    def _control(self, op: str, **fields) -> dict:
        if not self.running:
            raise ControlError("the minikafka broker is not running")
        if self.control_address is None:
            raise ControlError("this minikafka broker was started without test control "
                               "(MinikafkaBroker(..., test_control=True) enables it)")
        if self.paused:
            raise ControlError("the minikafka broker is paused: resume() it first")
        return ControlClient(self.control_address).request(op, **fields)

    def pause(self) -> None:
        """SIGSTOP the broker and wait until the kernel reports it stopped: from then on it
        accepts, reads and answers nothing (connections stay open; the kernel queues bytes),
        like a broker in a long GC pause or a frozen VM."""
        if not self.running:
            raise RuntimeError("minikafka broker is not running")
        self.process.send_signal(signal.SIGSTOP)
        self._wait_for_state(stopped=True)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT a paused broker and wait until it runs again."""
        if not self.running:
            raise RuntimeError("minikafka broker is not running")
        self.process.send_signal(signal.SIGCONT)
        self._wait_for_state(stopped=False)
        self.paused = False

    def _wait_for_state(self, *, stopped: bool) -> None:
        deadline = time.monotonic() + self.stop_timeout
        while (_process_state(self.process.pid) == "T") != stopped:
            if self.process.poll() is not None:
                raise BrokerCrashed(f"minikafka exited with status {self.process.returncode} "
                                    "while being paused or resumed")
            if time.monotonic() > deadline:
                raise RuntimeError(f"minikafka (pid {self.process.pid}) did not "
                                   f"{'stop' if stopped else 'continue'} within {self.stop_timeout}s")
            time.sleep(0.005)

    def restart(self, *, clean: bool = True) -> "MinikafkaBroker":
        """Stop (SIGTERM, or SIGKILL when ``clean=False``) and start on the same data dir."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()

    def forget(self) -> None:
        """No longer any test's broker: not in failure reports, and an exit from now on is
        not a crash (its shutdown has been asked for)."""
        self._note_crash()
        if self in _STARTED:
            _STARTED.remove(self)

    def _note_crash(self) -> None:
        """Record and reap a started process that has exited without being asked to."""
        if self.process is not None and self in _STARTED and self.process.poll() is not None:
            self.unexpected_exits.append(self.process.returncode)
            self._reap()

    def _reap(self) -> int | None:
        returncode = self.process.wait() if self.process is not None else None
        if self in _STARTED:
            _STARTED.remove(self)
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

    def close(self, *, wait: bool = True) -> None:
        """Stop the process and, if this object created it, remove the work directory.
        Raises ``BrokerCrashed`` if the process ever exited on its own.

        ``wait=False`` (the fixtures' teardown) sends the SIGTERM and leaves the rest to a
        thread: waiting for the clean shutdown (its fsyncs: flushes, checkpoints, the marker;
        38 of the 98 ms per test, median, of a test with its own broker on a loaded machine),
        reaping the process, removing the work directory. A crash before it is reported here
        all the same; :func:`finish_stopping` waits for every such stop (the plugin's session
        end)."""
        if not wait and self.process is not None:
            self._ask_to_stop()
            if self in _STARTED:  # no longer any test's broker (stderr in failure reports)
                _STARTED.remove(self)
            crash_report = self.stderr_tail() if self.unexpected_exits else ""
            finish_in_background(self._stop_in_background, f"stop {self.bootstrap}")
        else:
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

    def _stop_in_background(self) -> None:
        try:
            self._finish_stop()
        finally:
            if self._own_work_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> "MinikafkaBroker":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<MinikafkaBroker {self.bootstrap} {state} log_dir={self.log_dir}>"


def close_all(things, **options) -> None:
    """Close every broker or cluster (``close(**options)``), then raise the first
    ``BrokerCrashed`` among them."""
    crashes = []
    for thing in things:
        try:
            thing.close(**options)
        except BrokerCrashed as crash:
            crashes.append(crash)
    if crashes:
        raise crashes[0]


class _Writes:
    """Waits for writes to a file: the broker's stdout, for its ready line. Linux tells of them
    (inotify) as they happen; elsewhere a look at the file every 0.5 ms for the first 50 ms
    (a warm-started broker is ready within milliseconds), then every 2 ms at most (a loaded
    machine's starts take longer; looks 10 ms apart added 5 ms to each on average)."""

    # A process can exit without writing: how long a wait lasts at most even with inotify.
    NOTIFIED_WAIT = 0.005
    _IN_MODIFY = 0x2
    # Idle inotify instances, reused: closing one waits for the kernel to release its watches
    # (an RCU grace period, 10 ms and more), so they stay open for the process's life, one per
    # start under way at the same time.
    _idle: list[int] = []
    _idle_lock = threading.Lock()

    def __init__(self, path: Path) -> None:
        self._began = time.monotonic()
        self._pause = 0.0005
        self._fd = self._watch = None
        if not sys.platform.startswith("linux"):
            return
        import ctypes

        self._libc = ctypes.CDLL(None, use_errno=True)
        with self._idle_lock:
            fd = self._idle.pop() if self._idle else self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return
        watch = self._libc.inotify_add_watch(fd, os.fsencode(path), self._IN_MODIFY)
        if watch < 0:  # out of watches (fs.inotify.max_user_watches): looks instead
            self._release(fd)
            return
        self._fd, self._watch = fd, watch

    def wait(self) -> None:
        """Until the file is written to (or a moment passes)."""
        if self._fd is None:
            time.sleep(self._pause)
            if time.monotonic() - self._began > 0.05:
                self._pause = min(self._pause * 1.5, 0.002)
            return
        import select

        if select.select([self._fd], [], [], self.NOTIFIED_WAIT)[0]:
            self._drain(self._fd)  # what was written is read from the file

    @staticmethod
    def _drain(fd: int) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(fd, 4096):
                pass

    def _release(self, fd: int) -> None:
        with self._idle_lock:
            self._idle.append(fd)

    def __enter__(self) -> "_Writes":
        return self

    def __exit__(self, *exc_info) -> None:
        if self._fd is not None:
            self._libc.inotify_rm_watch(self._fd, self._watch)
            self._drain(self._fd)  # the last writes' events (a stray one later costs a look, no more)
            self._release(self._fd)
            self._fd = None


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _process_state(pid: int) -> str:
    """The kernel's one-letter state of a process ('R', 'S', 'T' stopped, ...)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The command name in parentheses may contain spaces: the state follows the last ')'.
            return stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except FileNotFoundError:
        if not Path("/proc/self/stat").exists():  # no procfs (macOS): ask ps
            state = subprocess.run(["ps", "-o", "state=", "-p", str(pid)], capture_output=True,
                                   text=True).stdout.strip()
            return state[:1] or "?"
        return "?"


def write_properties(path: Path, props: dict[str, str]) -> Path:
    """A properties file only its owner reads: secrets go there rather than on the command
    line, which the broker's stderr file records."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        for key, value in props.items():
            out.write(f"{key}={value.replace(chr(92), chr(92) * 2)}\n")
    return path


def jaas_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


class TrustmeMissing(ImportError):
    """trustme, which makes the TLS brokers' certificates, is not installed: it comes with the
    ``testing`` extra. The pytest plugin reports it as this one line."""


def new_ca():
    """A fresh ``trustme.CA``; the package comes with the ``testing`` extra, so a project
    that installed minikafka without it is told the one command that fixes it."""
    try:
        import trustme
    except ModuleNotFoundError:
        raise TrustmeMissing("minikafka's TLS fixtures need trustme: pip install 'minikafka[testing]'") from None
    return trustme.CA()
