"""The clients' own integration suites against a minikafka broker (issue 28): measurement, not CI.

    python3 bench/client_suites.py --checkout kafka-python=DIR --checkout aiokafka=DIR \
        --checkout confluent-kafka-python=DIR [--timeout 900]

Each ``DIR`` is a checkout of the client's repository (for instance ``git --git-dir=<mirror>
worktree add`` or ``git archive | tar -x``). A single broker is started for each suite
(``auto.create.topics.enable`` on, as the suites expect), the suite is pointed at it the way
it accepts an external broker, and pytest's summary is read into a pass / fail / skip / error
table, printed as Markdown. A suite that cannot run here says why instead:

- kafka-python: ``test/integration`` with ``KAFKA_URI=kafka://host:port`` (its external-broker
  switch), ``KAFKA_VERSION`` (the broker version its version-gated tests compare against) and
  ``KAFKA_ROOT`` naming any directory (its fixtures check for a Kafka install even when external);
  the broker runs with its Kafka's group settings (1 s minimum session, no initial delay);
- confluent-kafka-python: ``tests/integration`` with ``BROKERS=host:port`` (its
  bring-your-own-cluster fixture); its conftest imports ``trivup`` whatever the cluster;
- aiokafka: its functional tests start Kafka in docker (``--docker-image``) and have no
  external-broker switch; ``bench/aiokafka_external_broker.py`` (a pytest plugin) replaces its
  docker fixtures with the broker's address (``AIOKAFKA_EXTERNAL_BROKER``), and the broker has
  two partitions per auto-created topic, as its docker Kafka (``NUM_PARTITIONS=2``). The
  checkout's C extensions are not built: ``AIOKAFKA_NO_EXTENSIONS=1``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from minikafka.protocol.apis import ApiKey
from minikafka.testing import MinikafkaBroker, kafka_request

_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


BENCH = Path(__file__).resolve().parent


def _suite(name: str, checkout: Path, bootstrap: str, kafka_version: str
           ) -> tuple[list[str], dict[str, str], list[str]]:
    """(pytest arguments, environment, Python modules it needs) of one client's suite."""
    if name == "kafka-python":
        return (["test/integration"], {"KAFKA_URI": f"kafka://{bootstrap}", "KAFKA_VERSION": kafka_version,
                                       "KAFKA_ROOT": str(checkout)}, [])
    if name == "confluent-kafka-python":
        return (["tests/integration"], {"BROKERS": bootstrap}, ["trivup"])
    if name == "aiokafka":
        return (["-p", "aiokafka_external_broker", "--docker-image", f"minikafka:{kafka_version}", "tests"],
                {"AIOKAFKA_EXTERNAL_BROKER": bootstrap, "AIOKAFKA_NO_EXTENSIONS": "1"},
                ["pytest_asyncio", "pytest_mock", "docker"])
    raise ValueError(f"unknown suite {name!r}")


# Broker settings each suite's own Kafka runs with (kafka-python's servers/resources/default/
# kafka.properties: its group tests use 3 s sessions; its KafkaFixture creates topics with 4
# partitions, which test_transactional_producer_offsets needs: it commits an offset of partition 1,
# and an offset of a partition that does not exist is refused as retriable, on Kafka too;
# aiokafka's docker NUM_PARTITIONS=2). The ACL tests need an authorizer, which each suite's Kafka
# has: kafka-python's KafkaFixture (_acl_config) lets everyone at a resource without ACLs,
# confluent-kafka-python's docker-compose makes the clients' principal, ANONYMOUS, a super user.
_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
_BROKER_SETTINGS = {"kafka-python": {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
                                     "num.partitions": "4", "authorizer.class.name": _AUTHORIZER,
                                     "allow.everyone.if.no.acl.found": "true"},
                    "confluent-kafka-python": {"authorizer.class.name": _AUTHORIZER, "super.users": "User:ANONYMOUS"},
                    "aiokafka": {"num.partitions": "2"}}
# Dynamic cluster defaults each suite's Kafka starts with: confluent-kafka-python's Kafka 4.2 (KRaft,
# ELR on, KIP-966) has its controller write min.insync.replicas at activation, and its
# test_incremental_alter_configs expects it on every topic as DYNAMIC_DEFAULT_BROKER_CONFIG.
_CLUSTER_DEFAULTS = {"confluent-kafka-python": {"min.insync.replicas": "1"}}


def set_cluster_defaults(bootstrap: str, settings: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET of ``settings`` on the cluster default (the empty broker name)."""
    answer = kafka_request(bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 4, "resource_name": "", "configs": [
            {"name": name, "config_operation": 0, "value": value} for name, value in settings.items()]}],
        "validate_only": False})
    if answer.responses[0].error_code:
        raise RuntimeError(f"cluster defaults {settings} refused: {answer.responses[0].error_message}")


def run_suite(name: str, checkout: Path, bootstrap: str, kafka_version: str, timeout: float,
              test_timeout: float) -> dict:
    arguments, environment, needs = _suite(name, checkout, bootstrap, kafka_version)
    missing = [module for module in needs if importlib.util.find_spec(module) is None]
    if missing:
        return {"suite": name, "note": f"not run: needs {', '.join(missing)}"}
    # A test that hangs (pytest-timeout) fails alone instead of stopping the whole suite.
    command = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-o", "addopts=",
               "-o", f"timeout={test_timeout:.0f}", *arguments]
    started = time.monotonic()
    try:
        finished = subprocess.run(command, cwd=checkout, env={**os.environ, **environment, "PYTHONPATH": f"{checkout}{os.pathsep}{BENCH}"},
                                  capture_output=True, text=True, timeout=timeout)
        output, note = finished.stdout + finished.stderr, ""
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        note = f"stopped after {timeout:.0f} s"
    summary = next((line for line in reversed(output.splitlines()) if _COUNTS.search(line)), "")
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in _COUNTS.findall(summary)}
    return {"suite": name, "command": " ".join(f"{k}={v}" for k, v in environment.items()) + " pytest "
            + " ".join(arguments), "seconds": round(time.monotonic() - started), "note": note,
            "failures": [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR test"))],
            "skips": [line for line in output.splitlines() if line.startswith("SKIPPED ")], **counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", action="append", default=[], metavar="SUITE=DIR", required=True)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per suite")
    parser.add_argument("--test-timeout", type=float, default=120.0,
                        help="seconds per test (kafka-python's waits up to its 60 s API timeout)")
    parser.add_argument("--kafka-version", default="3.0.0",
                        help="what kafka-python's version-gated tests take the broker for")
    parser.add_argument("--failures", action="store_true", help="list each failing test")
    parser.add_argument("--skips", action="store_true", help="list the skip reasons (pytest's -rs lines)")
    args = parser.parse_args()
    checkouts = dict(entry.split("=", 1) for entry in args.checkout)
    results = []
    for name, path in checkouts.items():
        with tempfile.TemporaryDirectory() as work, MinikafkaBroker(Path(work) / "broker", {
                "auto.create.topics.enable": "true", "num.partitions": "1", **_BROKER_SETTINGS.get(name, {})}) as broker:
            if name in _CLUSTER_DEFAULTS:
                set_cluster_defaults(broker.bootstrap, _CLUSTER_DEFAULTS[name])
            results.append(run_suite(name, Path(path).resolve(), broker.bootstrap, args.kafka_version, args.timeout,
                                     args.test_timeout))
    print("| suite | passed | failed | errors | skipped | seconds | note |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['suite']} | {r.get('passed', '-')} | {r.get('failed', '-')} | {r.get('error', '-')} | "
              f"{r.get('skipped', '-')} | {r.get('seconds', '-')} | {r.get('note', '')} |")
    for r in results:
        if "command" in r:
            print(f"\n{r['suite']}: {r['command']}")
        if args.failures:
            print("\n".join(r.get("failures", [])))
        if args.skips:
            print("\n".join(r.get("skips", [])))


if __name__ == "__main__":
    main()
