"""pytest fixtures that run a real minikafka broker for the duration of a test.

Installed with minikafka (entry point ``pytest11: minikafka``), so any project that has
minikafka installed gets them without a ``conftest.py``::

    def test_roundtrip(minikafka_broker):
        producer = KafkaProducer(bootstrap_servers=minikafka_broker.bootstrap)
        ...

    def test_small_messages(minikafka_broker_factory):
        broker = minikafka_broker_factory(**{"message.max.bytes": "2000"})

Each broker is a separate ``minikafka serve --port 0`` process with its own data directory
(a fresh directory from pytest's ``tmp_path_factory``), so tests never share state and the
broker is exercised exactly as a user runs it. The process is always reaped, and when a test fails the broker's stderr is
attached to the failure report.

The harness under the fixtures lives in :mod:`minikafka.testing` (``MinikafkaBroker``, a
context manager, for fixtures of wider scope, e.g. one broker per module; ``MinikafkaCluster``;
``kafka_request``), which imports without pytest; its public names are importable from here
too, where they were first documented.

Security (see README, "Security"): ``minikafka_broker_factory(security_protocol="SASL_SSL",
sasl_mechanism="SCRAM-SHA-256", users={"alice": "secret"})`` starts a broker whose one listener
speaks that protocol, with certificates from a per-session ``trustme`` CA; and
``broker.client_config("kafka-python" | "aiokafka" | "confluent-kafka")`` gives the settings a
client needs to connect to it (as the first user unless ``user=`` names another).
``minikafka_cluster_factory`` takes the same options: the brokers then also replicate over
that listener, authenticating to each other as ``BROKER_USER``, and ``cluster.client_config()``
gives a client's settings.

Brokers are started for tests (``--test-control``), so a test can make one fail on demand:
``broker.inject("Produce", ["NOT_LEADER_FOR_PARTITION", 6])``, ``broker.delay("Fetch", ms=500)``,
``broker.pause()`` / ``broker.resume()`` (see README, "Faults on demand").
"""

from __future__ import annotations

import pytest

from minikafka.testing import (
    BROKER_USER, ZOOKEEPER, BrokerCrashed, BrokerStartError, ControlError, MinikafkaBroker, MinikafkaCluster,
    client_settings, kafka_request,
)
from minikafka.testing.broker import (TrustmeMissing, close_all, close_warm_starter, finish_stopping, new_ca,
                                      started_brokers)

# The harness's public names, importable from here as README and docs/ first showed them.
__all__ = ["MinikafkaBroker", "MinikafkaCluster", "ZOOKEEPER", "BROKER_USER", "BrokerStartError",
           "BrokerCrashed", "ControlError", "kafka_request", "client_settings"]


@pytest.fixture(scope="session")
def minikafka_ca():
    """One ``trustme.CA`` per test session: it signs every TLS broker's certificate and the
    client certificates for mutual TLS."""
    return new_ca()


@pytest.fixture
def minikafka_broker_factory(tmp_path_factory, request):
    """Factory: ``minikafka_broker_factory(**{"message.max.bytes": "2000"})`` -> started broker.

    Keyword arguments are Kafka broker config names with string values, plus
    ``security_protocol`` ("SSL", "SASL_PLAINTEXT", "SASL_SSL"), ``sasl_mechanism`` ("PLAIN",
    "SCRAM-SHA-256", "SCRAM-SHA-512"), ``users`` ({name: password}) and ``ssl_client_auth``
    ("none", "requested", "required"); every broker made is stopped when the test ends (its
    clean shutdown finishes while the next test runs; the session's end waits for it).
    """
    brokers: list[MinikafkaBroker] = []

    def make(*, security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
             users: dict[str, str] | None = None, ssl_client_auth: str = "none",
             **overrides: str) -> MinikafkaBroker:
        ca = request.getfixturevalue("minikafka_ca") if security_protocol.upper() in ("SSL", "SASL_SSL") else None
        broker = MinikafkaBroker(tmp_path_factory.mktemp("minikafka"), overrides,
                                 security_protocol=security_protocol, sasl_mechanism=sasl_mechanism,
                                 users=users, ssl_client_auth=ssl_client_auth, ca=ca)
        brokers.append(broker)
        return broker.start()

    yield make
    close_all(brokers, wait=False)  # the clean shutdowns go on while the next test runs


@pytest.fixture
def minikafka_broker(minikafka_broker_factory) -> MinikafkaBroker:
    """A running broker with default settings, on a free port, private to this test."""
    return minikafka_broker_factory()


@pytest.fixture(scope="session")
def minikafka_zookeeper(tmp_path_factory):
    """One ZooKeeper server (Debian's ``zookeeper`` package, Java) for the test session; each
    cluster takes a chroot of its own in it, so clusters never see each other's nodes."""
    from minikafka.replication.zk_server import ZooKeeperServer

    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server
        finish_stopping()  # clusters still shutting down in the background need their ZooKeeper


@pytest.fixture
def minikafka_cluster_factory(tmp_path_factory, minikafka_zookeeper, request):
    """Factory: ``minikafka_cluster_factory(brokers=3, **{"min.insync.replicas": "2"})`` ->
    a started :class:`MinikafkaCluster` (broker config overrides as keyword arguments, string
    values); every cluster made is closed when the test ends, with its link proxies.

    As with ``minikafka_broker_factory``, ``security_protocol``, ``sasl_mechanism``, ``users``
    and ``ssl_client_auth`` secure it (certificates from the session's ``minikafka_ca``; the
    brokers replicate over that listener too), and ``cluster.client_config()`` gives a
    client's settings; ``links=False`` connects the brokers without link proxies."""
    clusters: list[MinikafkaCluster] = []

    def make(brokers: int = 3, *, security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
             users: dict[str, str] | None = None, ssl_client_auth: str = "none", links: bool = True,
             **overrides: str) -> MinikafkaCluster:
        ca = request.getfixturevalue("minikafka_ca") if security_protocol.upper() in ("SSL", "SASL_SSL") else None
        cluster = MinikafkaCluster(tmp_path_factory.mktemp("minikafka-cluster"), brokers, overrides,
                                   zookeeper=minikafka_zookeeper.connect_string, links=links,
                                   security_protocol=security_protocol, sasl_mechanism=sasl_mechanism,
                                   users=users, ca=ca, ssl_client_auth=ssl_client_auth)
        clusters.append(cluster)
        try:
            return cluster.start()
        except BaseException:
            clusters.remove(cluster)
            cluster.close()
            raise

    yield make
    close_all(clusters, wait=False)  # the shutdowns go on while the next test runs


@pytest.fixture
def minikafka_cluster(minikafka_cluster_factory) -> MinikafkaCluster:
    """Three brokers (ids 1, 2, 3) and a ZooKeeper, private to this test."""
    return minikafka_cluster_factory()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        if call.excinfo is not None and call.excinfo.errisinstance(TrustmeMissing):
            # The install command alone, as pytest.fail(..., pytrace=False) would print it: the
            # harness cannot call pytest.fail, it must import without pytest.
            report.longrepr = str(call.excinfo.value)
        for broker in started_brokers():
            report.sections.append((f"minikafka broker stderr ({broker.bootstrap})", broker.stderr_tail()))


def pytest_unconfigure(config):
    finish_stopping()
    close_warm_starter()
