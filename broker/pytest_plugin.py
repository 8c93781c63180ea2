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

Security (see README, "Security"): ``minikafka_broker_factory(security_protocol="SASL_SSL",
sasl_mechanism="SCRAM-SHA-256", users={"alice": "secret"})`` starts a broker whose one listener
speaks that protocol, with certificates from a per-session ``trustme`` CA; and
``broker.client_config("kafka-python" | "aiokafka" | "confluent-kafka")`` gives the settings a
client needs to connect to it (as the first user unless ``user=`` names another).
``minikafka_cluster_factory`` takes the same options: the brokers then also replicate over
that listener, authenticating to each other as ``BROKER_USER``, and ``cluster.client_config()``
gives a client's settings.

Brokers are started for tests (``--test-control``), so a test can make one fail on demand:
``broker.inject("Produce", ["NOT_LEADER_FOR_PARTITION", 6])``, ``broker.delay("Fetch", ms=500)``,
``broker.pause()`` / ``broker.resume()`` (see README, "Faults on demand").
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
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from minikafka.broker.link_proxy import LinkProxy

__all__ = ["MinikafkaBroker", "MinikafkaCluster", "ZOOKEEPER", "BROKER_USER", "BrokerStartError",
           "BrokerCrashed", "ControlError", "kafka_request", "client_settings"]

READY_LINE = re.compile(r"^minikafka ready: bootstrap\.servers=(?P<host>\S+):(?P<port>\d+) log\.dirs=(?P<log_dirs>.+)$")

# The broker is started through its console-script entry point (minikafka.broker.cli:main),
# run by the same interpreter as the tests (so the same minikafka install: a wheel, or
# `pip install -e .`), which works without the `minikafka` script on PATH.
_LAUNCHER = "import sys; from minikafka.broker.cli import main; sys.exit(main())"

_LIVE_BROKERS: list["MinikafkaBroker"] = []

_WARM_STARTER = None


def warm_starter():
    """The test session's :class:`minikafka.testing.warm.WarmStarter`: brokers are forked from
    one pre-imported parent instead of each paying for an interpreter and its imports."""
    global _WARM_STARTER
    if _WARM_STARTER is None:
        from minikafka.testing.warm import WarmStarter

        _WARM_STARTER = WarmStarter()
    return _WARM_STARTER

# The announcement of the test-control port (broker/control.py's ANNOUNCEMENT), kept here so
# that loading the plugin imports nothing of the broker.
# With several listeners, each one's advertised address (before the ready line).
LISTENER_LINE = re.compile(r"^minikafka listener: (?P<name>[A-Za-z0-9_]+)://(?P<host>\S+):(?P<port>\d+)$")
CONTROL_LINE = re.compile(r"^minikafka test control: (?P<host>\S+):(?P<port>\d+)$")


class ControlError(RuntimeError):
    """A fault command the broker refused, or a broker that cannot take one (not started
    with test control, paused, stopped)."""


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
        from minikafka.broker.config import host_port  # here: loading the plugin stays cheap

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
                accounts = " ".join(f'user_{user}="{_jaas_escape(password)}"' for user, password in self.users.items())
                props[f"listener.name.{name}.plain.sasl.jaas.config"] = (
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {accounts};")
            elif self.sasl_mechanism in HASHES:
                store = CredentialStore(self.log_dir)
                for user, password in self.users.items():
                    store.add(user, password, [self.sasl_mechanism])
            else:
                raise ValueError(f"sasl_mechanism {self.sasl_mechanism!r} is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        self.config_path = _write_properties(self.work_dir / "security.properties", props)

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
               "--host", self.host, "--port", str(port), "--log-dir", str(self.log_dir)]
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
                self.port = _free_port()
                self._spawn(self.port)
                return self
        self._spawn(0)
        return self

    def _spawn(self, port: int) -> None:
        self.starts += 1
        self.control_address = None
        self.paused = False
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
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
        _LIVE_BROKERS.append(self)
        deadline = time.monotonic() + self.start_timeout
        pause = 0.0005  # a warm-started broker is ready within milliseconds: look often, then less
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
            time.sleep(pause)
            pause = min(pause * 1.5, 0.01)

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
        self._note_crash()
        if self.process.poll() is None:
            if self.paused:  # a stopped process would hold SIGTERM until continued
                self.resume()
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

    def clear_faults(self, api: str | int | None = None) -> int:
        """Drop the queued faults (of ``api`` only, when given); returns how many there were."""
        return self._control("clear", api=api)["cleared"]

    def faults(self) -> dict:
        """``{"pending": [...], "served": [...]}``: the queues still waiting, and one entry per
        request that met a fault (api, correlation_id, client_id, delay_ms, errors)."""
        answer = self._control("status")
        return {"pending": answer["pending"], "served": answer["served"]}

    def _control(self, op: str, **fields) -> dict:
        from minikafka.broker.control import ControlClient, ControlError as RefusedError

        if not self.running:
            raise ControlError("the minikafka broker is not running")
        if self.control_address is None:
            raise ControlError("this minikafka broker was started without test control "
                               "(MinikafkaBroker(..., test_control=True) enables it)")
        if self.paused:
            raise ControlError("the minikafka broker is paused: resume() it first")
        try:
            return ControlClient(self.control_address).request(op, **fields)
        except RefusedError as exc:
            raise ControlError(str(exc)) from None

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


def client_settings(client: str, *, bootstrap: str, security_protocol: str, sasl_mechanism: str | None,
                    users: dict[str, str], user: str | None, ca_path: Path | None, certificate, work_dir: Path) -> dict:
    """What ``client`` ("kafka-python", "aiokafka", "confluent-kafka") needs to reach
    ``bootstrap`` over ``security_protocol``: the CA, SASL credentials of ``user`` (the first of
    ``users`` by default) and ``certificate`` (a trustme leaf, written to ``work_dir``) for
    mutual TLS. A single broker's and a cluster's ``client_config`` both answer with it."""
    protocol = security_protocol
    uses_tls = protocol in ("SSL", "SASL_SSL")
    uses_sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
    if uses_sasl:
        user = user or next(iter(users), None)
        password = users.get(user)
    cert_path = None
    if certificate is not None:
        cert_path = work_dir / f"client-{id(certificate)}.pem"
        certificate.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    if client == "confluent-kafka":
        config = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
        if uses_tls:
            config["ssl.ca.location"] = str(ca_path)
            if cert_path is not None:
                config["ssl.certificate.location"] = config["ssl.key.location"] = str(cert_path)
        if uses_sasl:
            config.update({"sasl.mechanism": sasl_mechanism, "sasl.username": user, "sasl.password": password})
        return config
    if client not in ("kafka-python", "aiokafka"):
        raise ValueError(f"client {client!r} is not kafka-python, aiokafka or confluent-kafka")
    config = {"bootstrap_servers": bootstrap, "security_protocol": protocol}
    if uses_tls:
        if client == "aiokafka":
            import ssl

            context = ssl.create_default_context(cafile=str(ca_path))
            if cert_path is not None:
                context.load_cert_chain(str(cert_path))
            config["ssl_context"] = context
        else:
            config["ssl_cafile"] = str(ca_path)
            if cert_path is not None:
                config["ssl_certfile"] = config["ssl_keyfile"] = str(cert_path)
    if uses_sasl:
        config.update({"sasl_mechanism": sasl_mechanism, "sasl_plain_username": user,
                       "sasl_plain_password": password})
    return config


def kafka_request(bootstrap: str, api_key: int, version: int, body: dict, timeout: float = 10.0, *,
                  plain_login: tuple[str, str] | None = None):
    """One request to a broker over a plain blocking socket, for fixtures that read the
    cluster's own view of itself and tests that send what no client library can;
    ``plain_login`` = (user, password) authenticates with SASL PLAIN first."""
    from minikafka.broker.blocking_client import kafka_request as request

    return request(bootstrap, api_key, version, body, timeout=timeout, client_id="minikafka-pytest",
                   plain_login=plain_login)


ZOOKEEPER = "zookeeper"
"""The ZooKeeper server's name in :meth:`MinikafkaCluster.partition`'s groups."""

BROKER_USER = "broker"
"""The user a secured cluster's brokers authenticate to each other as (``User:broker``, to
put in ``super.users`` when an authorizer is on)."""


class MinikafkaCluster:
    """A ZooKeeper and ``brokers`` minikafka processes forming one cluster (broker ids 1..N).

    ``zookeeper`` is a connect string of a ZooKeeper to use (a fresh chroot is taken in it);
    without one the cluster starts its own (Debian's ``zookeeper`` package). ``bootstrap``
    lists every broker; ``brokers[i]`` are :class:`MinikafkaBroker` objects (``broker(id)``
    by id); ``leader(topic, partition)`` and ``controller()`` ask the cluster itself.

    Faults (README, "Faults on a cluster"), each reversible and each returning once it has
    taken effect: ``kill``, ``stop``, ``restart``, ``pause`` / ``resume``, ``partition`` /
    ``heal``, ``move_leader``. For ``partition`` every broker reaches every other broker and
    ZooKeeper through a :class:`~minikafka.broker.link_proxy.LinkProxy` of that one link
    (``links=False`` connects them directly and leaves ``partition`` unavailable). Clients
    always reach the brokers directly.

    Security: with ``security_protocol`` ("SSL", "SASL_PLAINTEXT", "SASL_SSL") every broker
    has a second listener of that name, which is also ``inter.broker.listener.name``: the
    brokers replicate over it and authenticate to each other as ``BROKER_USER`` (with
    ``sasl_mechanism``, PLAIN by default; SCRAM users go to ZooKeeper's
    ``/config/users``), certificates come from ``ca`` (a ``trustme.CA``), ``users`` are the
    clients' accounts and ``client_config()`` the settings a client needs. The first listener
    stays PLAINTEXT for the fixture's own look-ups (as ``User:ANONYMOUS``: a super user when an
    authorizer is on), and the link proxies forward to the
    inter-broker listener. These settings go in each broker's ``security.properties`` (mode
    0600, ``broker.config_path``), the overrides, which come after them, on the command line.
    ``broker_overrides`` gives single brokers settings of their own.
    """

    def __init__(self, work_dir: Path | str, brokers: int = 3, overrides: dict[str, str] | None = None, *,
                 zookeeper: str | None = None, start_timeout: float = 60.0, links: bool = True,
                 fault_timeout: float = 60.0, security_protocol: str = "PLAINTEXT",
                 sasl_mechanism: str | None = None, users: dict[str, str] | None = None, ca=None,
                 ssl_client_auth: str = "none",
                 broker_overrides: dict[int, dict[str, str]] | None = None) -> None:
        import secrets
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
        self.fault_timeout = fault_timeout
        self.brokers: list[MinikafkaBroker] = []
        self.use_links = links
        # (from broker id, to broker id or ZOOKEEPER) -> the proxy of that directed link
        self.links: dict[tuple[int, int | str], "LinkProxy"] = {}
        self._kazoo = None
        self.security_protocol = security_protocol.upper()
        if self.security_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security_protocol {security_protocol!r} is not one of PLAINTEXT, SSL, "
                             "SASL_PLAINTEXT, SASL_SSL")
        self.sasl_mechanism = sasl_mechanism or ("PLAIN" if "SASL" in self.security_protocol else None)
        self.users = dict(users or {})
        self.ca = ca
        self.ssl_client_auth = ssl_client_auth
        self.ca_path: Path | None = None
        # The brokers' own account on the inter-broker listener (never a client's).
        self.broker_password = secrets.token_urlsafe(16)
        self.broker_overrides = {b: {str(k): str(v) for k, v in o.items()}
                                 for b, o in (broker_overrides or {}).items()}
        # Broker id -> the port its inter-broker listener binds, chosen before it starts so the
        # link proxies know it at once (and a restart binds it again).
        self._inter_broker_ports: dict[int, int] = {}

    @property
    def zookeeper_connect(self) -> str:
        base = self._own_zookeeper.connect_string if self._own_zookeeper is not None else self._zookeeper_base
        return base + self.chroot

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.running)

    @property
    def ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    def broker(self, broker_id: int) -> MinikafkaBroker:
        return self.brokers[broker_id - 1]

    def start(self, *, settle: bool = True) -> "MinikafkaCluster":
        """Start ZooKeeper and every broker not running, the brokers at once (each start
        returns at its ready line: the broker then answers clients with a complete view of
        the cluster). ``settle`` also waits until the first broker's metadata lists them all;
        without it the cluster is used as a client meets it right after the ready lines."""
        if self._own_zookeeper is not None and self._own_zookeeper.process is None:
            self._own_zookeeper.start()
        if not self.brokers:
            if self.security_protocol != "PLAINTEXT":
                self._inter_broker_ports = {broker_id: _free_port() for broker_id in self.ids}
                self._add_scram_users()
            if self.use_links:
                self._open_links()
            for broker_id in self.ids:
                overrides = {"zookeeper.connect": self.zookeeper_connect, "broker.id": str(broker_id),
                             "zookeeper.session.timeout.ms": "4000",
                             "controlled.shutdown.retry.backoff.ms": "500", **self.overrides,
                             **self.broker_overrides.get(broker_id, {})}
                if self.use_links:
                    zk_proxy = self.links[(broker_id, ZOOKEEPER)].address
                    overrides["zookeeper.connect"] = f"{zk_proxy[0]}:{zk_proxy[1]}{self.chroot}"
                    overrides["minikafka.test.broker.dial"] = ",".join(
                        f"{to}={proxy.address[0]}:{proxy.address[1]}"
                        for (frm, to), proxy in sorted(self.links.items(), key=str) if frm == broker_id and to != ZOOKEEPER)
                broker = MinikafkaBroker(self.work_dir / f"broker-{broker_id}", overrides,
                                         start_timeout=self.start_timeout)
                if self.security_protocol != "PLAINTEXT":
                    broker.config_path = _write_properties(broker.work_dir / "security.properties",
                                                           self._security_overrides(broker_id))
                if self.use_links:
                    # A broker registers, and is dialled through its proxies, a moment before it
                    # prints the port it bound; a port chosen here is known to the proxy at once.
                    broker.port = _free_port()
                self.brokers.append(broker)
        starting = [broker for broker in self.brokers if not broker.running]
        if len(starting) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(starting)) as pool:
                for started in [pool.submit(broker.start) for broker in starting]:
                    started.result()
        elif starting:
            starting[0].start()
        if settle:
            self.wait_until(lambda m: len(m.brokers) == self.size, "every broker registered")
        return self

    @property
    def inter_broker_listener(self) -> str:
        """The name of the listener the brokers dial each other on."""
        named = self.overrides.get("inter.broker.listener.name") or self.overrides.get("security.inter.broker.protocol")
        return (named or self.security_protocol).upper()

    def _security_overrides(self, broker_id: int) -> dict[str, str]:
        """The second listener, its certificates and the broker's own SASL account."""
        protocol = self.security_protocol
        if protocol == "PLAINTEXT":
            return {}
        prefix = f"listener.name.{protocol.lower()}"
        props = {"listeners": f"PLAINTEXT://127.0.0.1:0,{protocol}://127.0.0.1:{self._inter_broker_ports[broker_id]}",
                 "inter.broker.listener.name": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            if self.ca is None:
                self.ca = new_ca()
            self.ca_path = self.work_dir / "ca.pem"
            self.ca.cert_pem.write_to_path(str(self.ca_path))
            keystore = self.work_dir / f"broker-{broker_id}.pem"
            self.ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(keystore))
            props.update({f"{prefix}.ssl.keystore.location": str(keystore),
                          f"{prefix}.ssl.truststore.location": str(self.ca_path),
                          f"{prefix}.ssl.client.auth": self.ssl_client_auth,
                          "ssl.endpoint.identification.algorithm": "HTTPS"})
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = self.sasl_mechanism
            props.update({f"{prefix}.sasl.enabled.mechanisms": mechanism,
                          "sasl.mechanism.inter.broker.protocol": mechanism})
            own = f'username="{BROKER_USER}" password="{_jaas_escape(self.broker_password)}"'
            if mechanism == "PLAIN":
                accounts = " ".join(f'user_{user}="{_jaas_escape(password)}"'
                                    for user, password in {BROKER_USER: self.broker_password, **self.users}.items())
                props[f"{prefix}.plain.sasl.jaas.config"] = \
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {own} {accounts};"
            else:
                props[f"{prefix}.{mechanism.lower()}.sasl.jaas.config"] = \
                    f"org.apache.kafka.common.security.scram.ScramLoginModule required {own};"
        return props

    def _add_scram_users(self) -> None:
        """The brokers' and the clients' SCRAM credentials, where a cluster keeps them."""
        if self.sasl_mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512") or "SASL" not in self.security_protocol:
            return
        from minikafka.broker.security.scram import with_password
        from minikafka.replication.kafka_zk import encode_topic_config, user_config_path

        for user, password in {BROKER_USER: self.broker_password, **self.users}.items():
            path = user_config_path(user)
            self._zk().ensure_path(path)
            self._zk().set(path, encode_topic_config(with_password({}, password, [self.sasl_mechanism])))

    def client_config(self, client: str = "kafka-python", *, user: str | None = None, certificate=None) -> dict:
        """Settings for ``client`` ("kafka-python", "aiokafka", "confluent-kafka") to reach
        the running brokers' ``security_protocol`` listeners as ``user`` (default: the first
        of ``users``); see :meth:`MinikafkaBroker.client_config`."""
        if self.security_protocol == "PLAINTEXT":
            return client_settings(client, bootstrap=self.bootstrap, security_protocol="PLAINTEXT",
                                   sasl_mechanism=None, users={}, user=None, ca_path=None, certificate=None,
                                   work_dir=self.work_dir)
        if certificate is None and self.ssl_client_auth == "required":
            certificate = self.ca.issue_cert("client.client.test", common_name="client")
        bootstrap = ",".join(f"127.0.0.1:{self._inter_broker_ports[b]}" for b in self.ids if self.broker(b).running)
        return client_settings(client, bootstrap=bootstrap, security_protocol=self.security_protocol,
                               sasl_mechanism=self.sasl_mechanism, users=self.users, user=user,
                               ca_path=self.ca_path, certificate=certificate, work_dir=self.work_dir)

    def _open_links(self) -> None:
        from minikafka.broker.link_proxy import LinkProxy

        zk_host, _, zk_port = self.zookeeper_connect.split("/", 1)[0].split(",")[0].rpartition(":")

        zk = self._zk()  # made here: the proxies' threads read registrations through it

        def broker_address(broker_id: int):
            # Where the brokers dial each other: the inter-broker listener, at the port chosen
            # for it here, or the one the broker printed, or the first listener's when that is
            # the inter-broker one. Before its ready line a broker's own choice of port (port 0)
            # is known only from its registration, and the ready line waits for what the
            # controller sends through here: read the registration (None without one: the
            # proxy waits).
            broker = self.broker(broker_id)
            if not broker.running:
                return None
            name = self.inter_broker_listener
            if broker_id in self._inter_broker_ports:
                port = self._inter_broker_ports[broker_id]
            elif name == "PLAINTEXT":
                port = broker.port
            else:
                port = broker.listener_ports.get(name)
            if not port:
                port = _registered_port(zk, broker_id, name)
            return (broker.host, port) if port else None

        for frm in self.ids:
            self.links[(frm, ZOOKEEPER)] = LinkProxy(f"{frm}->zookeeper", lambda: (zk_host, int(zk_port)))
            for to in self.ids:
                if to != frm:
                    self.links[(frm, to)] = LinkProxy(f"{frm}->{to}", lambda to=to: broker_address(to))

    def metadata(self, topics: list[str] | None = None, *, via: MinikafkaBroker | None = None):
        """A Metadata v1 answer from ``via`` (default: the first running, unpaused broker,
        preferring one that ZooKeeper can reach: a broker cut off answers from a stale view)."""
        from minikafka.protocol.apis import ApiKey

        answering = [b for b in self.ids if self.broker(b).running and not self.broker(b).paused]
        target = via or self.broker(next((b for b in answering if not self._is_cut(b, ZOOKEEPER)),
                                         next(iter(answering))))
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
            except (OSError, StopIteration) as exc:
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

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3,
                     timeout: float = 60.0, **configs: str) -> None:
        """CreateTopics on the controller, then wait until every partition has a leader and
        a full ISR in the controller's metadata, and every running broker knows its leaders.
        ``configs`` are topic configs with ``_`` for ``.`` (``min_insync_replicas="2"``)."""
        from minikafka.protocol.apis import ApiKey
        from minikafka.protocol.errors import ErrorCode

        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                            "assignments": [], "configs": [{"name": k.replace("_", "."), "value": str(v)}
                                                            for k, v in configs.items()]}],
                "timeout_ms": int(timeout * 1000)}
        deadline = time.monotonic() + timeout
        while True:
            answer = kafka_request(self._controller_broker().bootstrap, ApiKey.CREATE_TOPICS, 0, body, timeout)
            code = answer.topics[0].error_code
            if code == ErrorCode.NONE:
                break
            if code != ErrorCode.NOT_CONTROLLER or time.monotonic() > deadline:
                raise ControlError(f"CreateTopics {name}: {ErrorCode(code).name}")
            time.sleep(0.1)
        self.wait_for_full_isr([name], timeout=timeout)
        # The controller delivers to each broker on its own (its own metadata may come first),
        # and a test may ask any broker next.
        for broker_id in self._registered():
            broker = self.broker(broker_id)
            if broker.running and not broker.paused:
                self.wait_until(lambda m: all(_leader_in(m, name, p) not in (None, -1) for p in range(partitions)),
                                f"{name} led as broker {broker_id} sees it", max(deadline - time.monotonic(), 1.0),
                                via=broker)

    def wait_for_full_isr(self, topics: list[str] | None = None, timeout: float | None = None):
        """Wait until every partition (of ``topics``, default all) has a leader and every
        assigned replica in its ISR, as the controller reports it; returns that metadata."""
        def complete(metadata) -> bool:
            listed = [t for t in metadata.topics if topics is None or t.name in topics]
            if topics is not None and len(listed) < len(topics):
                return False
            return all(t.error_code == 0 and p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
                       for t in listed for p in t.partitions)

        return self.wait_until(complete, f"every partition fully in sync ({topics or 'all topics'})",
                               timeout or self.fault_timeout, via=self._controller_broker())

    # ------------------------------------------------------------------ faults

    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker; returns once ZooKeeper has expired its session and the
        controller has moved its leaderships (it counts as gone in the controller's metadata)."""
        self.broker(broker_id).kill()
        self._wait_registered(broker_id, False)

    def stop(self, broker_id: int) -> None:
        """Controlled shutdown (SIGTERM: the broker asks the controller to move its
        leaderships first); returns once the controller counts it as gone."""
        self.broker(broker_id).stop()
        self._wait_registered(broker_id, False)

    def restart(self, broker_id: int, *, clean: bool = True) -> None:
        """Start a stopped or killed broker again on its data directory (a running one is
        stopped first: SIGTERM, or SIGKILL with ``clean=False``); returns once the controller
        counts it as live. It rejoins its partitions' ISRs once it has caught up
        (``wait_for_full_isr``)."""
        broker = self.broker(broker_id)
        if broker.running:
            if clean:
                self.stop(broker_id)
            else:
                self.kill(broker_id)
        broker.start()
        self._wait_registered(broker_id, True)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP the broker; returns once the kernel reports it stopped. The cluster notices
        after ``zookeeper.session.timeout.ms``, when its session expires."""
        self.broker(broker_id).pause()

    def resume(self, broker_id: int) -> None:
        """SIGCONT a paused broker; returns once it runs again."""
        self.broker(broker_id).resume()

    def partition(self, group_a, group_b=None) -> None:
        """Cut every link between the two groups of broker ids (``ZOOKEEPER`` names the
        ZooKeeper server; ``group_b`` defaults to everything not in ``group_a``, ZooKeeper
        included). Live connections are closed and new ones refused, both ways. Returns once
        the links are cut and, for running brokers cut from ZooKeeper, once ZooKeeper has
        expired their sessions (after ``zookeeper.session.timeout.ms``) and the controller,
        if one is left, counts them as gone. Cuts add up until :meth:`heal`."""
        if not self.use_links:
            raise ControlError("this cluster was started with links=False: its brokers connect directly")
        nodes = set(self.ids) | {ZOOKEEPER}
        a = set(group_a)
        b = nodes - a if group_b is None else set(group_b)
        unknown = (a | b) - nodes
        if unknown or a & b or not a or not b:
            raise ValueError(f"partition: groups {sorted(a, key=str)} and {sorted(b, key=str)} must be "
                             f"disjoint, non-empty sets of {sorted(nodes, key=str)}")
        for x in a:
            for y in b:
                for link in ((x, y), (y, x)):
                    if link in self.links:
                        self.links[link].cut()
        cut_from_zk = [x for x in (a if ZOOKEEPER in b else b if ZOOKEEPER in a else ())
                       if x != ZOOKEEPER and self.broker(x).running]
        for broker_id in cut_from_zk:
            self._wait_registered(broker_id, False)

    def heal(self) -> None:
        """Reconnect every cut link; returns once every running, unpaused broker is
        registered again and the controller counts it as live."""
        for link in self.links.values():
            link.heal()
        for broker in self.brokers:
            if broker.running and not broker.paused:
                self._wait_registered(self.brokers.index(broker) + 1, True)

    def _is_cut(self, frm: int, to: int | str) -> bool:
        link = self.links.get((frm, to))
        return link is not None and link.cut_off

    def cut_links(self) -> list[tuple[int, int | str]]:
        """The directed links cut now."""
        return sorted((k for k, link in self.links.items() if link.cut_off), key=str)

    def move_leader(self, topic: str, partition: int, to: int) -> None:
        """Make broker ``to`` the partition's leader through the controller: the request goes
        to ZooKeeper's ``/admin/preferred_replica_election`` as kafka-preferred-replica-election.sh
        writes it, with ``to`` in minikafka's ``minikafka.leader`` field (the assignment's
        order is left alone). Returns once every live broker's metadata shows the new leader;
        ControlError if the controller refused (``to`` is not a live replica in the ISR)."""
        from kazoo.exceptions import NodeExistsError

        from minikafka.replication.kafka_zk import (
            PREFERRED_REPLICA_ELECTION_PATH, decode_leader_isr, encode_preferred_replica_election,
            partition_state_path,
        )

        zk = self._zk()
        deadline = time.monotonic() + self.fault_timeout
        request = encode_preferred_replica_election([(topic, partition, to)])
        while True:
            try:
                zk.create(PREFERRED_REPLICA_ELECTION_PATH, request, makepath=True)
                break
            except NodeExistsError:  # the controller is still on an earlier request
                self._before(deadline, "the previous preferred replica election to finish")
        while zk.exists(PREFERRED_REPLICA_ELECTION_PATH) is not None:
            self._before(deadline, f"a controller to take the election of {topic}-{partition}")
        state = decode_leader_isr(topic, partition, zk.get(partition_state_path(topic, partition))[0])
        if state.leader != to:
            raise ControlError(f"{topic}-{partition}: the controller did not elect broker {to} "
                               f"(leader {state.leader}, ISR {state.isr})")
        for broker_id in self._registered():
            broker = self.broker(broker_id)
            if broker.running and not broker.paused:
                self.wait_until(lambda m: _leader_in(m, topic, partition) == to,
                                f"leader of {topic}-{partition} {to} as broker {broker_id} sees it",
                                max(deadline - time.monotonic(), 1.0), via=broker)

    def _before(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"cluster: waited {self.fault_timeout} s for {what}")
        time.sleep(0.05)

    def _zk(self):
        """The fixture's own ZooKeeper session (direct, never through a link proxy)."""
        if self._kazoo is None:
            from kazoo.client import KazooClient

            hosts = self.zookeeper_connect.split("/", 1)[0]
            root = KazooClient(hosts=hosts)  # the chroot first: SCRAM users go in before any broker
            root.start(timeout=15)
            try:
                root.ensure_path(self.chroot)
            finally:
                root.stop()
                root.close()
            self._kazoo = KazooClient(hosts=self.zookeeper_connect)
            self._kazoo.start(timeout=15)
        return self._kazoo

    def _registered(self) -> set[int]:
        return {int(child) for child in self._zk().get_children("/brokers/ids")}

    def _controller_broker(self) -> MinikafkaBroker:
        deadline = time.monotonic() + self.fault_timeout
        while True:
            found = self._zk().get("/controller") if self._zk().exists("/controller") else None
            if found is not None:
                from minikafka.replication.kafka_zk import decode_controller

                broker = self.broker(decode_controller(found[0]))
                if broker.running and not broker.paused:
                    return broker
            self._before(deadline, "a controller")

    def _wait_registered(self, broker_id: int, live: bool) -> None:
        """Until ZooKeeper holds (or has dropped) the broker's registration and every broker
        the controller can reach has metadata that agrees (so any client sees the change); a
        cluster where no broker can become controller is judged by ZooKeeper alone."""
        deadline = time.monotonic() + self.fault_timeout
        state = "live" if live else "gone"
        while (broker_id in self._registered()) != live:
            self._before(deadline, f"broker {broker_id} {state} in ZooKeeper")
        pending = None
        while True:
            try:
                # When the broker's session ends, so does a controllership it held: wait for the
                # next controller, if any broker can still reach ZooKeeper to become one.
                if not any(self.broker(b).running and not self.broker(b).paused and not self._is_cut(b, ZOOKEEPER)
                           for b in self.ids if b != broker_id or live):
                    return
                controller = self._controller_broker()
                controller_id = self.brokers.index(controller) + 1
                observers = [b for b in self._registered()
                             if self.broker(b).running and not self.broker(b).paused
                             and not self._is_cut(controller_id, b)]
                pending = [b for b in observers
                           if (broker_id in {n.node_id for n in self.metadata(via=self.broker(b)).brokers}) != live]
                if not pending:
                    return
            except OSError:
                pass
            self._before(deadline, f"broker {broker_id} {state} in the metadata of brokers {pending}")

    def close(self) -> None:
        try:
            close_all(self.brokers)
        finally:
            for link in self.links.values():
                link.close()
            if self._kazoo is not None:
                self._kazoo.stop()
                self._kazoo.close()
            if self._own_zookeeper is not None:
                self._own_zookeeper.stop()

    def __enter__(self) -> "MinikafkaCluster":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc_info) -> None:
        self.close()


def close_all(things) -> None:
    """Close every broker or cluster, then raise the first ``BrokerCrashed`` among them."""
    crashes = []
    for thing in things:
        try:
            thing.close()
        except BrokerCrashed as crash:
            crashes.append(crash)
    if crashes:
        raise crashes[0]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _registered_port(zk, broker_id: int, listener: str) -> int | None:
    """The port of ``listener`` in the broker's ZooKeeper registration (None: not registered)."""
    from kazoo.exceptions import NoNodeError

    from minikafka.replication.kafka_zk import decode_broker

    try:
        raw, _ = zk.get(f"/brokers/ids/{broker_id}")
    except NoNodeError:
        return None
    address = decode_broker(broker_id, raw).endpoints.get(listener)
    return address[1] if address else None


def _leader_in(metadata, topic: str, partition: int) -> int | None:
    for entry in metadata.topics:
        if entry.name == topic:
            for p in entry.partitions:
                if p.partition_index == partition:
                    return p.leader_id
    return None


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


def _write_properties(path: Path, props: dict[str, str]) -> Path:
    """A properties file only its owner reads: secrets go there rather than on the command
    line, which the broker's stderr file records."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        for key, value in props.items():
            out.write(f"{key}={value.replace(chr(92), chr(92) * 2)}\n")
    return path


def _jaas_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


@pytest.fixture(scope="session")
def minikafka_ca():
    """One ``trustme.CA`` per test session: it signs every TLS broker's certificate and the
    client certificates for mutual TLS."""
    return new_ca()


def new_ca():
    """A fresh ``trustme.CA``; the package comes with the ``testing`` extra, so a project
    that installed minikafka without it is told the one command that fixes it."""
    try:
        import trustme
    except ModuleNotFoundError:
        pytest.fail("minikafka's TLS fixtures need trustme: pip install 'minikafka[testing]'", pytrace=False)
    return trustme.CA()


@pytest.fixture
def minikafka_broker_factory(tmp_path_factory, request):
    """Factory: ``minikafka_broker_factory(**{"message.max.bytes": "2000"})`` -> started broker.

    Keyword arguments are Kafka broker config names with string values, plus
    ``security_protocol`` ("SSL", "SASL_PLAINTEXT", "SASL_SSL"), ``sasl_mechanism`` ("PLAIN",
    "SCRAM-SHA-256", "SCRAM-SHA-512"), ``users`` ({name: password}) and ``ssl_client_auth``
    ("none", "requested", "required"); every broker made is stopped when the test ends.
    """
    brokers: list[MinikafkaBroker] = []

    def make(*, security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
             users: dict[str, str] | None = None, ssl_client_auth: str = "none",
             **overrides: str) -> MinikafkaBroker:
        ca = request.getfixturevalue("minikafka_ca") if security_protocol.upper() in ("SSL", "SASL_SSL") else None
        broker = MinikafkaBroker(tmp_path_factory.mktemp("minikafka"), overrides,
                                 security_protocol=security_protocol, sasl_mechanism=sasl_mechanism,
                                 users=users, ssl_client_auth=ssl_client_auth, ca=ca)
        brokers.append(broker)
        return broker.start()

    yield make
    close_all(brokers)


@pytest.fixture
def minikafka_broker(minikafka_broker_factory) -> MinikafkaBroker:
    """A running broker with default settings, on a free port, private to this test."""
    return minikafka_broker_factory()


@pytest.fixture(scope="session")
def minikafka_zookeeper(tmp_path_factory):
    """One ZooKeeper server (Debian's ``zookeeper`` package, Java) for the test session; each
    cluster takes a chroot of its own in it, so clusters never see each other's nodes."""
    from minikafka.replication.zk_server import ZooKeeperServer

    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture
def minikafka_cluster_factory(tmp_path_factory, minikafka_zookeeper, request):
    """Factory: ``minikafka_cluster_factory(brokers=3, **{"min.insync.replicas": "2"})`` ->
    a started :class:`MinikafkaCluster` (broker config overrides as keyword arguments, string
    values); every cluster made is closed when the test ends, with its link proxies.

    As with ``minikafka_broker_factory``, ``security_protocol``, ``sasl_mechanism``, ``users``
    and ``ssl_client_auth`` secure it (certificates from the session's ``minikafka_ca``; the
    brokers replicate over that listener too), and ``cluster.client_config()`` gives a
    client's settings; ``links=False`` connects the brokers without link proxies."""
    clusters: list[MinikafkaCluster] = []

    def make(brokers: int = 3, *, security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
             users: dict[str, str] | None = None, ssl_client_auth: str = "none", links: bool = True,
             **overrides: str) -> MinikafkaCluster:
        ca = request.getfixturevalue("minikafka_ca") if security_protocol.upper() in ("SSL", "SASL_SSL") else None
        cluster = MinikafkaCluster(tmp_path_factory.mktemp("minikafka-cluster"), brokers, overrides,
                                   zookeeper=minikafka_zookeeper.connect_string, links=links,
                                   security_protocol=security_protocol, sasl_mechanism=sasl_mechanism,
                                   users=users, ca=ca, ssl_client_auth=ssl_client_auth)
        clusters.append(cluster)
        try:
            return cluster.start()
        except BaseException:
            clusters.remove(cluster)
            cluster.close()
            raise

    yield make
    close_all(clusters)


@pytest.fixture
def minikafka_cluster(minikafka_cluster_factory) -> MinikafkaCluster:
    """Three brokers (ids 1, 2, 3) and a ZooKeeper, private to this test."""
    return minikafka_cluster_factory()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for broker in list(_LIVE_BROKERS):
            report.sections.append((f"minikafka broker stderr ({broker.bootstrap})", broker.stderr_tail()))


def pytest_unconfigure(config):
    if _WARM_STARTER is not None:
        _WARM_STARTER.close()
