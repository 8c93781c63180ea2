"""TLS and SASL listeners with the four real clients (kafka-python, confluent-kafka, aiokafka,
kcat): each produces and consumes over SSL, mutual TLS, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512) and SASL_SSL; refusals (wrong password, unknown user, a certificate from another
CA, a plaintext client on the TLS port, a TLS client on the plaintext port) end in an error the
client reports rather than a hang, the broker keeps serving the others, and its log never holds
a password; Kafka's TLS protocol settings (versions, cipher suites, endpoint identification)
take effect.

A refused SASL client sees an authentication error because the broker serves SaslHandshake
v1 and SaslAuthenticate (KIP-152) besides 0.10.2's v0 with bare tokens, which has no room for an
error: librdkafka (confluent-kafka, kcat) reports ``_AUTHENTICATION`` "SASL authentication
error: <Kafka's message>"; kafka-python and aiokafka log SaslAuthenticationFailed(Error) with
the message and fail their bootstrap (KafkaTimeoutError at the bootstrap timeout,
KafkaConnectionError at once), as they do against Kafka 1.0 and later.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import trustme

from minikafka.broker.config import BrokerConfig
from minikafka.broker.security import tls
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.framing import ClientConnection, encode_frame
from minikafka.testing import BrokerStartError, MinikafkaBroker

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
def test_bad_credentials_are_an_authentication_error(sasl_broker, user, password, caplog):
    """Each client reports the broker's SASL_AUTHENTICATION_FAILED answer (SaslAuthenticate,
    after SaslHandshake v1), with Kafka's message, which is the same for a wrong password and
    an unknown user."""
    import confluent_kafka
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    config = sasl_broker.client_config("confluent-kafka")
    config.update({"sasl.username": user, "sasl.password": password})
    errors = _confluent_errors(config)
    assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors
    assert f"SASL authentication error: {SCRAM_REFUSAL}" in errors[0].str()
    if shutil.which("kcat"):
        result = subprocess.run(["kcat", "-L", *kcat_args(config), "-m", "5"], capture_output=True, text=True, timeout=60)
        assert result.returncode != 0 and f"SASL authentication error: {SCRAM_REFUSAL}" in result.stderr
    kp_config = sasl_broker.client_config(user=None)
    kp_config.update({"sasl_plain_username": user, "sasl_plain_password": password})
    # kafka-python's bootstrap retries until its timeout and logs each refusal.
    with caplog.at_level(logging.WARNING, logger="kafka"), pytest.raises(KafkaTimeoutError):
        KafkaProducer(**kp_config, bootstrap_timeout_ms=3000)
    assert _logged(caplog, "kafka", f"SaslAuthenticationFailedError: {SCRAM_REFUSAL}")
    # aiokafka's start fails at once with "Unable to bootstrap" and logs why.
    aio_config = sasl_broker.client_config("aiokafka")
    aio_config.update({"sasl_plain_username": user, "sasl_plain_password": password})
    with caplog.at_level(logging.ERROR, logger="aiokafka"):
        assert "Unable to bootstrap" in _aiokafka_refusal(aio_config)
    assert _logged(caplog, "aiokafka", f"SaslAuthenticationFailed: {SCRAM_REFUSAL}")
    # The broker still serves a client with good credentials.
    assert kafka_python_roundtrip(sasl_broker.client_config(), _topic()) == VALUES
    log = sasl_broker.stderr_since_start()
    assert "refused 127.0.0.1:" in log and repr(user) in log
    for secret in (password, PASSWORD, USERS["bob"]):
        assert secret not in log


SCRAM_REFUSAL = "Authentication failed: Invalid user credentials"


def _logged(caplog, logger: str, text: str) -> bool:
    return any(record.name.startswith(logger) and text in record.getMessage() for record in caplog.records)


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


class _Raw:
    """One connection speaking the protocol layer's client side, request by request."""

    def __init__(self, port: int) -> None:
        self.client = ClientConnection("raw")
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def call(self, api_key: int, version: int, body: dict):
        """The response body, or None if the broker closed the connection instead."""
        self.sock.sendall(self.client.send_request(api_key, version, body)[1])
        return self._response()

    def send_bare(self, token: bytes) -> bytes | None:
        """A size-prefixed frame without a header (SASL after a v0 handshake); the bare answer."""
        self.sock.sendall(encode_frame(token))
        head = self.sock.recv(4, socket.MSG_WAITALL)
        return None if not head else self.sock.recv(int.from_bytes(head, "big"), socket.MSG_WAITALL)

    def _response(self):
        while (response := self.client.next_response()) is None:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.client.receive_data(data)
        return response.body

    def closed(self) -> bool:
        return self.sock.recv(1) == b""


def _raw_exchange(port: int, api_key: int, version: int, body: dict):
    """One request on a fresh connection: the response body, or None if the broker closed."""
    return _Raw(port).call(api_key, version, body)


@pytest.mark.timeout(60)
def test_a_refused_handshake_v1_client_is_told_why_and_a_v0_one_is_closed(sasl_broker):
    first = b"n,,n=mallory,r=fyko+d2lbbFgONRv9qkxdawL"
    raw = _Raw(sasl_broker.port)
    assert raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == ErrorCode.NONE
    refused = raw.call(ApiKey.SASL_AUTHENTICATE, 0, {"auth_bytes": first})
    assert (refused.error_code, refused.error_message) == (ErrorCode.SASL_AUTHENTICATION_FAILED, SCRAM_REFUSAL)
    assert raw.closed()
    # Kafka 0.10.2's way: the tokens are bare frames, and a refusal is only a close.
    raw = _Raw(sasl_broker.port)
    assert raw.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-256"}).error_code == ErrorCode.NONE
    assert raw.send_bare(first) is None
    # After a v1 handshake only SaslAuthenticate is taken.
    raw = _Raw(sasl_broker.port)
    assert raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == ErrorCode.NONE
    assert raw.call(ApiKey.METADATA, 0, {"topics": []}) is None
    assert "during SASL authentication" in sasl_broker.stderr_since_start()
    # Where there is nothing to authenticate, SaslAuthenticate is in the wrong state.
    raw = _Raw(sasl_broker.listener_ports["PLAINTEXT"])
    late = raw.call(ApiKey.SASL_AUTHENTICATE, 0, {"auth_bytes": first})
    assert late.error_code == ErrorCode.ILLEGAL_SASL_STATE
    # ...and the broker serves on.
    assert kafka_python_roundtrip(sasl_broker.client_config(), _topic()) == VALUES


@pytest.mark.timeout(60)
def test_plain_refusals_say_the_same_for_a_wrong_password_and_an_unknown_user(tmp_path):
    with MinikafkaBroker(tmp_path, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", users=USERS) as broker:
        for token in (b"\0alice\0not-Alices-pw-99", b"\0mallory\0" + PASSWORD.encode()):
            raw = _Raw(broker.port)
            assert raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
            refused = raw.call(ApiKey.SASL_AUTHENTICATE, 0, {"auth_bytes": token})
            assert (refused.error_code, refused.error_message) == (
                ErrorCode.SASL_AUTHENTICATION_FAILED, "Authentication failed: Invalid username or password")
            assert raw.closed()  # the refusal is logged as the connection closes
        log = broker.stderr_since_start()
        assert "unknown user 'mallory'" in log and "unknown user 'alice'" in log and PASSWORD not in log


@pytest.mark.timeout(60)
@pytest.mark.parametrize("handshake_version", [0, 1])
def test_both_handshake_versions_authenticate(sasl_broker, handshake_version):
    """v0 (bare tokens, what a 0.10.2 client or broker sends) and v1 (SaslAuthenticate), with
    kafka-python's SCRAM client; the next request is served as alice."""
    from kafka.net.sasl.scram import ScramClient

    raw = _Raw(sasl_broker.port)
    assert raw.call(ApiKey.SASL_HANDSHAKE, handshake_version, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
    client = ScramClient("alice", PASSWORD, "SCRAM-SHA-256")

    def exchange(token: bytes) -> bytes:
        if handshake_version == 0:
            return raw.send_bare(token)
        answer = raw.call(ApiKey.SASL_AUTHENTICATE, 0, {"auth_bytes": token})
        assert answer.error_code == ErrorCode.NONE, answer
        return answer.auth_bytes

    client.process_server_first_message(exchange(client.first_message()))
    client.process_server_final_message(exchange(client.final_message()))  # checks the server's proof
    assert raw.call(ApiKey.METADATA, 0, {"topics": []}).brokers
    late = raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
    assert late.error_code == ErrorCode.ILLEGAL_SASL_STATE


@pytest.mark.timeout(60)
def test_sasl_authenticate_does_not_change_what_kafka_python_infers(sasl_broker):
    from kafka import KafkaProducer
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    table = _Raw(sasl_broker.port).call(ApiKey.API_VERSIONS, 0, {})
    versions = {entry.api_key: (entry.min_version, entry.max_version) for entry in table.api_keys}
    assert versions[ApiKey.SASL_HANDSHAKE] == (0, 1) and versions[ApiKey.SASL_AUTHENTICATE] == (0, 2)
    inferred = infer_broker_version_from_api_versions(versions)
    assert inferred == infer_broker_version_from_api_versions(
        {key: span for key, span in versions.items() if key != ApiKey.SASL_AUTHENTICATE})
    producer = KafkaProducer(**sasl_broker.client_config(), bootstrap_timeout_ms=15000)
    try:
        assert producer.config["api_version"] == inferred
    finally:
        producer.close(timeout=5)


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
    _mutual_tls_roundtrip(sasl_broker, minikafka_ca)
    log = sasl_broker.stderr_since_start()
    assert "on listener SSL: TLS handshake failed" in log


# What each client reports, by case: kafka-python's log, kcat's stderr (aiokafka only says
# "Unable to bootstrap", logging a closed connection).
TLS_REFUSALS = {
    "certificate from another CA": ("alert unknown ca", "alert unknown ca"),
    "plaintext client on the TLS port": ("socket disconnected", "Disconnected while requesting ApiVersion"),
    "TLS client on the plaintext port": ("Handshake failed", "SSL handshake failed"),
}


def _tls_refusal_settings(broker, what: str) -> tuple[int, str | None, Path | None]:
    """(port, CA file or None for plaintext, client certificate or None) for a TLS_REFUSALS case."""
    stranger = broker.work_dir / "stranger.pem"
    if not stranger.exists():
        trustme.CA().issue_cert("client.test", common_name="stranger").private_key_and_cert_chain_pem.write_to_path(
            str(stranger))
    ssl_port, plain_port = broker.listener_ports["SSL"], broker.listener_ports["PLAINTEXT"]
    return {"certificate from another CA": (ssl_port, str(broker.ca_path), stranger),
            "plaintext client on the TLS port": (ssl_port, None, None),
            "TLS client on the plaintext port": (plain_port, str(broker.ca_path), None)}[what]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "kcat"])
def test_tls_refusals_with_each_client(sasl_broker, minikafka_ca, client, caplog):
    """Each refusal ends in an error within the client's own bound, never a hang; the broker
    sends the TLS alert OpenSSL wrote, so a certificate from another CA reads as "unknown ca"."""
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    for what, (kafka_python_says, kcat_says) in TLS_REFUSALS.items():
        port, cafile, certificate = _tls_refusal_settings(sasl_broker, what)
        bootstrap = f"127.0.0.1:{port}"
        started = time.monotonic()
        if client == "kafka-python":
            from kafka import KafkaProducer
            from kafka.errors import KafkaTimeoutError

            config = {"bootstrap_servers": bootstrap}
            if cafile:
                config.update(security_protocol="SSL", ssl_cafile=cafile)
            if certificate:
                config.update(ssl_certfile=str(certificate), ssl_keyfile=str(certificate))
            caplog.clear()
            with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(KafkaTimeoutError):
                KafkaProducer(**config, bootstrap_timeout_ms=3000)
            assert _logged(caplog, "kafka", kafka_python_says), what
        elif client == "aiokafka":
            config = {"bootstrap_servers": bootstrap}
            if cafile:
                context = ssl.create_default_context(cafile=cafile)
                if certificate:
                    context.load_cert_chain(str(certificate))
                config.update(security_protocol="SSL", ssl_context=context)
            assert "Unable to bootstrap" in _aiokafka_refusal(config), what
        else:
            args = ["-b", bootstrap]
            if cafile:
                args += ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={cafile}"]
            if certificate:
                args += ["-X", f"ssl.certificate.location={certificate}", "-X", f"ssl.key.location={certificate}"]
            result = subprocess.run(["kcat", "-L", *args, "-m", "3"], capture_output=True, text=True, timeout=60)
            assert result.returncode != 0 and kcat_says in result.stderr, (what, result.stderr)
        assert time.monotonic() - started < 30, what
    _mutual_tls_roundtrip(sasl_broker, minikafka_ca)


def _mutual_tls_roundtrip(broker, ca) -> None:
    """A client with a certificate of the broker's CA gets in (as User:CN=good,...)."""
    good_path = broker.work_dir / "good.pem"
    ca.issue_cert("client.test", common_name="good").private_key_and_cert_chain_pem.write_to_path(str(good_path))
    config = {"bootstrap_servers": f"127.0.0.1:{broker.listener_ports['SSL']}", "security_protocol": "SSL",
              "ssl_cafile": str(broker.ca_path), "ssl_certfile": str(good_path), "ssl_keyfile": str(good_path)}
    assert kafka_python_roundtrip(config, _topic()) == VALUES


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


# ------------------------------------------------------------------- TLS protocol settings
# ssl.enabled.protocols refuses a client that lacks the versions offered, ssl.cipher.suites
# decides the suite a client negotiates, a bad setting stops the broker at start-up with one
# line, and ssl.endpoint.identification.algorithm=HTTPS makes the broker's own client context
# (the inter-broker side) check the host name of the broker it dials.


def _handshake(broker, *, context: ssl.SSLContext | None = None, server_hostname: str = "127.0.0.1"):
    """A TLS handshake with ``broker``: the negotiated (cipher, version, bits)."""
    context = context or ssl.create_default_context(cafile=str(broker.ca_path))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        with context.wrap_socket(sock, server_hostname=server_hostname) as tls_sock:
            return tls_sock.cipher()


@pytest.mark.timeout(60)
def test_a_tls_1_2_client_is_refused_by_a_tls_1_3_broker(tmp_path, minikafka_ca):
    with MinikafkaBroker(tmp_path, {"ssl.enabled.protocols": "TLSv1.3"}, security_protocol="SSL",
                         ca=minikafka_ca) as broker:
        old = ssl.create_default_context(cafile=str(broker.ca_path))
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION|protocol version"):
            _handshake(broker, context=old)
        assert _handshake(broker)[1] == "TLSv1.3"
        assert kafka_python_roundtrip(broker.client_config(), _topic()) == VALUES
        assert "TLS handshake failed" in broker.stderr_since_start()


@pytest.mark.timeout(60)
def test_cipher_suites_decide_the_negotiated_suite(tmp_path, minikafka_ca):
    # trustme's keys are ECDSA, so the suites that can work are ECDHE_ECDSA ones.
    suites = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
    with MinikafkaBroker(tmp_path, {"ssl.cipher.suites": suites}, security_protocol="SSL",
                         ca=minikafka_ca) as broker:
        # A client able to do everything gets the one suite, and TLS 1.2 (no TLS 1.3 suite listed).
        assert _handshake(broker) == ("ECDHE-ECDSA-CHACHA20-POLY1305", "TLSv1.2", 256)
        other = ssl.create_default_context(cafile=str(broker.ca_path))
        other.maximum_version = ssl.TLSVersion.TLSv1_2
        other.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
        with pytest.raises(ssl.SSLError):
            _handshake(broker, context=other)
        assert kafka_python_roundtrip(broker.client_config(), _topic()) == VALUES


@pytest.mark.timeout(60)
def test_an_unknown_cipher_suite_stops_the_broker_with_one_line(tmp_path, minikafka_ca):
    broker = MinikafkaBroker(tmp_path, {"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,SSL_FANCY_SUITE"},
                             security_protocol="SSL", ca=minikafka_ca)
    with pytest.raises(BrokerStartError):
        broker.start()
    errors = [line for line in broker.stderr_since_start().splitlines() if line.startswith("minikafka serve:")]
    assert len(errors) == 1 and errors[0].startswith(
        "minikafka serve: error: ssl.cipher.suites: SSL_FANCY_SUITE unknown to OpenSSL"), errors


@pytest.mark.timeout(60)
def test_endpoint_identification_checks_the_dialled_brokers_name(tmp_path, minikafka_ca):
    """The context a broker dials other brokers with (tls.client_context) checks host names
    under HTTPS: the broker's certificate names 127.0.0.1 and localhost, not elsewhere.test."""
    with MinikafkaBroker(tmp_path / "peer", security_protocol="SSL", ca=minikafka_ca) as peer:
        def dialler(algorithm: str) -> ssl.SSLContext:
            config = BrokerConfig({"listeners": "SSL://127.0.0.1:0",
                                   "ssl.keystore.location": str(peer.work_dir / "broker.pem"),
                                   "ssl.truststore.location": str(peer.ca_path),
                                   "ssl.endpoint.identification.algorithm": algorithm})
            return tls.client_context(config, config.listener)

        checking = dialler("HTTPS")
        assert _handshake(peer, context=checking, server_hostname="127.0.0.1")
        with pytest.raises(ssl.SSLCertVerificationError, match="elsewhere.test"):
            _handshake(peer, context=checking, server_hostname="elsewhere.test")
        assert _handshake(peer, context=dialler(""), server_hostname="elsewhere.test")
