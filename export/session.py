"""A SparkSession set up for the export path (used by the CLI, the benchmark and the tests).

What it takes care of, measured on our machines (see the project notes):

* Python workers must run this interpreter (``PYSPARK_PYTHON``), not whatever ``python3`` is
  first on PATH: it is the one minikafka is installed in (a wheel, or ``pip install -e .``,
  whose import hook only that interpreter's site-packages loads), so the workers import
  ``minikafka.export.datasource`` as the driver does. The driver's ``PYTHONPATH``, if any,
  goes to the executors too.
* Dates for the ``dt=`` directories are computed in UTC (``spark.sql.session.timeZone``).
* The UI is off. For a local master the driver binds to 127.0.0.1 (``SPARK_LOCAL_IP`` too);
  for a cluster it must not: executors on other machines connect back to the address the
  driver advertises, and ``SPARK_LOCAL_IP=127.0.0.1`` would advertise ``localhost``.
* A master URL Spark would refuse is refused here first (``check_master``): Spark reports it
  from the JVM with a Java stack trace, after seconds of start-up.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys

__all__ = ["MissingExtra", "SparkStartError", "check_master", "python_worker_failure", "require_extra",
           "spark_session", "worker_environment"]

# The master URLs Spark 4 accepts (SparkContext's patterns; Mesos support is gone).
_MASTER_URL = re.compile(
    r"yarn|local|local\[(\*|\d+)(\s*,\s*\d+)?\]|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]"
    r"|spark://\S+|k8s://\S+")


class SparkStartError(RuntimeError):
    """Spark did not start (a master that cannot be reached, no Java...)."""


class MissingExtra(ModuleNotFoundError):
    """A package of the ``export`` extra is not installed; the message says how to get it."""


def require_extra(*names: str) -> None:
    """Raise MissingExtra naming the first of ``names`` that is not installed.

    Checked with ``find_spec``, not by importing: importing pyspark costs a third of a second,
    which a broker start with ``--export-to`` should not pay.
    """
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise MissingExtra(f"No module named {name!r}: pip install 'minikafka[export]'", name=name)


def check_master(master: str) -> None:
    """Raise ``ValueError`` unless ``master`` has the form of a Spark master URL."""
    if not _MASTER_URL.fullmatch(master):
        raise ValueError(f"{master!r} is not a Spark master URL "
                         "(local[*], local[N], spark://HOST:PORT, k8s://HOST:PORT or yarn)")


def worker_environment(master: str = "local[*]") -> None:
    """Point Spark's Python workers at this interpreter, and so this install (before the JVM starts).

    The path goes to the executors with each Python task, so on a cluster every worker needs
    this interpreter, with minikafka installed, at the same path (or set ``PYSPARK_PYTHON``
    to the workers' one before starting)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def python_worker_failure(error: str) -> str | None:
    """One line for the user, if Spark's ``error`` says its Python workers could not run the
    data source: the interpreter failed to start (``Error from python worker``, e.g. it does
    not exist on a worker) or lacks minikafka or its packages; ``None`` for any other error."""
    started = re.search(r"Error from python worker:\s*\n\s*(\S.*)", error)
    missing = re.search(r"ModuleNotFoundError: No module named '((?:minikafka|pyarrow)[^']*)'", error)
    if started is None and missing is None:
        return None
    detail = started.group(1).strip() if started is not None else f"no module named {missing.group(1)!r}"
    interpreter = os.environ.get("PYSPARK_PYTHON", "python3")
    return (f"Spark's Python workers could not run the minikafka data source with {interpreter} "
            f"({detail}): every Spark worker needs that interpreter, with minikafka installed, "
            "at the same path (or set PYSPARK_PYTHON to one that has it)")


def spark_session(master: str = "local[*]", app_name: str = "minikafka export"):
    """Get or create a SparkSession with the ``minikafka`` format registered.

    Raises ``ValueError`` for a malformed master URL, ``SparkStartError`` if Spark fails to start.
    """
    check_master(master)
    worker_environment(master)
    from pyspark.sql import SparkSession

    from minikafka.export.datasource import register

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.log.level", "ERROR"))  # from JVM start: no WARN noise in CLI output
    if os.environ.get("PYTHONPATH"):
        builder = builder.config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    if master.startswith("local"):
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"))
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # Py4J and PySpark errors of many kinds; the JVM has logged details
        cause = getattr(exc, "java_exception", None) or exc  # Py4J: the Java exception says more
        first_line = (str(cause).strip() or type(exc).__name__).splitlines()[0]
        raise SparkStartError(f"Spark did not start with master {master!r} (its log is above): "
                              f"{first_line}") from exc
    register(spark)
    return spark
