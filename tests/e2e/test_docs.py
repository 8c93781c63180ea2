"""Every code block of README.md and docs/ runs in a test, as a user would run it.

Each block is known by its first line. The blocks this module runs are in ``RUN_HERE``; those
another test runs (a cluster, Spark, the nemesis: too heavy to run twice) are in
``RUN_ELSEWHERE`` with the test that does; Docker's commands cannot run where the suite runs,
so the compose file and Dockerfile they use are read as Docker reads them instead.
``test_every_code_block_is_run`` fails for a block in neither, so a new example needs a test.
Only addresses, ports, paths and the password a terminal would be typed are substituted.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minikafka.testing import MinikafkaBroker
from minikafka.testing.broker import READY_LINE

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LAUNCH = [sys.executable, "-m", "minikafka.broker"]


def code_blocks(path: Path) -> list[tuple[str, str]]:
    """``(info string, text)`` of each fenced block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(), re.S | re.M)


def block(path: Path, first_line: str) -> str:
    """The block of ``path`` whose first line starts with ``first_line``."""
    found = [text for _, text in code_blocks(path) if text.startswith(first_line)]
    assert len(found) == 1, f"{path.name}: {len(found)} blocks start with {first_line!r}"
    return found[0]


RUN_HERE = {
    "minikafka ready: bootstrap.servers=": "test_the_ready_lines_shown_are_the_ones_printed",
    "minikafka cluster ready: bootstrap.servers=": "test_the_ready_lines_shown_are_the_ones_printed",
    "echo 'user-1:signed up' | kcat": "test_readme_kcat_lines",
    "from kafka import KafkaProducer\n\ndef test_publishes_signup": "test_readme_fixture_example",
    "import pytest\nfrom minikafka.testing import MinikafkaBroker": "test_session_fixture_example",
    '{"op": "inject"': "test_control_port_lines",
    "import asyncio\n\nimport confluent_kafka": "test_security_client_examples",
    "from kafka import KafkaProducer\n\n\ndef test_sasl_ssl_replication": "test_security_cluster_example",
    "minikafka users add alice": "test_users_and_acls_commands",
    "minikafka acls add": "test_users_and_acls_commands",
    "listeners=": "test_security_properties_start_a_broker",
    "# the default; a contiguous range": "test_security_properties_start_a_broker",
    "import time\n\nfrom kafka import KafkaConsumer, KafkaProducer, TopicPartition": "test_readme_compaction_example",
    "# A transaction with ": "test_readme_transaction_examples",
}
RUN_ELSEWHERE = {
    "pip install . && minikafka serve": "tests/packaging/test_wheel.py::test_without_a_compiler_the_wheel_installs_and_the_broker_runs_pure_python",
    "bash tests/run.sh": "tests/e2e/test_readme.py::test_ci_runs_the_readme_test_command",
    "from kafka import KafkaConsumer, KafkaProducer": "tests/e2e/test_readme.py::test_readme_client_example_runs_twice",
    "from confluent_kafka import Consumer": "tests/e2e/test_readme.py::test_readme_client_example_runs_twice",
    "import asyncio\n\nfrom aiokafka": "tests/e2e/test_readme.py::test_readme_client_example_runs_twice",
    "from confluent_kafka import Producer": "tests/e2e/test_readme.py::test_readme_fault_example_runs",
    "from kafka import KafkaProducer\n\n\ndef test_orders_survive": "tests/e2e/test_readme.py::test_readme_cluster_fault_example_runs",
    "minikafka cluster --brokers 3": "tests/replication/test_cluster_command.py::test_a_killed_broker_stays_dead_and_the_others_serve",
    "minikafka cluster status": "tests/replication/test_cluster_command.py::test_a_killed_broker_stays_dead_and_the_others_serve",
    "minikafka export --log-dir ./minikafka-data --out ./exported": "tests/export/test_against_broker.py::test_replay_into_a_fresh_broker",
    "from minikafka.export.datasource import register": "tests/export/test_datasource.py::test_starting_timestamp",
    "SPARK_HOME=": "tests/export/test_spark_cluster.py::test_export_on_a_two_worker_standalone_cluster",
    "python3 bench/nemesis.py": "tests/replication/test_nemesis.py::test_a_seeded_nemesis_run_finds_no_violation",
    "python -m minikafka.replication.simulation": "tests/simulation/test_simulator.py::test_ci_seeds_find_no_violation",
    "python3 bench/bench_crash_loop.py": "tests/e2e/test_bench_crash_loop.py::test_a_few_cycles_lose_nothing",
    "docker compose": "tests/e2e/test_readme.py::test_docker_compose_profiles_start_what_they_say_with_health_checks_on_their_ports",
    "docker build": "tests/e2e/test_readme.py::test_docker_builds_wheels_then_runs_the_readme_run_command_unprivileged_with_a_health_check",
}


def _covering(text: str) -> str | None:
    for prefix, test in {**RUN_HERE, **RUN_ELSEWHERE}.items():
        if text.startswith(prefix):
            return test
    return None


def test_every_code_block_is_run():
    missing = [f"{path.name}: {text.splitlines()[0]!r}" for path in DOCUMENTS for _, text in code_blocks(path)
               if _covering(text) is None]
    assert not missing, "code blocks no test runs (add one to tests/e2e/test_docs.py):\n" + "\n".join(missing)
    here = globals()
    for test in RUN_HERE.values():
        assert test in here, test
    for reference in RUN_ELSEWHERE.values():
        path, name = reference.split("::")
        assert f"def {name}(" in (REPO / path).read_text(), reference


def _run_as_module(code: str, tmp_path: Path, passed: int, timeout: float = 280) -> None:
    module = tmp_path / "test_doc_example.py"
    module.write_text(code)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(module)],
                            capture_output=True, text=True, timeout=timeout, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert re.search(rf"\b{passed} passed\b", result.stdout), result.stdout[-2000:]


def test_the_ready_lines_shown_are_the_ones_printed():
    shown = block(REPO / "README.md", "minikafka ready:").strip()
    assert READY_LINE.match(shown), shown
    cluster = block(REPO / "docs" / "cluster.md", "minikafka cluster ready:").strip()
    assert re.fullmatch(r"minikafka cluster ready: bootstrap\.servers=(127\.0\.0\.1:\d+,){2}127\.0\.0\.1:\d+ "
                        r"zookeeper\.connect=\S+/minikafka control=127\.0\.0\.1:\d+", cluster), cluster


def test_readme_kcat_lines(minikafka_broker):
    lines = block(REPO / "README.md", "echo 'user-1:signed up'").strip().splitlines()
    outputs = []
    for line in lines:
        command = line.split("   #")[0].replace("127.0.0.1:9092", minikafka_broker.bootstrap)
        result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, (command, result.stderr)
        outputs.append(result.stdout)
    # offset key value timestamp of the message just produced, read from the beginning
    assert outputs[1].startswith("0 user-1 signed up ") and int(outputs[1].split()[-1]) > 1700000000000
    assert "signed up" in outputs[2]  # every message since the given time
    assert f"at {minikafka_broker.bootstrap}" in outputs[3] and 'topic "events"' in outputs[3]


def test_readme_fixture_example(tmp_path):
    _run_as_module(block(REPO / "README.md", "from kafka import KafkaProducer\n\ndef test_publishes_signup"),
                   tmp_path, passed=3)


def test_session_fixture_example(tmp_path):
    code = block(REPO / "docs" / "testing.md", "import pytest\nfrom minikafka.testing")
    # The example is a fixture; a test that uses it, twice, shows it is one broker for both.
    code += ("\n\ndef test_one(kafka):\n    assert kafka.running\n    test_one.port = kafka.port\n\n"
             "def test_two(kafka):\n    assert kafka.port == test_one.port\n")
    _run_as_module(code, tmp_path, passed=2)


def test_control_port_lines(minikafka_broker):
    lines = block(REPO / "docs" / "testing.md", '{"op": "inject"').strip().splitlines()
    with socket.create_connection(minikafka_broker.control_address, timeout=10) as sock:
        answers = sock.makefile("rb")
        for line in lines:
            sock.sendall(line.encode() + b"\n")
            answer = json.loads(answers.readline())
            assert answer["ok"] is True, (line, answer)
    assert answer.get("cleared") == 4  # the two injected errors, the delay and the drop were still queued


def test_security_client_examples(tmp_path):
    _run_as_module(block(REPO / "docs" / "security.md", "import asyncio\n\nimport confluent_kafka"), tmp_path, passed=2)


@pytest.mark.zookeeper
def test_security_cluster_example(tmp_path):
    _run_as_module(block(REPO / "docs" / "security.md", "from kafka import KafkaProducer\n\n\ndef test_sasl_ssl_replication"),
                   tmp_path, passed=1)


def _typed_password(command: list[str], password: str, cwd: Path) -> int:
    """Run ``command`` on a terminal of its own (getpass reads /dev/tty) and type ``password``."""
    import fcntl
    import termios

    leader, follower = pty.openpty()

    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower, cwd=cwd,
                               preexec_fn=controlling_terminal)
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 30
    while b"password" not in seen and time.monotonic() < deadline:
        if select.select([leader], [], [], 0.5)[0]:
            seen += os.read(leader, 1024)
    os.write(leader, password.encode() + b"\n")
    code = process.wait(30)
    os.close(leader)
    return code


def test_users_and_acls_commands(tmp_path):
    (tmp_path / "pw.txt").write_text("bob-secret\n")
    for first_line in ("minikafka users add alice", "minikafka acls add"):
        for line in block(REPO / "docs" / "security.md", first_line).strip().splitlines():
            command = line.split("  #")[0].strip()
            if command == "minikafka users add alice --log-dir ./data":  # prompts for the password
                assert _typed_password([*LAUNCH, *command.split()[1:]], "alice-secret", tmp_path) == 0
                continue
            result = subprocess.run(["bash", "-c", command.replace("minikafka ", f"{sys.executable} -m minikafka.broker ", 1)],
                                    capture_output=True, text=True, timeout=60, cwd=tmp_path)
            assert result.returncode == 0, (command, result.stderr)
            if command.startswith("minikafka users list"):
                assert result.stdout.splitlines()[0].startswith("alice\t") and "bob\t" in result.stdout
            if command.startswith("minikafka acls list"):
                assert "User:alice" in result.stdout and "User:mallory" in result.stdout
    from minikafka.broker.security.scram import CredentialStore

    assert sorted(CredentialStore(tmp_path / "data").users()) == ["alice"]  # bob removed at the end


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_security_properties_start_a_broker(tmp_path, minikafka_ca):
    """The listener and TLS settings as shown, with this machine's free ports and the test CA's
    files where the text has /etc/minikafka; the broker starts and opens every listener."""
    security = REPO / "docs" / "security.md"
    keystore, ca = tmp_path / "broker.pem", tmp_path / "ca.pem"
    minikafka_ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    minikafka_ca.cert_pem.write_to_path(str(ca))
    ports = {port: _free_port() for port in ("9092", "9093", "9094", "9095")}

    def adapted(text: str) -> str:
        text = text.replace("/etc/minikafka/broker.pem", str(keystore)).replace("/etc/minikafka/ca.pem", str(ca))
        for shown, free in ports.items():
            text = text.replace(f":{shown}", f":{free}")
        return text

    listeners = adapted(block(security, "listeners=PLAINTEXT://127.0.0.1:9092,SSL"))
    tls = block(security, "# the default; a contiguous range")
    # The inter-broker block names only what it adds: its SASL_SSL listener needs a keystore.
    inter_broker = adapted(block(security, "listeners=PLAINTEXT://:9092,SASL_SSL")) + (
        f"ssl.keystore.location={keystore}\nsasl.enabled.mechanisms=SCRAM-SHA-512\n")
    for name, properties, opened in (("listeners", listeners + tls, 4), ("inter-broker", inter_broker, 2)):
        (tmp_path / f"{name}.properties").write_text(properties)
        broker = MinikafkaBroker(tmp_path / name, test_control=False)
        broker.config_path = tmp_path / f"{name}.properties"
        broker.host = "127.0.0.1"
        try:
            broker.start()
            assert len(broker.listener_ports) == opened, broker.stderr_since_start()
        finally:
            broker.close()


def test_readme_compaction_example(tmp_path):
    _run_as_module(block(REPO / "README.md", "import time\n\nfrom kafka import KafkaConsumer, KafkaProducer, TopicPartition"),
                   tmp_path, passed=1)


def test_readme_transaction_examples(minikafka_broker):
    """Each client's transaction commits its orders record (the same transactional id, so each
    producer fences the one before, which has finished)."""
    import asyncio
    import textwrap

    from kafka import KafkaConsumer, TopicPartition

    for topic in ("orders", "invoices"):
        minikafka_broker.create_topic(topic)
    for _, text in code_blocks(REPO / "README.md"):
        if not text.startswith("# A transaction with "):
            continue
        code = text.replace("127.0.0.1:9092", minikafka_broker.bootstrap)
        if "await " in code:
            code = "import asyncio\n\nasync def main():\n" + textwrap.indent(code, "    ") + "\nasyncio.run(main())\n"
        exec(compile(code, "README.md", "exec"), {"asyncio": asyncio})
    consumer = KafkaConsumer(bootstrap_servers=minikafka_broker.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    partition = TopicPartition("orders", 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 3 and time.monotonic() < deadline:
        values += [record.value for records in consumer.poll(200).values() for record in records]
    consumer.close()
    assert values == [b"order-1"] * 3
