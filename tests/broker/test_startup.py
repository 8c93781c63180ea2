"""What ``minikafka serve`` loads before its ready line: only what serving needs (issue 17).

A real ``serve`` runs in a subprocess whose stdout is watched from inside: at the ready line it
writes down every imported module and stops itself with SIGTERM (a clean shutdown)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import os, signal, sys

    modules_file = sys.argv.pop(1)

    class Watch:
        def __init__(self, out):
            self.out = out

        def write(self, text):
            if text.startswith("minikafka ready:"):
                with open(modules_file, "w") as listing:
                    listing.write("\\n".join(sorted(sys.modules)))
                os.kill(os.getpid(), signal.SIGTERM)
            return self.out.write(text)

        def __getattr__(self, name):
            return getattr(self.out, name)

    sys.stdout = Watch(sys.stdout)
    from minikafka.broker.cli import main
    sys.exit(main(sys.argv[1:]))
""")

# Loaded on first use: consumer groups, cluster mode, export, the other subcommands, the
# security mechanisms of listeners that are not configured, codecs no set has used yet.
NOT_BEFORE_READY = (
    "minikafka.broker.groups.coordinator", "minikafka.broker.partitions.replicated", "minikafka.replication",
    "minikafka.export", "minikafka.broker.users_cli", "minikafka.broker.acls_cli",
    "minikafka.broker.cluster_cli", "minikafka.broker.fault_injection", "minikafka.broker.security.sasl",
    "minikafka.broker.security.scram", "minikafka.broker.security.acl", "minikafka.broker.security.tls",
    "javaproperties", "lz4", "snappy", "xxhash", "crcmod", "kazoo", "pyspark",
    # Building one dataclass costs 0.5-1 ms; records are NamedTuples or written out instead.
    "dataclasses",
    # A fresh log dir's cluster id and the -delete directories' names come from os.urandom.
    "uuid",
    # An ordinary serve command line is read without argparse (and gettext).
    "argparse", "gettext",
    # Handler modules are found by listing their directory.
    "pkgutil",
    # Handlers are imported on their API's first request.
    "minikafka.broker.handlers.join_group", "minikafka.broker.handlers.leader_and_isr",
    "minikafka.broker.handlers.produce", "minikafka.broker.handlers.fetch",
)


def modules_at_ready(tmp_path, *serve_args: str) -> set[str]:
    listing = tmp_path / "modules.txt"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(listing), "serve", "--port", "0", "--log-dir", str(tmp_path / "data"),
         *serve_args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return set(listing.read_text().split())


def loaded(modules: set[str], name: str) -> bool:
    return any(module == name or module.startswith(name + ".") for module in modules)


def test_serve_imports_only_what_serving_needs(tmp_path):
    modules = modules_at_ready(tmp_path)
    assert {"trio", "minikafka.broker.connection", "minikafka.storage.log"} <= modules
    assert [name for name in NOT_BEFORE_READY if loaded(modules, name)] == []


def test_a_configured_feature_is_loaded_before_ready(tmp_path):
    # The probe sees what it should: a properties file brings its parser in.
    config = tmp_path / "server.properties"
    config.write_text("num.partitions=2\n")
    assert loaded(modules_at_ready(tmp_path, "--config", str(config)), "javaproperties")

