"""The built wheel installs one import name, ``minikafka``, and lives beside a user's own
top-level ``broker``, ``storage``, ``protocol``, ``export`` and ``replication`` packages.

Everything here runs from a wheel built from this checkout (``pip wheel``), never from the
editable install the rest of the suite uses.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from minikafka.protocol.records import build_message_set

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("broker", "protocol", "storage", "replication", "export")
# What a user project's tests need besides the wheel (its own runtime dependencies come from
# the wheel's metadata).
USER_TEST_DEPS = ("pytest", "pytest-trio", "kafka-python")


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{cmd} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
         "-w", out, REPO])
    (built,) = out.glob("minikafka-*.whl")
    return built


def make_venv(where: Path, *, system_site_packages: bool = False) -> Path:
    """A venv; with ``system_site_packages`` it also sees this interpreter's installed packages
    (PySpark, trio, ...) but not this checkout's editable install: that install is a finder
    that a ``.pth`` file starts, and it would answer for ``minikafka.*`` modules the wheel left
    out (the C accelerator). A path in a ``.pth`` of the venv's own is added to ``sys.path``
    without running the ``.pth`` files found there."""
    venv.EnvBuilder(with_pip=True).create(where)
    python = where / "bin" / "python"
    if system_site_packages:
        own = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
        # Every site-packages this interpreter has: a venv's own and, when it was made with
        # --system-site-packages (the helpers' venvs), its base interpreter's, where the
        # runtime dependencies (crcmod, ...) may be.
        system = site.getsitepackages()
        Path(own, "system-site-packages.pth").write_text("".join(f"{path}\n" for path in system))
    return python


def test_the_wheel_has_one_top_level_name(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["minikafka"]
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = archive.read(entry_points).decode()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"minikafka"}
    # Every package folder of the checkout is in the wheel (pyproject lists them one by one).
    for init in sorted(p for layer in LAYERS for p in (REPO / layer).rglob("__init__.py")):
        assert f"minikafka/{init.relative_to(REPO).as_posix()}" in names, f"{init} is not in the wheel"
    assert "minikafka = minikafka.broker.cli:main" in entry_points
    assert "minikafka = minikafka.broker.pytest_plugin" in entry_points
    # Built here with a compiler, the wheel carries the C accelerator (and not its source).
    assert [n for n in names if n.startswith("minikafka/protocol/_records")] == [
        n for n in names if n.startswith("minikafka/protocol/_records.") and n.endswith(".so")] != []


def test_without_a_compiler_the_wheel_installs_and_the_broker_runs_pure_python(tmp_path):
    """``CC=/nonexistent``: the optional extension fails to build, the wheel is made anyway,
    and the installed broker appends and serves with the pure-Python loops."""
    out, source = tmp_path / "wheel", tmp_path / "source"
    # A clean copy: the checkout may hold a compiled extension (editable install, build/).
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns("build", ".venv", "*.so", "*.egg-info", ".git",
                                                                "__pycache__", ".hypothesis"))
    env = {**os.environ, "CC": "/nonexistent"}
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", out, source],
        env=env)
    (built,) = out.glob("minikafka-*.whl")
    with zipfile.ZipFile(built) as archive:
        # the C accelerator (protocol/_records.*), not modules that merely end in _records.py
        assert not [n for n in archive.namelist() if n.rsplit("/", 1)[-1].startswith("_records.")]
    python = make_venv(tmp_path / "venv", system_site_packages=True)
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", built])
    check = textwrap.dedent("""
        import minikafka.protocol.records as records
        from minikafka.storage import FakeClock, Log, LogConfig
        assert records._native is None and not records.native_in_use(), records.__file__
        log = Log.create(__import__("pathlib").Path("log") / "t-0", "t", 0, LogConfig(), FakeClock(1_700_000_000_000))
        data = records.build_message_set([(None, b"v%d" % i, 1_700_000_000_000) for i in range(3)])
        assert log.append_as_leader(data).last_offset == 2
        print(records.__file__)
    """)
    where = run([python, "-c", check], cwd=tmp_path).stdout.strip()
    assert where.startswith(str(tmp_path / "venv")), where
    broker = subprocess.Popen([tmp_path / "venv" / "bin" / "minikafka", "serve", "--port", "0", "--ephemeral"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        while not (line := broker.stdout.readline()).startswith("minikafka ready: "):
            assert line, "the broker exited before it was ready"
        bootstrap = line.split("bootstrap.servers=")[1].split()[0]
        from kafka import KafkaConsumer, KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
        sent = [producer.send("pure", b"value %d" % i).get(timeout=30).offset for i in range(5)]
        producer.close()
        consumer = KafkaConsumer("pure", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=20000)
        got = [(r.offset, r.value) for r in consumer]
        consumer.close()
        assert got == [(offset, b"value %d" % i) for i, offset in enumerate(sent)]
    finally:
        broker.terminate()
        broker.wait(30)


def write_user_project(root: Path) -> None:
    """A messaging application with packages named like minikafka's layers, and its tests."""
    for layer in LAYERS:
        (root / layer).mkdir(parents=True)
        (root / layer / "__init__.py").write_text(f"OWNER = 'the application: {layer}'\n")
    (root / "broker" / "pytest_plugin.py").write_text("OWNER = 'the application: broker.pytest_plugin'\n")
    (root / "tests").mkdir()
    (root / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    (root / "tests" / "test_app.py").write_text(textwrap.dedent("""
        import importlib
        import os

        import minikafka.broker.cli
        from kafka import KafkaConsumer, KafkaProducer


        def test_own_packages_are_the_applications():
            for layer in ("broker", "protocol", "storage", "replication", "export"):
                module = importlib.import_module(layer)
                assert module.OWNER == f"the application: {layer}"
            assert importlib.import_module("broker.pytest_plugin").OWNER.endswith("pytest_plugin")


        def test_minikafka_comes_from_the_wheel():
            assert os.environ["VIRTUAL_ENV"] in minikafka.broker.cli.__file__


        def test_round_trip(minikafka_broker):
            producer = KafkaProducer(bootstrap_servers=minikafka_broker.bootstrap)
            sent = producer.send("signups", key=b"k", value=b"alice").get(timeout=30)
            producer.close()
            consumer = KafkaConsumer("signups", bootstrap_servers=minikafka_broker.bootstrap,
                                     auto_offset_reset="earliest", consumer_timeout_ms=20000)
            records = [(r.offset, r.key, r.value) for r in consumer]
            consumer.close()
            assert records == [(sent.offset, b"k", b"alice")]
        """))


def test_a_user_project_with_packages_named_like_ours(wheel, tmp_path):
    python = make_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel, *USER_TEST_DEPS])
    project = tmp_path / "app"
    write_user_project(project)
    env = {**os.environ, "VIRTUAL_ENV": str(tmp_path / "venv"), "PYTHONPATH": ""}
    env.pop("PYTEST_ADDOPTS", None)
    result = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=project, env=env)
    assert "3 passed" in result.stdout, result.stdout


@pytest.mark.spark
def test_spark_export_from_the_installed_wheel(wheel, tmp_path):
    """Spark's Python workers import the data source as ``minikafka.export.datasource`` from
    the wheel: a venv that sees this machine's PySpark but has minikafka only as the wheel."""
    python = make_venv(tmp_path / "venv", system_site_packages=True)
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", wheel])
    where = run([python, "-c", "import minikafka.export.datasource as d; print(d.__file__)"],
                cwd=tmp_path).stdout.strip()
    assert where.startswith(str(tmp_path / "venv")), where

    log_dir, out = tmp_path / "log", tmp_path / "out"
    partition_dir = log_dir / "events-0"
    partition_dir.mkdir(parents=True)
    t0 = 1_700_000_000_000
    for base in (0, 5):  # the segment at 5 is active: only 0..4 are exported
        data = b"".join(build_message_set([(b"k%d" % o, b"v%d" % o, t0 + o)], base_offset=o)
                        for o in range(base, base + 5))
        (partition_dir / f"{base:020d}.log").write_bytes(data)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON",
                                                            "PYSPARK_DRIVER_PYTHON")}
    result = run([tmp_path / "venv" / "bin" / "minikafka", "export", "--log-dir", log_dir, "--out", out,
                  "--master", "local[2]", "--no-progress"], cwd=tmp_path, env=env)
    assert "minikafka export: 1 segments, 5 records" in result.stdout + result.stderr, result.stdout + result.stderr
    (written,) = out.glob("events/dt=*/*.parquet")
    assert written.name == f"1_0_{0:020d}.parquet"
    rows = pq.read_table(written).to_pylist()
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(o, b"k%d" % o, b"v%d" % o) for o in range(5)]
