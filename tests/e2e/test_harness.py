"""``minikafka.testing``, the harness under the pytest fixtures: usable from any test runner
(nothing of it imports pytest), the same objects the plugin's documented names give, and
never imported by the server."""

from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import minikafka.testing
from minikafka.broker import pytest_plugin


def test_the_plugins_public_names_are_the_harness_objects():
    for name in pytest_plugin.__all__:
        assert getattr(pytest_plugin, name) is getattr(minikafka.testing, name), name
    assert set(minikafka.testing.__all__) >= set(pytest_plugin.__all__)


def test_the_harness_runs_a_broker_without_pytest(tmp_path):
    # `None` in sys.modules makes any import of pytest (or trustme) fail, as in a project that
    # has neither installed: the harness must not import pytest, even to report trustme missing.
    script = textwrap.dedent("""
        import sys
        sys.modules["pytest"] = None
        sys.modules["trustme"] = None
        from minikafka.protocol.apis import ApiKey
        from minikafka.testing import MinikafkaBroker, MinikafkaCluster, kafka_request
        from minikafka.testing.broker import TrustmeMissing

        with MinikafkaBroker(sys.argv[1] + "/plain") as broker:
            versions = kafka_request(broker.bootstrap, ApiKey.API_VERSIONS, 0, {})
            assert versions.error_code == 0 and versions.api_keys, versions
            broker.inject("Produce", ["NOT_LEADER_FOR_PARTITION"])
            assert broker.faults()["pending"], broker.faults()
        try:
            MinikafkaBroker(sys.argv[1] + "/tls", security_protocol="SSL")
        except TrustmeMissing as exc:
            print(exc)
    """)
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["minikafka's TLS fixtures need trustme: pip install 'minikafka[testing]'"]


def test_no_server_module_imports_the_harness():
    # The broker serves test control itself (broker/control.py, fault_injection.py); only the
    # plugin, which is test code, may import minikafka.testing.
    repo = Path(__file__).resolve().parents[2]
    server_modules = [path for layer in ("broker", "protocol", "storage", "replication", "export")
                      for path in (repo / layer).rglob("*.py") if path.name != "pytest_plugin.py"]
    assert server_modules
    importing = []
    for path in server_modules:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name == "minikafka.testing" or name.startswith("minikafka.testing.") for name in names):
                importing.append(str(path.relative_to(repo)))
    assert not importing, importing


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")
def test_starts_one_after_another_reuse_one_inotify_instance(tmp_path):
    # The harness waits for a broker's ready line with inotify; an instance is slow to close
    # (~10 ms), so a start takes an idle one, and gives it back, rather than closing it.
    from minikafka.testing import MinikafkaBroker

    def instances() -> int:
        links = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor, gone
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
        return links.count("anon_inode:inotify")

    idle_before = instances()  # kept by the brokers earlier tests of this process started
    for n in range(3):
        with MinikafkaBroker(tmp_path / str(n)):
            pass
        assert instances() == max(idle_before, 1)
