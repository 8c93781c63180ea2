"""``minikafka cluster`` as a place to practise failures: a killed broker stays dead while the
others serve, and ``minikafka cluster status|kill|restart|pause|resume`` act on the running
cluster from another process, as a user would from another terminal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def cluster_command(control: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minikafka.broker", "cluster", *args, "--control", control],
                          capture_output=True, text=True, timeout=120)


def wait_for_status(control: str, predicate, what: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        status = cluster_command(control, "status").stdout
        if predicate(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached; last status:\n{status}")
        time.sleep(0.5)


def produce(bootstrap: str, values: list[bytes]) -> list[tuple]:
    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000})
    for value in values:
        producer.produce("orders", value, on_delivery=lambda error, message: reports.append((error, message.value())))
    producer.flush(90)
    return reports


def leader_of(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[0].leader


def test_a_killed_broker_stays_dead_and_the_others_serve(tmp_path, zk_chroot):
    process = subprocess.Popen([sys.executable, "-m", "minikafka.broker", "cluster", "--brokers", "3",
                                "--base-port", "0", "--zookeeper", zk_chroot, "--log-dir", str(tmp_path / "data"),
                                "--override", "zookeeper.session.timeout.ms=4000"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = process.stdout.readline()
        assert ready.startswith("minikafka cluster ready: bootstrap.servers="), process.stderr.read()
        fields = dict(word.split("=", 1) for word in ready.split()[3:])
        bootstrap, control = fields["bootstrap.servers"], fields["control"]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("orders", 1, 3, config={"min.insync.replicas": "2"})])["orders"].result(30)
        wait_for_status(control, lambda s: "under-replicated partitions: 0" in s and "controller: broker" in s,
                        "a full ISR")
        assert produce(bootstrap, [b"before"]) == [(None, b"before")]

        leader = leader_of(bootstrap, "orders")
        killed = cluster_command(control, "kill", str(leader))
        assert killed.returncode == 0 and f"broker {leader} killed" in killed.stdout
        # The cluster command keeps running and the failover happens: the producer goes on.
        assert produce(bootstrap, [b"after"]) == [(None, b"after")]
        assert process.poll() is None
        status = wait_for_status(control, lambda s: "under-replicated partitions: 1" in s, "the shrunk ISR")
        assert f"broker {leader}  " in status and "killed" in status
        assert cluster_command(control, "kill", str(leader)).returncode == 1  # already dead: one line, no traceback

        assert cluster_command(control, "restart", str(leader)).returncode == 0
        wait_for_status(control, lambda s: "under-replicated partitions: 0" in s, "the restarted broker back in the ISR")

        other = next(b for b in (1, 2, 3) if b != leader)
        assert cluster_command(control, "pause", str(other)).returncode == 0
        assert "paused" in cluster_command(control, "status").stdout
        assert cluster_command(control, "resume", str(other)).returncode == 0
        unknown = cluster_command(control, "stop", "7")
        assert unknown.returncode == 1 and unknown.stdout.strip() == "minikafka cluster: error: no broker 7 (brokers: 1, 2, 3)"
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    assert "Traceback" not in process.stderr.read()


def test_commands_without_a_running_cluster_say_so_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "minikafka.broker", "cluster", "status", "--control", "127.0.0.1:1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith("minikafka cluster: error: no cluster answers at 127.0.0.1:1")
    assert len(result.stderr.strip().splitlines()) == 1
    missing = subprocess.run([sys.executable, "-m", "minikafka.broker", "cluster", "kill"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1
    assert missing.stderr.strip() == "minikafka cluster: error: kill needs a broker id, e.g. minikafka cluster kill 2"
