"""``minikafka export`` on a real Spark standalone cluster: a master and two workers, each its
own JVM with its own work dir, started from the installed PySpark.

The export is checked row for row against what a kafka-python consumer reads from the broker
(offsets, keys, values, timestamps, timestamp types), file by file against the Secor names,
and both workers must have run tasks (the application's event log says which executor ran
each task, the workers' work dirs which worker ran each executor). The daemons run with a
``python3`` on their PATH that fails: the executors' Python workers must be the driver's
interpreter (``PYSPARK_PYTHON``, the one minikafka is installed in), not whatever ``python3``
a worker finds. When the cluster stops, none of its processes may be left.

Workers that cannot run the data source (no such interpreter, or one without minikafka) make
``minikafka export`` fail with one line that says so, not Spark's stack traces.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from minikafka.export.session import worker_environment
from minikafka.export.standalone import StandaloneCluster
from minikafka.protocol.records import Codec
from minikafka.storage import list_segments

from .conftest import plain_segment, write_segments
from .test_against_broker import LAUNCHER, consume, create_topic, produce, produce_raw_magic0

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

SECOR_NAME = re.compile(r"(?P<generation>\d+)_(?P<partition>\d+)_(?P<first>\d{20})\.parquet")


def wrong_python(directory: Path) -> Path:
    """A directory whose ``python3`` / ``python`` exit with an error, to put first on a PATH."""
    directory.mkdir()
    for name in ("python3", "python"):
        script = directory / name
        script.write_text("#!/bin/sh\necho 'not the interpreter minikafka is installed in' >&2\nexit 97\n")
        script.chmod(0o755)
    return directory


def exported_rows(out: Path) -> tuple[list[tuple], dict[Path, list[tuple]]]:
    """Every exported row as the consumer's tuples, and the rows of each file."""
    by_file = {}
    for path in sorted(out.glob("*/dt=*/*.parquet")):
        rows = []
        for r in pq.read_table(path).to_pylist():
            timestamp = round(r["timestamp"].timestamp() * 1000)
            rows.append((r["topic"], r["partition"], r["offset"], r["key"], r["value"], timestamp,
                         r["timestampType"]))
        by_file[path] = rows
    return sorted(row for rows in by_file.values() for row in rows), by_file


def test_export_on_a_two_worker_standalone_cluster(tmp_path, minikafka_broker_factory):
    cluster = StandaloneCluster(tmp_path / "spark", workers=2, cores=1,
                                env={"PATH": f"{wrong_python(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"})
    try:
        cluster.start()  # the workers start up while the broker gets its records
        broker = minikafka_broker_factory(**{"log.message.format.version": "0.10.2", "log.segment.bytes": "4096"})
        create_topic(broker.bootstrap, "clicks", 3)
        produce(broker.bootstrap, "clicks", magic=1, codec=None, count=240, partitions=3)
        create_topic(broker.bootstrap, "views", 2)
        produce(broker.bootstrap, "views", magic=1, codec="gzip", count=600, partitions=2)
        create_topic(broker.bootstrap, "legacy", 1)  # magic 0: no timestamps, dt=unknown
        produce_raw_magic0(broker.bootstrap, "legacy", 300, Codec.NONE)
        consumed = consume(broker.bootstrap, ["clicks", "views", "legacy"], 1140)
        assert len(consumed) == 1140
        broker.stop()

        segments = [s for s in list_segments(broker.log_dir) if s.topic in ("clicks", "views", "legacy")]
        closed = [s for s in segments if s.closed]
        exported_up_to = {(s.topic, s.partition): s.base_offset for s in segments if not s.closed}
        assert len(exported_up_to) == 6 and all(exported_up_to.values())  # every partition has closed segments
        expected = [r for r in consumed if r[2] < exported_up_to[(r[0], r[1])]]

        cluster.wait_ready()
        out = tmp_path / "out"
        # Relative paths, as in the README: the executors run in their own work dirs.
        done = subprocess.run(
            [sys.executable, "-c", LAUNCHER, "export", "--log-dir", os.path.relpath(broker.log_dir, tmp_path),
             "--out", "out", "--master", cluster.master_url, "--no-progress"],
            cwd=tmp_path, env=cluster.driver_env(), capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"{done.stderr}\n{cluster.log_tail()}"
        assert re.fullmatch(rf"minikafka export: {len(closed)} segments, {len(expected)} records, "
                            rf"{len(closed)} files, .*", done.stderr.strip().splitlines()[-1]), done.stderr

        rows, by_file = exported_rows(out)
        assert rows == expected
        first_offsets = defaultdict(set)
        for path, file_rows in by_file.items():
            name = SECOR_NAME.fullmatch(path.name)
            assert name, path
            topic, date = path.parent.parent.name, path.parent.name
            offsets = [r[2] for r in file_rows]
            assert offsets == sorted(offsets)
            assert {(r[0], r[1]) for r in file_rows} == {(topic, int(name["partition"]))}
            assert int(name["generation"]) == 1 and int(name["first"]) == offsets[0]
            dates = {dt.datetime.fromtimestamp(r[5] / 1000, dt.UTC).strftime("%Y-%m-%d") if r[5] >= 0
                     else "unknown" for r in file_rows}
            assert {f"dt={d}" for d in dates} == {date}
            first_offsets[(topic, int(name["partition"]))].add(offsets[0])
        # One file per closed segment (no segment's records cross a date), named by its base offset.
        by_partition = defaultdict(set)
        for s in closed:
            by_partition[(s.topic, s.partition)].add(s.base_offset)
        assert first_offsets == by_partition

        app_ids = cluster.app_ids()
        assert len(app_ids) == 1
        tasks = cluster.tasks_per_worker(app_ids[0])
        # One task per segment, and each worker ran some of them.
        assert set(tasks) == {"worker-1", "worker-2"} and sum(tasks.values()) == len(closed), tasks
        assert {w["state"] for w in cluster.status()["workers"]} == {"ALIVE"}
    finally:
        cluster.stop()
    assert cluster.processes() == []


@pytest.mark.parametrize("interpreter", ["wrong", "without minikafka"])
def test_workers_that_cannot_run_the_data_source_fail_in_one_line(tmp_path, interpreter):
    """In local mode the same interpreter runs the driver's planning and the tasks: both are
    Spark Python workers. Nothing is exported or recorded."""
    log_dir = tmp_path / "logs"
    write_segments(log_dir, "t", 0, [plain_segment(0, 10), plain_segment(10, 10)])
    if interpreter == "wrong":
        python = str(wrong_python(tmp_path / "bin") / "python3")
        detail = "not the interpreter minikafka is installed in"
    else:
        # This interpreter with pyspark's and pyarrow's directories but no site processing, so
        # no .pth file: an editable minikafka (ours, or another checkout's) is not importable.
        import pyarrow
        import pyspark

        dirs = os.pathsep.join({str(Path(m.__file__).parents[1]) for m in (pyspark, pyarrow)})
        python = str(tmp_path / "python-without-minikafka")
        Path(python).write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{dirs}" '
                                f'exec {sys.executable} -S "$@"\n')
        Path(python).chmod(0o755)
        detail = "(no module named 'minikafka')"
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, "export", "--log-dir", str(log_dir), "--out", str(out),
         "--master", "local[1]", "--no-progress"],
        env=dict(os.environ, PYSPARK_PYTHON=python), capture_output=True, text=True, timeout=180)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"minikafka export: error: Spark's Python workers could not run the minikafka "
                           f"data source with {python} ("), done.stderr
    assert detail in last and "Traceback" not in done.stderr and "\tat org.apache" not in done.stderr
    assert not list(out.glob("t/*")) and not list(out.glob("_minikafka/progress/*"))


def test_only_a_local_master_pins_the_driver_to_loopback(monkeypatch):
    """Executors on other machines connect back to the address the driver advertises:
    ``SPARK_LOCAL_IP=127.0.0.1`` would make it ``localhost``. The interpreter is set for both."""
    for name in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    worker_environment("spark://spark-master.example:7077")
    assert "SPARK_LOCAL_IP" not in os.environ
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    worker_environment("local[2]")
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
