"""``minikafka export`` / ``replay`` on an install without the ``export`` extra: one line that
says what to install, never a ModuleNotFoundError traceback.

The packages are hidden from a real ``minikafka`` process by a launcher that sets
``sys.modules[name] = None`` before the CLI runs, which is how Python marks a module as
unimportable (both ``import`` and ``importlib.util.find_spec`` then see it as missing).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import plain_segment, write_segments

LAUNCHER = ("import sys\n"
            "for name in sys.argv[1].split(','):\n"
            "    sys.modules[name] = None\n"
            "from minikafka.broker.cli import main\n"
            "sys.exit(main(sys.argv[2:]))\n")


def run_without(hidden: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LAUNCHER, ",".join(hidden), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("hidden", [["pyspark"], ["pyarrow"], ["pyspark", "pyarrow"]])
def test_export_without_the_extra_prints_one_line(tmp_path, hidden):
    # Something to export: a closed segment and the active one after it.
    write_segments(tmp_path / "logs", "orders", 0, [plain_segment(0, 3), plain_segment(3, 2)])
    result = run_without(hidden, "export", "--log-dir", str(tmp_path / "logs"), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"minikafka export: error: No module named {hidden[0]!r}: pip install 'minikafka[export]'"]
    assert not (tmp_path / "out").exists()


def test_replay_without_the_extra_prints_one_line(tmp_path):
    (tmp_path / "out" / "orders").mkdir(parents=True)
    result = run_without(["confluent_kafka"], "replay", "--from", str(tmp_path / "out"), "--topic", "orders",
                         "--bootstrap", "127.0.0.1:1")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "minikafka replay: error: No module named 'confluent_kafka': pip install 'minikafka[export]'"]
