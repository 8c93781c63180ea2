"""The pytest plugin users get with minikafka: fixtures, restarts, overrides, failure reports."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from minikafka.testing import BrokerStartError, MinikafkaBroker


def produce(bootstrap, topic, value, **config):
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        return producer.send(topic, value).get(30)
    finally:
        producer.close(10)


def test_fixture_gives_a_private_running_broker(minikafka_broker, topic):
    host, port = minikafka_broker.bootstrap.split(":")
    assert host == "127.0.0.1" and int(port) > 0
    assert minikafka_broker.running
    assert produce(minikafka_broker.bootstrap, topic, b"hello").offset == 0
    assert (minikafka_broker.log_dir / f"{topic}-0").is_dir()


def test_an_ipv6_broker_gives_a_bracketed_bootstrap(tmp_path, topic):
    try:
        with MinikafkaBroker(tmp_path, host="::1") as broker:
            assert broker.bootstrap == f"[::1]:{broker.port}"
            assert produce(broker.bootstrap, topic, b"over ipv6").offset == 0
    except BrokerStartError as exc:
        if "cannot listen on ::1" in str(exc):
            pytest.skip("no IPv6 loopback")
        raise


def test_restart_keeps_the_port_and_the_data(minikafka_broker, topic):
    produce(minikafka_broker.bootstrap, topic, b"before")
    bootstrap = minikafka_broker.bootstrap
    minikafka_broker.restart()
    assert minikafka_broker.bootstrap == bootstrap
    assert produce(bootstrap, topic, b"after").offset == 1


def test_kill_then_start_recovers(minikafka_broker, topic):
    produce(minikafka_broker.bootstrap, topic, b"before")
    assert minikafka_broker.kill() == -9
    assert not minikafka_broker.running
    minikafka_broker.start()
    consumer = KafkaConsumer(bootstrap_servers=minikafka_broker.bootstrap)
    try:
        assert consumer.end_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 1}
    finally:
        consumer.close()


def test_factory_passes_config_overrides(minikafka_broker_factory, topic):
    broker = minikafka_broker_factory(**{"num.partitions": "3"})
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        produce(broker.bootstrap, topic, b"x")
        assert consumer.partitions_for_topic(topic) == {0, 1, 2}
    finally:
        consumer.close()


def test_stop_is_a_clean_shutdown(minikafka_broker):
    assert minikafka_broker.stop() == 0  # SIGTERM honoured: exit status 0, not SIGKILL's -9
    assert not minikafka_broker.running


def test_a_broker_that_cannot_start_raises_with_its_stderr(tmp_path):
    broker = MinikafkaBroker(tmp_path, {"no.such.key": "1"})
    with pytest.raises(BrokerStartError, match="no.such.key"):
        broker.start()
    assert not broker.running


def test_failing_test_report_carries_the_broker_stderr(tmp_path):
    (tmp_path / "test_user.py").write_text(textwrap.dedent("""
        def test_fails(minikafka_broker):
            assert minikafka_broker.running
            assert False, "user test failed"
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "user test failed" in result.stdout
    assert "minikafka broker stderr" in result.stdout
    assert "minikafka start #1" in result.stdout


def test_a_tests_teardown_does_not_wait_for_its_brokers_shutdown(tmp_path):
    # The first test's broker is frozen (SIGSTOP behind the harness's back), so its shutdown
    # cannot end: the second test still finds it there, stopped, with the teardown's SIGTERM
    # pending. It lets it go; the session's end reaps it.
    (tmp_path / "test_user.py").write_text(textwrap.dedent("""
        import os, signal

        frozen = []

        def test_freezes_its_broker(minikafka_broker):
            frozen.append(minikafka_broker.process.pid)
            os.kill(frozen[0], signal.SIGSTOP)

        def test_runs_while_it_stops(minikafka_broker):
            with open(f"/proc/{frozen[0]}/stat") as stat:
                assert stat.read().rsplit(")", 1)[1].split()[0] == "T"
            os.kill(frozen[0], signal.SIGCONT)
            print("frozen pid", frozen[0])
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:randomly",
                             "test_user.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    pid = int(result.stdout.split("frozen pid ")[1].split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.zookeeper
def test_a_clusters_teardown_does_not_wait_for_its_shutdowns_and_still_reports_a_crash(tmp_path):
    # As with a broker: the first test's cluster has a broker frozen behind the harness's back, so
    # the cluster's shutdown cannot end while the second test runs; the session's end (and the
    # ZooKeeper fixture's, which the shutdowns need) waits for it. A broker that died on its own
    # still fails its test at teardown.
    (tmp_path / "test_user.py").write_text(textwrap.dedent("""
        import os, signal

        frozen = []

        def test_freezes_a_broker(minikafka_cluster):
            frozen.append(minikafka_cluster.broker(2).process.pid)
            os.kill(frozen[0], signal.SIGSTOP)

        def test_runs_while_it_stops(minikafka_cluster):
            with open(f"/proc/{frozen[0]}/stat") as stat:
                assert stat.read().rsplit(")", 1)[1].split()[0] == "T"
            os.kill(frozen[0], signal.SIGCONT)
            print("frozen pid", frozen[0])

        def test_crashes_a_broker(minikafka_cluster):
            os.kill(minikafka_cluster.broker(3).process.pid, signal.SIGKILL)
            minikafka_cluster.broker(3).process.wait()
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:randomly",
                             "test_user.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "3 passed, 1 error" in result.stdout, result.stdout
    assert "ERROR at teardown of test_crashes_a_broker" in result.stdout
    assert "broker 3 exited on its own (status -9)" in result.stdout
    pid = int(result.stdout.split("frozen pid ")[1].split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_restart_moves_to_a_free_port_when_the_old_one_is_taken(minikafka_broker, topic):
    import socket

    produce(minikafka_broker.bootstrap, topic, b"kept")
    old_port = minikafka_broker.port
    minikafka_broker.stop()
    with socket.create_server(("127.0.0.1", old_port)):
        minikafka_broker.start()
        assert minikafka_broker.port != old_port
        assert produce(minikafka_broker.bootstrap, topic, b"new").offset == 1


def test_a_broker_that_dies_on_its_own_is_reported_as_a_crash(tmp_path):
    import os
    import signal

    from minikafka.testing import BrokerCrashed

    broker = MinikafkaBroker(tmp_path)
    broker.start()
    os.kill(broker.process.pid, signal.SIGKILL)  # not through broker.kill(): a "crash"
    broker.process.wait()
    with pytest.raises(BrokerCrashed, match="status -9"):
        broker.close()
    assert broker.unexpected_exits == [-9]


def test_tls_fixtures_without_trustme_name_the_install_command(tmp_path):
    # A project that installed minikafka without the `testing` extra: trustme is missing.
    (tmp_path / "conftest.py").write_text("import sys\nsys.modules['trustme'] = None\n")
    (tmp_path / "test_user.py").write_text(textwrap.dedent("""
        def test_tls(minikafka_broker_factory):
            minikafka_broker_factory(security_protocol="SSL")
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "minikafka's TLS fixtures need trustme: pip install 'minikafka[testing]'" in result.stdout
    assert "ModuleNotFoundError" not in result.stdout and "Traceback" not in result.stdout
