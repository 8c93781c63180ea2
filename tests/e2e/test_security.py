"""TLS and SASL listeners with the four real clients (kafka-python, confluent-kafka, aiokafka,
kcat): each produces and consumes over SSL, mutual TLS, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512) and SASL_SSL; refusals (wrong password, unknown user, a certificate from another
CA, a plaintext client on the TLS port, a TLS client on the plaintext port) end in an error the
client reports rather than a hang, the broker keeps serving the others, and its log never holds
a password.

What a refused client sees is bounded by Kafka 0.10.2's protocol: SaslHandshake v0 has no
error frame, so a failed authentication is a closed connection. librdkafka (confluent-kafka,
kcat) reports it as ``_AUTHENTICATION`` ("SASL authentication failure"); kafka-python and
aiokafka see a broken connection and fail their bootstrap.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid

import pytest
import trustme

from minikafka.broker.pytest_plugin import MinikafkaBroker
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.framing import ClientConnection

PASSWORD = "pa55-Vault-7x!"
USERS = {"alice": PASSWORD, "bob": "bob-Secret-42"}

LISTENERS = {
    "SSL": dict(security_protocol="SSL"),
    "mutual-TLS": dict(security_protocol="SSL", ssl_client_auth="required"),
    "SASL_PLAINTEXT-PLAIN": dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", users=USERS),
    "SASL_PLAINTEXT-SCRAM-SHA-256": dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", users=USERS),
    "SASL_PLAINTEXT-SCRAM-SHA-512": dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", users=USERS),
    "SASL_SSL-SCRAM-SHA-256": dict(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256", users=USERS),
    "SASL_SSL-PLAIN": dict(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", users=USERS),
}


@pytest.fixture(scope="module", params=list(LISTENERS))
def secured(request, tmp_path_factory, minikafka_ca):
    with MinikafkaBroker(tmp_path_factory.mktemp("secured"), ca=minikafka_ca, **LISTENERS[request.param]) as broker:
        yield broker


def _topic() -> str:
    return f"sec-{uuid.uuid4().hex[:10]}"


VALUES = [b"one", b"two", b"three" * 1000]


def kafka_python_roundtrip(config: dict, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(**config, bootstrap_timeout_ms=15000)
    try:
        for value in VALUES:
            producer.send(topic, value).get(timeout=15)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(topic, **config, group_id=f"g-{topic}", auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, bootstrap_timeout_ms=15000)
    try:
        got = []
        for message in consumer:
            got.append(message.value)
            if len(got) == len(VALUES):
                consumer.commit()
                break
        return got
    finally:
        consumer.close()


def confluent_roundtrip(config: dict, topic: str) -> list[bytes]:
    import confluent_kafka

    producer = confluent_kafka.Producer(config)
    for value in VALUES:
        producer.produce(topic, value)
    assert producer.flush(15) == 0
    consumer = confluent_kafka.Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    try:
        while len(got) < len(VALUES) and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and not message.error():
                got.append(message.value())
        consumer.commit(asynchronous=False)
        return got
    finally:
        consumer.close()


def aiokafka_roundtrip(config: dict, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run():
        producer = AIOKafkaProducer(**config)
        await producer.start()
        try:
            for value in VALUES:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **config, group_id=f"g-{topic}", auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(30):
                while len(got) < len(VALUES):
                    for messages in (await consumer.getmany(timeout_ms=1000)).values():
                        got.extend(message.value for message in messages)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def kcat_args(config: dict) -> list[str]:
    args = ["-b", config["bootstrap.servers"]]
    for key, value in config.items():
        if key != "bootstrap.servers":
            args += ["-X", f"{key}={value}"]
    return args


def kcat_roundtrip(config: dict, topic: str) -> list[bytes]:
    args = kcat_args(config)
    lines = [value.decode() for value in VALUES]
    subprocess.run(["kcat", "-P", *args, "-t", topic], input="\n".join(lines) + "\n", text=True,
                   check=True, capture_output=True, timeout=60)
    out = subprocess.run(["kcat", "-C", *args, "-t", topic, "-o", "beginning", "-c", str(len(VALUES)), "-e"],
                         text=True, check=True, capture_output=True, timeout=60).stdout
    return [line.encode() for line in out.splitlines()]


CLIENTS = {
    "kafka-python": ("kafka-python", kafka_python_roundtrip),
    "confluent-kafka": ("confluent-kafka", confluent_roundtrip),
    "aiokafka": ("aiokafka", aiokafka_roundtrip),
    "kcat": ("confluent-kafka", kcat_roundtrip),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_produce_and_consume(secured, client):
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    flavour, roundtrip = CLIENTS[client]
    assert roundtrip(secured.client_config(flavour), _topic()) == VALUES
    assert PASSWORD not in secured.stderr_since_start()


# ------------------------------------------------------------------------------------ refusals


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory, minikafka_ca):
    """SASL_PLAINTEXT with SCRAM users, plus an SSL listener requiring client certificates
    and a PLAINTEXT one, on one broker."""
    work = tmp_path_factory.mktemp("refusals")
    broker = MinikafkaBroker(work, ca=minikafka_ca, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", users=USERS)
    server = minikafka_ca.issue_cert("127.0.0.1", "localhost")
    keystore = work / "extra.pem"
    server.private_key_and_cert_chain_pem.write_to_path(str(keystore))
    minikafka_ca.cert_pem.write_to_path(str(work / "ca.pem"))
    with open(broker.config_path, "a") as props:
        props.write("listeners=SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0\n"
                    f"ssl.keystore.location={keystore}\nssl.truststore.location={work / 'ca.pem'}\n"
                    "ssl.client.auth=required\n")
    with broker:
        broker.ca_path = work / "ca.pem"
        yield broker


def _confluent_errors(config: dict, seconds: float = 4.0) -> list:
    import confluent_kafka

    errors = []
    producer = confluent_kafka.Producer({**config, "error_cb": errors.append, "reconnect.backoff.ms": 500})
    deadline = time.monotonic() + seconds
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    return errors


@pytest.mark.timeout(120)
@pytest.mark.parametrize("user, password", [("alice", "not-Alices-pw-99"), ("mallory", PASSWORD)],
                         ids=["wrong-password", "unknown-user"])
def test_bad_credentials_are_an_authentication_error(sasl_broker, user, password):
    import confluent_kafka
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    config = sasl_broker.client_config("confluent-kafka")
    config.update({"sasl.username": user, "sasl.password": password})
    errors = _confluent_errors(config)
    assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors
    if shutil.which("kcat"):
        result = subprocess.run(["kcat", "-L", *kcat_args(config), "-m", "5"], capture_output=True, text=True, timeout=60)
        assert result.returncode != 0 and "SASL authentication failure" in result.stderr
    kp_config = sasl_broker.client_config(user=None)
    kp_config.update({"sasl_plain_username": user, "sasl_plain_password": password})
    started = time.monotonic()
    with pytest.raises(KafkaError):
        KafkaProducer(**kp_config, bootstrap_timeout_ms=3000)
    assert time.monotonic() - started < 30
    aio_config = sasl_broker.client_config("aiokafka")
    aio_config.update({"sasl_plain_username": user, "sasl_plain_password": password})
    assert "Unable to bootstrap" in _aiokafka_refusal(aio_config)
    # The broker still serves a client with good credentials.
    assert kafka_python_roundtrip(sasl_broker.client_config(), _topic()) == VALUES
    log = sasl_broker.stderr_since_start()
    assert f"refused 127.0.0.1:" in log and repr(user) in log
    for secret in (password, PASSWORD, USERS["bob"]):
        assert secret not in log


def _aiokafka_refusal(config: dict) -> str:
    """What aiokafka's producer raises at start (a broken connection: SASL v0 has no error)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def run():
        producer = AIOKafkaProducer(**config, request_timeout_ms=5000)
        try:
            async with asyncio.timeout(30):
                await producer.start()
        except KafkaError as exc:
            return str(exc)
        finally:
            await producer.stop()
        return "started"

    return asyncio.run(run())


def _raw_exchange(port: int, api_key: int, version: int, body: dict):
    """One request on a fresh connection: the response body, or None if the broker closed."""
    client = ClientConnection("raw")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(client.send_request(api_key, version, body)[1])
        while (response := client.next_response()) is None:
            data = sock.recv(65536)
            if not data:
                return None
            client.receive_data(data)
        return response.body


@pytest.mark.timeout(60)
def test_only_api_versions_and_sasl_handshake_before_authentication(sasl_broker):
    port = sasl_broker.port
    assert _raw_exchange(port, ApiKey.API_VERSIONS, 0, {}).error_code == ErrorCode.NONE
    handshake = _raw_exchange(port, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-256"})
    assert handshake.error_code == ErrorCode.NONE and handshake.mechanisms == ["SCRAM-SHA-256"]
    refused = _raw_exchange(port, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "GSSAPI"})
    assert refused.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    for api_key, version, body in [(ApiKey.METADATA, 0, {"topics": []}),
                                   (ApiKey.PRODUCE, 0, {"acks": 1, "timeout_ms": 1000, "topic_data": []}),
                                   (ApiKey.LIST_GROUPS, 0, {})]:
        assert _raw_exchange(port, api_key, version, body) is None, ApiKey(api_key).name
    assert "before authentication" in sasl_broker.stderr_since_start()


@pytest.mark.timeout(120)
def test_tls_refusals_are_reported_and_the_broker_serves_on(sasl_broker, minikafka_ca):
    import confluent_kafka

    ssl_port, plain_port = sasl_broker.listener_ports["SSL"], sasl_broker.listener_ports["PLAINTEXT"]
    stranger = trustme.CA().issue_cert("client.test", common_name="stranger")
    stranger_path = sasl_broker.work_dir / "stranger.pem"
    stranger.private_key_and_cert_chain_pem.write_to_path(str(stranger_path))
    good = minikafka_ca.issue_cert("client.test", common_name="good")
    good_path = sasl_broker.work_dir / "good.pem"
    good.private_key_and_cert_chain_pem.write_to_path(str(good_path))
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(sasl_broker.ca_path)}
    cases = {
        "certificate from another CA": {"bootstrap.servers": f"127.0.0.1:{ssl_port}", **tls,
                                        "ssl.certificate.location": str(stranger_path),
                                        "ssl.key.location": str(stranger_path)},
        "no certificate": {"bootstrap.servers": f"127.0.0.1:{ssl_port}", **tls},
        "plaintext client on the TLS port": {"bootstrap.servers": f"127.0.0.1:{ssl_port}"},
        "TLS client on the plaintext port": {"bootstrap.servers": f"127.0.0.1:{plain_port}", **tls},
    }
    for what, config in cases.items():
        errors = _confluent_errors(config, seconds=15)
        assert errors, f"{what}: the client saw no error"
        codes = {error.code() for error in errors}
        assert codes & {confluent_kafka.KafkaError._SSL, confluent_kafka.KafkaError._AUTHENTICATION,
                        confluent_kafka.KafkaError._TRANSPORT, confluent_kafka.KafkaError._ALL_BROKERS_DOWN}, (what, errors)
    # A client with a certificate of the broker's CA gets in, as User:CN=good,...
    config = {"bootstrap_servers": f"127.0.0.1:{ssl_port}", "security_protocol": "SSL",
              "ssl_cafile": str(sasl_broker.ca_path), "ssl_certfile": str(good_path), "ssl_keyfile": str(good_path)}
    assert kafka_python_roundtrip(config, _topic()) == VALUES
    log = sasl_broker.stderr_since_start()
    assert "on listener SSL: TLS handshake failed" in log


@pytest.mark.timeout(120)
def test_users_cli_adds_and_removes_scram_users_of_a_running_broker(tmp_path_factory):
    import sys

    from kafka.errors import KafkaError

    def users(*args, stdin=None):
        return subprocess.run([sys.executable, "-m", "minikafka.broker", "users", *args, "--log-dir", str(broker.log_dir)],
                              input=stdin, capture_output=True, text=True, timeout=60)

    with MinikafkaBroker(tmp_path_factory.mktemp("users"), security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="SCRAM-SHA-512", users={"alice": PASSWORD}) as broker:
        carol_pw = "carol-Only-77"
        assert users("add", "carol", "--mechanism", "SCRAM-SHA-512", "--password-stdin", stdin=carol_pw + "\n").returncode == 0
        assert users("list").stdout.splitlines() == ["alice\tSCRAM-SHA-512", "carol\tSCRAM-SHA-512"]
        stored = (broker.log_dir / "scram-credentials.json").read_text()
        assert carol_pw not in stored and PASSWORD not in stored
        config = {**broker.client_config(), "sasl_plain_username": "carol", "sasl_plain_password": carol_pw}
        assert kafka_python_roundtrip(config, _topic()) == VALUES  # no restart needed
        assert users("remove", "carol").returncode == 0
        with pytest.raises(KafkaError):
            from kafka import KafkaProducer

            KafkaProducer(**config, bootstrap_timeout_ms=3000)
        assert users("remove", "carol").returncode == 1
        log = broker.stderr_since_start()
        assert "unknown user 'carol'" in log and carol_pw not in log
