"""``minikafka serve`` as a user runs it: the ready line, one-line errors, clean shutdown."""

from __future__ import annotations

import ctypes
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.framing import ClientConnection

READY = re.compile(r"^minikafka ready: bootstrap\.servers=(\S+):(\d+) log\.dirs=(.+)$")
LAUNCH = [sys.executable, "-m", "minikafka.broker"]
REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 30, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)


PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def without_root_file_powers():
    """A ``preexec_fn`` that makes a root child obey file permissions, or None when not root.

    Root ignores a mode 000 directory through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH.
    Dropping both from the bounding set before exec leaves the broker (still uid 0, so it can
    read the interpreter and site-packages under a mode 700 /root) without them: a directory
    whose owner bits are 000 is then closed to it. Running it as 'nobody' instead is not an
    option where the interpreter's packages live under /root."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    return drop


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("minikafka")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert result.stdout == ""


class ServeProcess:
    """A ``minikafka serve`` subprocess waited on until its ready line."""

    def __init__(self, *args: str, preexec_fn=None) -> None:
        self.process = subprocess.Popen([*LAUNCH, "serve", *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=REPO,
                                        stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)
        line = self.process.stdout.readline()
        match = READY.match(line.strip())
        if match is None:
            self.process.kill()
            raise AssertionError(f"no ready line: {line!r} {self.process.stderr.read()}")
        self.host, self.port, self.log_dirs = match.group(1), int(match.group(2)), match.group(3)

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str]:
        self.process.send_signal(signum)
        try:
            _out, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        return self.process.returncode, err


def test_bad_flag_is_one_line():
    assert_one_line_error(run_cli("serve", "--no-such-flag"), "--no-such-flag")
    assert_one_line_error(run_cli("serve", "--port", "70000"), "70000")
    assert_one_line_error(run_cli("serve", "--log-dir", "x", "--ephemeral"), "not allowed with")


# Read without argparse (cli._plain_serve_args), and they must mean what argparse makes of them.
PLAIN_SERVE_LINES = [
    ["serve"],
    ["serve", "--port", "0", "--log-dir", "/tmp/data"],
    ["serve", "--host", "", "--port=9093", "--ephemeral", "--log-level", "DEBUG"],
    ["serve", "--config", "server.properties", "--override", "num.partitions=3", "--override=a=b=c",
     "--zookeeper", "zk:2181/kafka", "--broker-id", "2", "--export-to", "out", "--export-master",
     "local[2]", "--test-control", "--host=-odd", "--port", "1", "--port", "2"],
]
# Anything else goes to argparse: help, abbreviations, values that look like options or that it
# refuses (its own message then), the two data-directory options together.
ARGPARSE_SERVE_LINES = [
    ["serve", "--help"], ["serve", "--po", "1"], ["serve", "--broker-id", "-1"], ["serve", "--port", "x"],
    ["serve", "--port", "70000"], ["serve", "--log-level", "LOUD"], ["serve", "--override", "novalue"],
    ["serve", "--log-dir", "x", "--ephemeral"], ["serve", "--ephemeral=yes"], ["serve", "--port"],
    ["serve", "extra"], ["healthcheck"], [],
]


@pytest.mark.parametrize("argv", PLAIN_SERVE_LINES)
def test_a_plain_serve_command_line_reads_as_argparse_reads_it(argv):
    from minikafka.broker import cli

    plain = cli._plain_serve_args(argv)
    assert plain is not None
    assert vars(plain) == vars(cli.build_parser("serve").parse_args(argv))


@pytest.mark.parametrize("argv", ARGPARSE_SERVE_LINES)
def test_any_other_command_line_is_left_to_argparse(argv):
    from minikafka.broker import cli

    assert cli._plain_serve_args(argv) is None


def test_bad_config_key_and_value_are_one_line(tmp_path):
    assert_one_line_error(run_cli("serve", "--log-dir", str(tmp_path), "--override", "log.segmnt.bytes=10"),
                          "unknown config key 'log.segmnt.bytes'")
    assert_one_line_error(run_cli("serve", "--log-dir", str(tmp_path), "--override", "num.partitions=zero"),
                          "num.partitions")
    assert_one_line_error(run_cli("serve", "--override", "novalue"), "key=value")
    assert_one_line_error(run_cli("serve", "--config", str(tmp_path / "missing.properties")),
                          "cannot read config file", "missing.properties")


def test_busy_port_is_one_line(tmp_path):
    # The port is bound before storage loads (it listens only after): a busy port never
    # waits for a recovery, and the log dir is left as it was.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("serve", "--port", str(port), "--log-dir", str(tmp_path / "data"))
    assert_one_line_error(result, f"127.0.0.1:{port}", "address already in use")
    assert not (tmp_path / "data").exists()


def test_unusable_log_dir_is_one_line(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("I am a file")
    result = run_cli("serve", "--port", "0", "--log-dir", str(not_a_dir))
    assert_one_line_error(result, f"cannot use log dir {not_a_dir}: it is not a directory")
    under_a_file = not_a_dir / "data"
    result = run_cli("serve", "--port", "0", "--log-dir", str(under_a_file))
    assert_one_line_error(result, f"cannot use log dir {under_a_file}: Not a directory")
    result = run_cli("serve", "--port", "0", "--log-dir", "/proc/minikafka-data")
    assert_one_line_error(result, "cannot use log dir /proc/minikafka-data")


def test_unreadable_log_dir_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o000)
    try:
        result = run_cli("serve", "--port", "0", "--log-dir", str(locked), preexec_fn=without_root_file_powers())
    finally:
        locked.chmod(0o700)
    assert_one_line_error(result, f"cannot use log dir {locked}", "Permission denied")


def test_ready_line_then_sigterm_shuts_down_cleanly_and_restart_needs_no_recovery(tmp_path):
    data = tmp_path / "data"
    config = tmp_path / "server.properties"
    config.write_text("num.partitions=2\n")
    server = ServeProcess("--port", "0", "--log-dir", str(data), "--config", str(config))
    assert server.host == "127.0.0.1"
    assert server.log_dirs == str(data)
    # The file's num.partitions took effect: a topic auto-created by a client has 2 partitions.
    producer = KafkaProducer(bootstrap_servers=f"{server.host}:{server.port}")
    try:
        assert producer.partitions_for("auto-created") == {0, 1}
    finally:
        producer.close(10)
    assert (data / "auto-created-1").is_dir()
    assert not (data / ".kafka_cleanshutdown").exists()
    code, err = server.stop(signal.SIGTERM)
    assert code == 0, err
    assert "Traceback" not in err
    assert "shut down cleanly" in err
    assert (data / ".kafka_cleanshutdown").exists()
    assert (data / "recovery-point-offset-checkpoint").exists()

    again = ServeProcess("--port", "0", "--log-dir", str(data))
    assert not (data / ".kafka_cleanshutdown").exists()  # removed while the broker runs
    code, err = again.stop(signal.SIGINT)
    assert code == 0, err
    assert "not shut down cleanly" not in err and "rebuilding" not in err, err
    assert "SIGINT received" in err and "Traceback" not in err
    assert (data / ".kafka_cleanshutdown").exists()

    killed = ServeProcess("--port", "0", "--log-dir", str(data))
    killed.process.kill()
    killed.process.wait()
    after_kill = ServeProcess("--port", "0", "--log-dir", str(data))
    code, err = after_kill.stop()
    assert code == 0, err
    assert "was not shut down cleanly: recovering" in err


def test_sigterm_during_a_long_poll_fetch_exits_cleanly(tmp_path, fetch_body):
    data = tmp_path / "data"
    server = ServeProcess("--port", "0", "--log-dir", str(data))
    producer = KafkaProducer(bootstrap_servers=f"{server.host}:{server.port}")
    try:
        assert producer.partitions_for("empty") == {0}
    finally:
        producer.close(10)

    # A Fetch on the empty topic that may wait two minutes for a byte.
    client = ClientConnection(client_id="long-poll")
    with socket.create_connection((server.host, server.port), timeout=90) as sock:
        correlation_id, frame = client.send_request(ApiKey.FETCH, 2, fetch_body(
            [("empty", 0, 0, 1 << 20)], max_wait_ms=120_000, min_bytes=1))
        sock.sendall(frame)
        # Time for the broker to read the request and park it; were it not parked yet, the
        # test would only be a weaker SIGTERM test, never a wrong failure.
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        try:
            code = server.process.wait(timeout=60)  # well short of the two-minute long poll
        except subprocess.TimeoutExpired:
            server.process.kill()
            raise
        assert code == 0, server.process.stderr.read()
        # The in-flight Fetch was answered (with nothing) or dropped with its connection.
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        client.receive_data(received)
        response = client.next_response()
        if response is not None:
            assert response.correlation_id == correlation_id
            assert response.body.responses[0].partitions[0].records in (b"", None)
    err = server.process.stderr.read()
    assert "Traceback" not in err and "shut down cleanly" in err, err
    assert (data / ".kafka_cleanshutdown").exists()


def test_second_broker_on_the_same_log_dir_is_refused(tmp_path):
    server = ServeProcess("--port", "0", "--log-dir", str(tmp_path))
    try:
        result = run_cli("serve", "--port", "0", "--log-dir", str(tmp_path))
        assert_one_line_error(result, "another broker is using it")
    finally:
        server.stop()


def test_ephemeral_data_is_removed_on_exit():
    server = ServeProcess("--port", "0", "--ephemeral")
    data = Path(server.log_dirs)
    assert data.is_dir()
    code, err = server.stop()
    assert code == 0, err
    assert not data.exists()


def test_serve_lifts_the_soft_open_file_limit_to_the_hard_one(tmp_path):
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"hard open-file limit {hard} leaves nothing to lift")

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))

    server = ServeProcess("--port", "0", "--log-dir", str(tmp_path), preexec_fn=low_soft_limit)
    try:
        assert resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE)[0] == (
            10240 if hard == resource.RLIM_INFINITY else hard)
        # 40 partitions hold some 120 descriptors: far beyond the soft limit it was given.
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{server.port}")
        try:
            admin.create_topics([NewTopic("wide", 40, 1)])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{server.port}")
        try:
            assert producer.send("wide", b"last", partition=39).get(timeout=10).offset == 0
        finally:
            producer.close()
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert "Traceback" not in err and "raised the open-file limit from 64" in err


def ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback_available(), reason="no IPv6 loopback")
def test_ipv6_ready_line_is_a_bootstrap_address(tmp_path):
    server = ServeProcess("--host", "::1", "--port", "0", "--log-dir", str(tmp_path))
    try:
        assert server.host == "[::1]"
        bootstrap = f"{server.host}:{server.port}"
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        try:
            assert producer.send("v6", b"over ipv6").get(timeout=10).offset == 0
        finally:
            producer.close()
        if shutil.which("kcat"):
            listing = subprocess.run(["kcat", "-b", bootstrap, "-L", "-t", "v6"], capture_output=True,
                                     text=True, timeout=30)
            assert listing.returncode == 0, listing.stderr
            assert f"broker 0 at ::1:{server.port}" in listing.stdout  # Kafka's form: a bare host
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert f"serving on [::1]:{server.port}" in err


def test_test_control_is_announced_before_the_ready_line(tmp_path):
    process = subprocess.Popen([*LAUNCH, "serve", "--port", "0", "--log-dir", str(tmp_path / "data"),
                                "--test-control"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO, stdin=subprocess.DEVNULL)
    try:
        announcement = process.stdout.readline().strip()
        ready = process.stdout.readline().strip()
    finally:
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=30)
    assert re.fullmatch(r"minikafka test control: 127\.0\.0\.1:\d+", announcement), announcement + err
    assert READY.match(ready), ready
    assert process.returncode == 0, err


def test_busy_or_bad_test_control_port_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("serve", "--port", "0", "--log-dir", str(tmp_path / "data"),
                         "--override", f"minikafka.test.control.port={port}")
    assert_one_line_error(result, f"test control port 127.0.0.1:{port}")
    assert_one_line_error(run_cli("serve", "--log-dir", str(tmp_path / "data"), "--override",
                                  "minikafka.test.control.port=70000"), "minikafka.test.control.port", "70000")


def test_healthcheck_is_a_real_metadata_round_trip(minikafka_broker):
    assert run_cli("healthcheck", "--bootstrap", minikafka_broker.bootstrap).returncode == 0
    # An open port that does not speak Kafka is not healthy: it accepts, then hangs up.
    with socket.create_server(("127.0.0.1", 0)) as impostor:
        port = impostor.getsockname()[1]
        result = subprocess.Popen([*LAUNCH, "healthcheck", "--bootstrap", f"127.0.0.1:{port}", "--timeout", "5"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        conn, _ = impostor.accept()
        conn.close()
        stdout, stderr = result.communicate(timeout=30)
    assert result.returncode == 1
    assert_one_line_error(subprocess.CompletedProcess([], 1, stdout, stderr), "closed the connection")
    closed = run_cli("healthcheck", "--bootstrap", f"127.0.0.1:{port}")
    assert_one_line_error(closed, f"127.0.0.1:{port}", "refused")


def test_version_and_the_one_error_style_of_every_command(tmp_path):
    from importlib.metadata import version

    shown = run_cli("--version")
    assert shown.returncode == 0 and shown.stdout.strip() == f"minikafka {version('minikafka')}"
    # Every command's mistakes read "minikafka COMMAND: error: ...".
    for result, command in [(run_cli("serve", "--override", "log.retention.ms=soon", "--log-dir", str(tmp_path)), "serve"),
                            (run_cli("users", "remove", "nobody", "--log-dir", str(tmp_path)), "users"),
                            (run_cli("acls", "add", "--topic", "t", "--log-dir", str(tmp_path)), "acls"),
                            (run_cli("healthcheck", "--bootstrap", "127.0.0.1:1"), "healthcheck"),
                            (run_cli("cluster", "restart"), "cluster")]:
        assert_one_line_error(result, f"minikafka {command}: error: ")


def test_users_add_without_a_terminal_or_interrupted_is_one_line(tmp_path):
    # No terminal to ask on (standard input is /dev/null here) and no --password: say what to do.
    ended = run_cli("users", "add", "alice", "--log-dir", str(tmp_path))
    assert_one_line_error(ended, "minikafka users: error: no terminal to ask for the password on")
    # Ctrl-C while it waits for the password.
    waiting = subprocess.Popen([*LAUNCH, "users", "add", "alice", "--password-stdin", "--log-dir", str(tmp_path)],
                               cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    # Interrupted once it waits for the password: blocked in read(2) on its standard input
    # (/proc/PID/syscall starts "0 0x0"), not after a fixed sleep that a slow start outlasts
    # (a signal while Python still starts up is Python's own KeyboardInterrupt, not the CLI's).
    deadline = time.monotonic() + 30
    while not Path(f"/proc/{waiting.pid}/syscall").read_text().startswith("0 0x0 "):
        assert time.monotonic() < deadline, "minikafka users add never waited on its standard input"
        time.sleep(0.01)
    waiting.send_signal(signal.SIGINT)
    # Its standard input stays open until it has exited: communicate() closes it at once, and on
    # a loaded machine the end of input reached the read before the signal did ("the password
    # is empty", exit 1).
    waiting.wait(timeout=30)
    stdout, stderr = waiting.communicate(timeout=30)
    assert waiting.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.strip() == "minikafka users: interrupted", stderr
    assert run_cli("users", "list", "--log-dir", str(tmp_path)).stdout == ""
