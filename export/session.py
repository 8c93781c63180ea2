"""A SparkSession set up for the export path (used by the CLI, the benchmark and the tests).

What it takes care of, measured on our machines (see the project notes):

* Python workers must run this interpreter (``PYSPARK_PYTHON``), not whatever ``python3`` is
  first on PATH, and must be able to import the ``export`` package: the repository root is
  put on the workers' ``PYTHONPATH`` as well, for checkouts that are not pip-installed.
* Dates for the ``dt=`` directories are computed in UTC (``spark.sql.session.timeZone``).
* For a local master the driver binds to 127.0.0.1 and the UI is off.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["spark_session", "worker_environment"]

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)


def worker_environment() -> None:
    """Point Spark's Python workers at this interpreter and this package (before the JVM starts)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _REPO_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([_REPO_ROOT, *paths])


def spark_session(master: str = "local[*]", app_name: str = "minikafka export"):
    """Get or create a SparkSession with the ``minikafka`` format registered."""
    worker_environment()
    from pyspark.sql import SparkSession

    from export.datasource import register

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"]))
    if master.startswith("local"):
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
