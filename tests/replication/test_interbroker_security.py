"""Brokers that authenticate to each other: SASL (PLAIN, SCRAM) and TLS on the inter-broker
listener, exercised by real clusters (the controller's requests and the replica fetchers go
through that listener, behind link proxies that can cut it), and the client mechanisms
against the server's."""

from __future__ import annotations

import base64

import pytest
from kafka import KafkaConsumer, KafkaProducer

from minikafka.broker.security.sasl import AuthenticationFailed, PlainServer, ScramServer
from minikafka.broker.security.sasl_client import PlainClient, ScramClient
from minikafka.broker.security.scram import ScramCredential
from minikafka.testing import BROKER_USER, MinikafkaCluster

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


@pytest.mark.zookeeper
@pytest.mark.timeout(240)
def test_sasl_ssl_cluster_replicates_through_link_proxies_and_a_cut_follower_rejoins(minikafka_cluster_factory, until):
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
    until(lambda: follower not in _isr(cluster, "secured"), f"broker {follower} out of the ISR", 60)
    _produce_and_consume(cluster, "secured", 5)  # the two left in the ISR take acks=all
    cluster.heal()
    until(lambda: _isr(cluster, "secured") == [1, 2, 3], f"broker {follower} back in the ISR", 60)
    for broker in cluster.brokers:
        log = broker.stderr_since_start()
        assert cluster.broker_password not in log and "alice-pw" not in log
        assert "authentication failed" not in log


@pytest.mark.zookeeper
@pytest.mark.timeout(240)
def test_sasl_plaintext_scram_cluster_and_a_broker_with_a_wrong_password_never_joins(tmp_path, zookeeper, until):
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
        until(lambda: cluster.broker(3).stderr_since_start().count(refusal) >= 2, "broker 3 refused twice", 60)
        assert 3 not in _isr(cluster, "scrammed")
        own_log = cluster.broker(3).stderr_since_start()
        assert "refused" in own_log and wrong not in own_log
        for broker in cluster.brokers:
            assert wrong not in broker.stderr_since_start()
            assert cluster.broker_password not in broker.stderr_since_start()
        leaders_logs = "".join(cluster.broker(b).stderr_since_start() for b in (1, 2))
        assert "wrong password for user 'broker'" in leaders_logs


# ------------------------------------------------------------------ one channel, one broker


def _channel_security(tmp_path, ca, **settings: str):
    """What a broker with ``settings`` dials its peers with (its own certificate from ``ca``)."""
    from minikafka.broker.config import BrokerConfig
    from minikafka.broker.security.inter_broker import channel_security

    own, ca_path = tmp_path / "own.pem", tmp_path / "ca.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(own))
    ca.cert_pem.write_to_path(str(ca_path))
    protocol = settings.pop("protocol")
    return channel_security(BrokerConfig({
        "listeners": f"{protocol}://127.0.0.1:0", "security.inter.broker.protocol": protocol,
        "ssl.keystore.location": str(own), "ssl.truststore.location": str(ca_path), **settings}))


async def _api_versions(port: int, security) -> int:
    from minikafka.protocol.apis import ApiKey
    from minikafka.replication.channel import BrokerChannel

    channel = BrokerChannel("127.0.0.1", port, client_id="test", timeout_s=10, security=security)
    try:
        return (await channel.request(ApiKey.API_VERSIONS, 0, {})).error_code
    finally:
        await channel.aclose()


@pytest.mark.timeout(60)
async def test_endpoint_identification_checks_the_peer_certificates_host_name(tmp_path, minikafka_ca):
    from minikafka.testing import MinikafkaBroker
    from minikafka.replication.channel import AuthenticationError

    # A peer whose certificate names another host than the one dialled.
    keystore, ca_path = tmp_path / "peer.pem", tmp_path / "peer-ca.pem"
    minikafka_ca.issue_cert("other.example").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    minikafka_ca.cert_pem.write_to_path(str(ca_path))
    with MinikafkaBroker(tmp_path / "peer", {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore),
                                             "ssl.truststore.location": str(ca_path)}) as peer:
        port = peer.listener_ports.get("SSL", peer.port)
        unchecked = _channel_security(tmp_path, minikafka_ca, protocol="SSL")
        assert await _api_versions(port, unchecked) == 0  # Kafka 0.10.2's default: no name check
        checked = _channel_security(tmp_path, minikafka_ca, protocol="SSL",
                                    **{"ssl.endpoint.identification.algorithm": "HTTPS"})
        with pytest.raises(AuthenticationError, match="mismatch, certificate is not valid for .127.0.0.1."):
            await _api_versions(port, checked)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_a_sasl_channel_authenticates_and_a_wrong_password_is_an_authentication_error(
        tmp_path, minikafka_broker_factory, minikafka_ca, mechanism):
    from minikafka.replication.channel import AuthenticationError

    peer = minikafka_broker_factory(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                                    users={"broker": "right-pw"})

    def security(password: str):
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        return _channel_security(tmp_path, minikafka_ca, protocol="SASL_PLAINTEXT", **{
            "sasl.mechanism.inter.broker.protocol": mechanism,
            "sasl.jaas.config": f'org.apache.kafka.common.security.{module} required '
                                f'username="broker" password="{password}";'})

    assert await _api_versions(peer.port, security("right-pw")) == 0
    with pytest.raises(AuthenticationError, match=f"SASL {mechanism} as user 'broker': refused") as refused:
        await _api_versions(peer.port, security("wrong-pw"))
    assert "wrong-pw" not in str(refused.value)
    assert "wrong-pw" not in peer.stderr_since_start()
