"""A throwaway Spark standalone cluster on this machine, from the installed PySpark.

For tests, benchmarks and trying ``minikafka export --master spark://...`` without a real
cluster: one master and ``workers`` workers on 127.0.0.1, each its own JVM process (started by
pyspark's ``bin/spark-class``, as Spark's ``sbin`` scripts do, which pip's pyspark lacks) with
its own work dir::

    with StandaloneCluster(tmp_path / "spark", workers=2) as cluster:
        subprocess.run(["minikafka", "export", "--master", cluster.master_url, ...],
                       env=cluster.driver_env())
        cluster.tasks_per_worker(cluster.app_ids()[-1])   # {"worker-1": 7, "worker-2": 5}

Layout under ``root``: ``conf/spark-defaults.conf`` (``SPARK_CONF_DIR`` of the daemons and,
through ``driver_env()``, of drivers), ``events/`` (every application's event log),
``worker-N/`` (work dirs: ``<app id>/<executor id>/`` holds an executor's stdout and stderr)
and ``logs/`` (the daemons' output). Everything the cluster starts shares one process group
per daemon (executors and their Python workers are children of the worker JVM), which
``stop()`` ends, so no JVM outlives the cluster.

No pyspark import: only the package's location is needed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

__all__ = ["ClusterStartError", "StandaloneCluster", "spark_home"]


class ClusterStartError(RuntimeError):
    """A daemon exited, or the cluster was not up in time (the daemons' logs are quoted)."""


def spark_home() -> Path:
    """The installed pyspark package: pip's pyspark is a complete SPARK_HOME (bin/, jars/)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("No module named 'pyspark' (pip install 'minikafka[export]')", name="pyspark")
    return Path(spec.origin).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Start-up over peak speed (short tasks on a small machine): C1 only, the serial collector.
_QUICK_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each) on 127.0.0.1.

    ``defaults`` adds to (or overrides) the ``spark-defaults.conf`` written for the cluster and
    its drivers; ``env`` to the environment the daemons (and so the executors and their Python
    workers) run in.
    """

    def __init__(self, root: Path | str, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                 executor_memory: str = "512m", defaults: dict[str, str] | None = None,
                 env: dict[str, str] | None = None, start_timeout: float = 90.0,
                 stop_timeout: float = 20.0) -> None:
        self.root = Path(root)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.conf_dir = self.root / "conf"
        self.event_dir = self.root / "events"
        self.log_dir = self.root / "logs"
        self.work_dirs = [self.root / f"worker-{i}" for i in range(1, workers + 1)]
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.port = 0
        self.web_port = 0
        self._extra_env = dict(env or {})
        self._processes: dict[str, subprocess.Popen] = {}
        self._groups: set[int] = set()
        self.defaults = {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": self.event_dir.as_uri(),
            # One plain JSON-lines file per application, readable without Spark.
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
            "spark.executor.memory": executor_memory,  # must fit a worker, or no executor starts
            # A job starts only once every worker has its executor: otherwise the first
            # executor to register can take all the tasks of a short job.
            "spark.cores.max": str(workers * cores),
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
            "spark.driver.extraJavaOptions": _QUICK_JVM,
            "spark.executor.extraJavaOptions": _QUICK_JVM,
        }
        self.defaults.update(defaults or {})

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def driver_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment for a driver process (``minikafka export``, ``spark-submit``) that
        picks up this cluster's ``spark-defaults.conf`` and talks to it over loopback."""
        env = dict(os.environ if base is None else base)
        env.update(SPARK_CONF_DIR=str(self.conf_dir), SPARK_LOCAL_IP="127.0.0.1")
        return env

    def _daemon_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SPARK_HOME=str(spark_home()), SPARK_CONF_DIR=str(self.conf_dir),
                   SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m",
                   SPARK_DAEMON_JAVA_OPTS=_QUICK_JVM)
        env.update(self._extra_env)
        return env

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> "StandaloneCluster":
        """Start the master, wait until it answers, then start the workers (without waiting
        for them: ``wait_ready()`` does, so other set-up can overlap their start-up)."""
        if self._processes:
            raise RuntimeError("the cluster is already started")
        for directory in (self.conf_dir, self.event_dir, self.log_dir, *self.work_dirs):
            directory.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{key} {value}\n" for key, value in self.defaults.items()))
        self.port, self.web_port = _free_port(), _free_port()
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.web_port))
        self._wait(lambda status: True, "the master's web UI to answer")
        for i, work_dir in enumerate(self.work_dirs, 1):
            self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                        "--cores", str(self.cores), "--memory", self.memory, "--webui-port", "0",
                        "--work-dir", str(work_dir), self.master_url)
        return self

    def wait_ready(self) -> "StandaloneCluster":
        """Block until every worker has registered with the master (ALIVE)."""
        self._wait(lambda status: status.get("aliveworkers") == self.workers,
                   f"{self.workers} workers to register")
        return self

    def _spawn(self, name: str, main_class: str, *args: str) -> None:
        with open(self.log_dir / f"{name}.log", "ab") as log:
            # spark-class execs the JVM: the process is the daemon itself. Its own session, so
            # that stop() can end the executors and Python workers it starts along with it.
            process = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main_class, *args],
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       env=self._daemon_env(), start_new_session=True)
        self._processes[name] = process
        self._groups.add(process.pid)

    def _wait(self, done, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            for name, process in self._processes.items():
                if process.poll() is not None:
                    raise ClusterStartError(f"Spark {name} exited with status {process.returncode} "
                                            f"while waiting for {what}:\n{self.log_tail()}")
            try:
                if done(self.status()):
                    return
            except (OSError, ValueError):  # not listening yet, or a partial answer
                pass
            time.sleep(0.25)
        raise ClusterStartError(f"timed out after {self.start_timeout:.0f} s waiting for {what}:\n"
                                f"{self.log_tail()}")

    def stop(self) -> None:
        """Stop the workers, then the master (SIGTERM: a worker kills its executors), then
        SIGKILL whatever is left of their process groups."""
        names = [name for name in self._processes if name != "master"] + ["master"]
        for name in names:
            process = self._processes.get(name)
            if process is not None and process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + self.stop_timeout
        for name in names:
            process = self._processes.get(name)
            if process is None:
                continue
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for group in self._groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._processes.clear()

    def __enter__(self) -> "StandaloneCluster":
        try:
            return self.start().wait_ready()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- what the cluster did -----------------------------------------------------------------

    def status(self) -> dict:
        """The master's JSON status (``/json/`` of its web UI): workers, applications."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            return json.load(response)

    def processes(self) -> list[int]:
        """Live processes the cluster started (daemons, executors, their Python workers), or
        any process whose command line names this cluster's directory (a driver's JVM)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                cmdline = (entry / "cmdline").read_bytes()
                in_group = os.getpgid(pid) in self._groups
            except (OSError, ProcessLookupError):
                continue  # gone meanwhile
            if cmdline and (in_group or str(self.root).encode() in cmdline):
                found.append(pid)
        return found

    def app_ids(self) -> list[str]:
        """Applications that ran on the cluster, oldest first (from their event logs)."""
        return sorted(path.name.removesuffix(".inprogress") for path in self.event_dir.glob("app-*"))

    def events(self, app_id: str) -> list[dict]:
        """An application's event log (Spark's listener events, one JSON object a line)."""
        path = self.event_dir / app_id
        if not path.exists():
            path = self.event_dir / f"{app_id}.inprogress"
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def tasks_per_worker(self, app_id: str) -> dict[str, int]:
        """Successful tasks of the application per worker (``worker-N``): the event log says
        which executor ran each task, the workers' work dirs which worker ran each executor."""
        worker_of = {}
        for work_dir in self.work_dirs:
            for executor_dir in (work_dir / app_id).glob("*"):
                worker_of[executor_dir.name] = work_dir.name
        counts: Counter[str] = Counter()
        for event in self.events(app_id):
            if (event["Event"] == "SparkListenerTaskEnd"
                    and event["Task End Reason"]["Reason"] == "Success"):
                counts[worker_of.get(event["Task Info"]["Executor ID"], "driver")] += 1
        return dict(counts)

    def log_tail(self, max_chars: int = 4000) -> str:
        tails = []
        for path in sorted(self.log_dir.glob("*.log")):
            tails.append(f"--- {path.name}\n{path.read_text(errors='replace')[-max_chars:]}")
        return "\n".join(tails)
