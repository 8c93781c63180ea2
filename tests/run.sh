#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, then runs it.
# Debian's kcat (a librdkafka 2.0 client), Java 17 for PySpark and ZooKeeper come from apt;
# Python packages (clients, pyspark, pyarrow) from PyPI via the [test] extra.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need_apt=()
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
# cluster-mode tests run a real ZooKeeper (replication/zk_server.py expects Debian's jar)
[ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
if [ ${#need_apt[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# The install builds the optional C accelerator (setup.py) when a compiler, Python's headers and
# zlib's are here; then the protocol and storage suites must run against it as well as the
# pure-Python loops, not skip it.
if command -v "${CC:-cc}" >/dev/null 2>&1 && python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
        && echo '#include <zlib.h>' | "${CC:-cc}" -E - >/dev/null 2>&1; then
    export MINIKAFKA_REQUIRE_NATIVE=1
fi
# Two workers, a test file each at a time (its module fixtures stay in one process): most of the
# suite's time is brokers, clusters and ZooKeeper sessions waiting, not CPU, so two workers
# halve it on a 2-core machine (43 -> 23 min). Files are handed out in pyproject's testpaths order,
# the longest first (xdist's default reorders them by test count, which put the simulator's few
# long tests last, running alone).
exec python3 -m pytest -n "${MINIKAFKA_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
