"""``minikafka serve`` as a user runs it: the ready line, one-line errors, clean shutdown."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

READY = re.compile(r"^minikafka ready: bootstrap\.servers=(\S+):(\d+) log\.dirs=(.+)$")
LAUNCH = [sys.executable, "-m", "broker"]
REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, stdin=subprocess.DEVNULL)


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

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen([*LAUNCH, "serve", *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=REPO,
                                        stdin=subprocess.DEVNULL)
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


def test_bad_config_key_and_value_are_one_line(tmp_path):
    assert_one_line_error(run_cli("serve", "--log-dir", str(tmp_path), "--override", "log.segmnt.bytes=10"),
                          "unknown config key 'log.segmnt.bytes'")
    assert_one_line_error(run_cli("serve", "--log-dir", str(tmp_path), "--override", "num.partitions=zero"),
                          "num.partitions")
    assert_one_line_error(run_cli("serve", "--override", "novalue"), "key=value")
    assert_one_line_error(run_cli("serve", "--config", str(tmp_path / "missing.properties")),
                          "cannot read config file", "missing.properties")


def test_busy_port_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("serve", "--port", str(port), "--log-dir", str(tmp_path / "data"))
    assert_one_line_error(result, f"127.0.0.1:{port}", "address already in use")


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


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes a mode 000 directory anyway")
def test_unreadable_log_dir_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o000)
    try:
        result = run_cli("serve", "--port", "0", "--log-dir", str(locked))
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
    with socket.create_connection((server.host, server.port)):
        pass
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
