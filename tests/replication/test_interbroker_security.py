"""Brokers that authenticate to each other: SASL (PLAIN, SCRAM) and TLS on the inter-broker
listener, exercised by real clusters (the controller's requests and the replica fetchers go
through that listener, behind link proxies that can cut it), and the client mechanisms
against the server's."""

from __future__ import annotations

import base64
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer

from minikafka.broker.pytest_plugin import BROKER_USER, MinikafkaCluster
from minikafka.broker.security.sasl import AuthenticationFailed, PlainServer, ScramServer
from minikafka.broker.security.sasl_client import PlainClient, ScramClient
from minikafka.broker.security.scram import ScramCredential

USERS = {"alice": "alice-pw"}


# ------------------------------------------------------------------ the client mechanisms


def _exchange(client, server) -> None:
    token = client.respond(None)
    while token is not None:
        token = client.respond(server.step(token))


def test_scram_client_replays_rfc_7677s_example():
    credential = ScramCredential.from_password("SCRAM-SHA-256", "pencil",
                                               salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = ScramServer("SCRAM-SHA-256", lambda user: credential, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", client_nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.respond(None) == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.respond(server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert client.respond(server.step(final)) is None
    assert server.user == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree_and_a_wrong_password_is_refused(mechanism):
    credential = ScramCredential.from_password(mechanism, "s3cret")
    server = ScramServer(mechanism, {"a=b,c": credential}.get)
    _exchange(ScramClient(mechanism, "a=b,c", "s3cret"), server)  # names with ',' and '=' escape
    assert server.user == "a=b,c"
    with pytest.raises(AuthenticationFailed, match="wrong password") as refused:
        _exchange(ScramClient(mechanism, "a=b,c", "wrong"), ScramServer(mechanism, {"a=b,c": credential}.get))
    assert "wrong" not in str(refused.value).replace("wrong password", "")


def test_scram_client_refuses_a_server_that_does_not_hold_the_credential():
    real = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    forged = ScramCredential(real.salt, real.stored_key, b"\0" * len(real.server_key), real.iterations)
    with pytest.raises(AuthenticationFailed, match="signature is wrong"):
        _exchange(ScramClient("SCRAM-SHA-256", "u", "pw"), ScramServer("SCRAM-SHA-256", lambda user: forged))


def test_plain_client_against_the_server():
    server = PlainServer({"broker": "pw"})
    _exchange(PlainClient("broker", "pw"), server)
    assert server.user == "broker"
    with pytest.raises(AuthenticationFailed):
        _exchange(PlainClient("broker", "nope"), PlainServer({"broker": "pw"}))


# ------------------------------------------------------------------ clusters


def _isr(cluster: MinikafkaCluster, topic: str) -> list[int]:
    metadata = cluster.metadata([topic], via=cluster._controller_broker())
    return sorted(metadata.topics[0].partitions[0].isr_nodes)


def _produce_and_consume(cluster: MinikafkaCluster, topic: str, count: int) -> None:
    producer = KafkaProducer(acks="all", **cluster.client_config())
    try:
        offsets = [producer.send(topic, f"m{i}".encode()).get(timeout=30).offset for i in range(count)]
    finally:
        producer.close()
    assert offsets == list(range(offsets[0], offsets[0] + count))
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             **cluster.client_config())
    try:
        got = [m.value for m in consumer]
    finally:
        consumer.close()
    assert got[-count:] == [f"m{i}".encode() for i in range(count)]


def _wait(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        time.sleep(0.2)


@pytest.mark.zookeeper
@pytest.mark.timeout(240)
def test_sasl_ssl_cluster_replicates_through_link_proxies_and_a_cut_follower_rejoins(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(3, security_protocol="SASL_SSL", users=USERS,
                                        **{"replica.lag.time.max.ms": "2000"})
    cluster.create_topic("secured", 1, 3)
    assert _isr(cluster, "secured") == [1, 2, 3]
    _produce_and_consume(cluster, "secured", 20)
    leader = cluster.leader("secured", 0)
    followers = [b for b in cluster.ids if b != leader]
    # The followers fetch through their proxies in front of the leader's SASL_SSL listener.
    assert all(cluster.links[(f, leader)].live_connections for f in followers)
    follower = followers[0]
    cluster.partition([follower], [leader])
    _wait(lambda: follower not in _isr(cluster, "secured"), f"broker {follower} out of the ISR")
    _produce_and_consume(cluster, "secured", 5)  # the two left in the ISR take acks=all
    cluster.heal()
    _wait(lambda: _isr(cluster, "secured") == [1, 2, 3], f"broker {follower} back in the ISR")
    for broker in cluster.brokers:
        log = broker.stderr_since_start()
        assert cluster.broker_password not in log and "alice-pw" not in log
        assert "authentication failed" not in log


@pytest.mark.zookeeper
@pytest.mark.timeout(240)
def test_sasl_plaintext_scram_cluster_and_a_broker_with_a_wrong_password_never_joins(tmp_path, zookeeper):
    wrong = "not-the-broker-password"
    with MinikafkaCluster(tmp_path / "c", 3, {"replica.lag.time.max.ms": "2000"},
                          zookeeper=zookeeper.connect_string, security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="SCRAM-SHA-256", users=USERS) as cluster:
        cluster.create_topic("scrammed", 1, 3)
        assert _isr(cluster, "scrammed") == [1, 2, 3]
        _produce_and_consume(cluster, "scrammed", 10)
        # Broker 3 comes back with the wrong password for its own inter-broker account.
        cluster.stop(3)
        settings = cluster.broker(3).config_path
        own = f'username="{BROKER_USER}" password="{cluster.broker_password}"'
        assert own in settings.read_text()
        settings.write_text(settings.read_text().replace(own, f'username="{BROKER_USER}" password="{wrong}"'))
        cluster.restart(3)
        _produce_and_consume(cluster, "scrammed", 5)
        # It registered, and the leader refuses its fetches: it stays out of the ISR.
        refusal = "SASL SCRAM-SHA-256 as user 'broker': refused"
        _wait(lambda: cluster.broker(3).stderr_since_start().count(refusal) >= 2, "broker 3 refused twice")
        assert 3 not in _isr(cluster, "scrammed")
        own_log = cluster.broker(3).stderr_since_start()
        assert "refused" in own_log and wrong not in own_log
        for broker in cluster.brokers:
            assert wrong not in broker.stderr_since_start()
            assert cluster.broker_password not in broker.stderr_since_start()
        leaders_logs = "".join(cluster.broker(b).stderr_since_start() for b in (1, 2))
        assert "wrong password for user 'broker'" in leaders_logs
