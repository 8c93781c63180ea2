"""README.md and docs/ stay true: their tables are generated from the code they describe.

- the config table (docs/configuration.md) from ``broker.config.config_table()`` (the broker's
  key table, as data);
- the API table (docs/protocol.md) from ``protocol.apis.api_versions_response(served=HANDLERS)``,
  exactly what the broker's ApiVersions handler answers.

Regenerate both after changing either with::

    python3 tests/e2e/test_readme.py

README's kafka-python, confluent-kafka and aiokafka examples ("Use it from a client") are run
twice against a real broker, with only the bootstrap address substituted; the "Faults on
demand" and "Faults on a cluster" examples of docs/testing.md are run as the pytest modules they
are.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
DOCS = README.parent / "docs"
# Which document holds each generated table.
TABLE_FILES = {"config-table": DOCS / "configuration.md", "api-table": DOCS / "protocol.md"}
BLOCKS = {
    "config-table": "generated from broker/config.py by tests/e2e/test_readme.py",
    "api-table": "generated from protocol.apis.api_versions_response by tests/e2e/test_readme.py",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_config_table() -> str:
    from minikafka.broker.config import config_table

    lines = ["| Key | Type | Default | Meaning |", "|---|---|---|---|"]
    for row in config_table():
        default = f"`{row['default']}`" if row["default"] != "" else "(unset)"
        lines.append(f"| `{row['name']}` | {row['type']} | {_cell(default)} | {_cell(row['description'])} |")
    return "\n".join(lines)


def render_api_table() -> str:
    """The table ApiVersions answers with: the protocol registry, restricted to the APIs the
    broker has a handler for (broker/handlers/api_versions.py)."""
    from minikafka.broker.handlers import HANDLERS
    from minikafka.protocol.apis import ApiKey, api_versions_response

    lines = ["| API | Key | Versions |", "|---|---|---|"]
    for entry in api_versions_response(served=HANDLERS)["api_keys"]:
        name = "".join(part.capitalize() for part in ApiKey(entry["api_key"]).name.split("_"))
        lines.append(f"| {name} | {entry['api_key']} | {entry['min_version']}–{entry['max_version']} |")
    return "\n".join(lines)


RENDERERS = {"config-table": render_config_table, "api-table": render_api_table}


def _markers(block: str) -> tuple[str, str]:
    return f"<!-- {block}:begin ({BLOCKS[block]}) -->", f"<!-- {block}:end -->"


def _span(text: str, block: str) -> tuple[int, int]:
    begin, end = _markers(block)
    start = text.index(begin) + len(begin)
    return start, text.index(end, start)


def test_docs_config_table_matches_broker_config():
    text = TABLE_FILES["config-table"].read_text()
    start, end = _span(text, "config-table")
    assert text[start:end].strip() == render_config_table(), (
        "docs/configuration.md's config table is stale: run python3 tests/e2e/test_readme.py")


def test_docs_api_table_matches_the_served_versions():
    text = TABLE_FILES["api-table"].read_text()
    start, end = _span(text, "api-table")
    assert text[start:end].strip() == render_api_table(), (
        "docs/protocol.md's API table is stale: run python3 tests/e2e/test_readme.py")


RUN_COMMAND = "pip install . && minikafka serve"
TEST_COMMAND = "bash tests/run.sh"


def _section_code(text: str, heading: str) -> list[str]:
    """The lines of the first fenced code block under ``## heading``."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    return [line for line in block.splitlines()[1:] if line.strip()]


def test_readme_gives_the_run_and_test_commands():
    text = README.read_text()
    assert _section_code(text, "Run it") == [RUN_COMMAND]
    assert _section_code(text, "Test it") == [TEST_COMMAND]


def test_ci_runs_the_readme_test_command():
    ci = (README.parent / ".ci" / "run").read_text()
    commands = [line.strip() for line in ci.splitlines()
                if line.strip() and not line.lstrip().startswith(("#", "set ", "cd "))]
    assert commands == [f"exec {TEST_COMMAND}"]


def test_docker_builds_wheels_then_runs_the_readme_run_command_unprivileged_with_a_health_check():
    """Docker is not available where the suite runs; these are the image's promises, and the
    commands of both stages were run by hand in fresh venvs (see the commit adding them)."""
    dockerfile = (README.parent / "docker" / "Dockerfile").read_text()
    builder, runtime = dockerfile.split("\nFROM ")[1:]
    assert builder.startswith("python:3.11-slim AS builder") and "gcc" in builder
    assert "RUN pip wheel --no-cache-dir --wheel-dir /wheels .\n" in builder
    assert runtime.startswith("python:3.11-slim\n") and "gcc" not in runtime and "COPY . ." not in runtime
    assert "pip install --no-cache-dir --no-index --find-links /wheels minikafka" in runtime
    user = runtime.index("\nUSER minikafka\n")
    assert "useradd" in runtime[:user]
    healthcheck = runtime.split("\nHEALTHCHECK ", 1)[1].split("\n\n", 1)[0]
    assert '"minikafka", "healthcheck", "--bootstrap", "127.0.0.1:9092"' in healthcheck
    _, run = RUN_COMMAND.split(" && ")
    cmd = runtime.split("\nCMD ", 1)[1]
    assert user < runtime.index("\nCMD ") and cmd.startswith(f"exec {run} ")
    assert "VOLUME /var/lib/minikafka" in runtime and "--log-dir /var/lib/minikafka" in cmd
    compose = (README.parent / "docker" / "compose.yaml").read_text()
    assert "dockerfile: docker/Dockerfile" in compose
    assert "- minikafka-data:/var/lib/minikafka" in compose


def test_docker_compose_profiles_start_what_they_say_with_health_checks_on_their_ports():
    """Docker is not available here: the compose file is checked as Docker reads it. Each
    service is in exactly one profile (so `--profile cluster` starts no single broker), the
    single broker publishes 9092, and each cluster broker's health check asks its own port."""
    import yaml

    services = yaml.safe_load((README.parent / "docker" / "compose.yaml").read_text())["services"]
    profiles = {name: service.get("profiles") for name, service in services.items()}
    assert profiles == {"minikafka": ["single"], "zookeeper": ["cluster"], "broker-1": ["cluster"],
                        "broker-2": ["cluster"], "broker-3": ["cluster"]}
    assert services["minikafka"]["ports"] == ["9092:9092"] and "healthcheck" not in services["minikafka"]
    for broker_id, port in ((1, 19092), (2, 19093), (3, 19094)):
        service = services[f"broker-{broker_id}"]
        command = service["command"].split()
        assert command[command.index("--port") + 1] == str(port)
        assert command[command.index("--broker-id") + 1] == str(broker_id)
        assert service["healthcheck"]["test"][:5] == ["CMD", "minikafka", "healthcheck", "--bootstrap", f"127.0.0.1:{port}"]
    readme = README.read_text()
    assert "docker compose -f docker/compose.yaml --profile single up --build" in readme
    assert "--profile cluster" in readme


def _client_example(text: str, client: str) -> str:
    """The ```python block under **client** in "Use it from a client"."""
    section = text.split("\n## Use it from a client\n", 1)[1].split("\n## ", 1)[0]
    after = section.split(f"\n**{client}**\n", 1)[1].lstrip("\n")
    assert after.startswith("```python\n"), f"README: no python block under **{client}**"
    return after[len("```python\n"):].split("\n```", 1)[0] + "\n"


def _replace(code: str, old: str, new: str, count: int = 1) -> str:
    """``code`` with ``old`` replaced, failing loudly if README's example no longer says it."""
    assert code.count(old) == count, (
        f"README's client example changed ({old!r} found {code.count(old)} times, expected {count}): "
        "update the substitutions in tests/e2e/test_readme.py")
    return code.replace(old, new)


def _kafka_python_example(code: str, bootstrap: str) -> str:
    return _replace(code, "127.0.0.1:9092", bootstrap, count=2)


def _confluent_example(code: str, bootstrap: str) -> str:
    return _replace(code, "127.0.0.1:9092", bootstrap, count=3)


def _aiokafka_example(code: str, bootstrap: str) -> str:
    return _replace(code, "127.0.0.1:9092", bootstrap, count=2)


# What each example prints for the one record it produced, on the first run (offset 0) and on
# a second run against the same broker (offset 1: the group's committed position skips the
# first run's record): CreateTime for kafka-python's (offset key value timestamp),
# LogAppendTime (type 2) on the example's "audit" topic for confluent-kafka's
# (partition offset value (type, timestamp)).
CLIENT_EXAMPLES = {
    "kafka-python": (_kafka_python_example, r"{run} b'user-1' b'signed up' (\d+)"),
    "confluent-kafka": (_confluent_example, r"[0-2] {run} b'v' \(2, (\d+)\)"),
    "aiokafka": (_aiokafka_example, r"{run} b'user-1' b'button-1' (\d+)"),
}


@pytest.mark.parametrize("client", CLIENT_EXAMPLES)
def test_readme_client_example_runs_twice(minikafka_broker, tmp_path, client):
    adapt, expected = CLIENT_EXAMPLES[client]
    code = adapt(_client_example(README.read_text(), client), minikafka_broker.bootstrap)
    for run in range(2):  # a user runs an example again: no TOPIC_ALREADY_EXISTS, no None message
        before = int(time.time() * 1000)
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                cwd=tmp_path, stdin=subprocess.DEVNULL)
        after = int(time.time() * 1000)
        assert result.returncode == 0, f"run {run + 1}: {result.stderr}"
        match = re.fullmatch(expected.format(run=run), result.stdout.strip())
        assert match, f"run {run + 1}: {result.stdout}{result.stderr}"
        assert before <= int(match.group(1)) <= after


def _run_example_module(section: str, tmp_path, passed: int) -> None:
    """The first python block of a section of docs/testing.md is a pytest module: run it as a
    user would, with the plugin installed."""
    text = (DOCS / "testing.md").read_text().split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    example = tmp_path / "test_readme_example.py"
    example.write_text(text.split("```python\n", 1)[1].split("\n```", 1)[0] + "\n")
    # --show-capture=no: a failure's report is its traceback and the brokers' stderr, not pages of
    # client log lines that push the assertion out of this test's message
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--show-capture=no",
                             str(example)],
                            capture_output=True, text=True, timeout=280, cwd=tmp_path,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout[:8000] + result.stderr[-3000:]
    assert re.search(rf"\b{passed} passed\b", result.stdout), result.stdout[-2000:]


def test_readme_fault_example_runs(tmp_path):
    _run_example_module("Faults on demand", tmp_path, passed=2)


@pytest.mark.zookeeper
@pytest.mark.timeout(300)
def test_readme_cluster_fault_example_runs(tmp_path):
    _run_example_module("Faults on a cluster", tmp_path, passed=1)


def regenerate() -> None:
    for block, render in RENDERERS.items():
        path = TABLE_FILES[block]
        text = path.read_text()
        start, end = _span(text, block)
        path.write_text(text[:start] + "\n" + render() + "\n" + text[end:])
        print(f"updated {path}")


if __name__ == "__main__":
    sys.path.insert(0, str(README.parent))
    regenerate()
