"""What a test's Kafka clients need: each client library's settings for a broker or cluster
(:func:`client_settings`), and one raw request over a blocking socket (:func:`kafka_request`)
for what no client library sends."""

from __future__ import annotations

from pathlib import Path

__all__ = ["client_settings", "kafka_request"]


def client_settings(client: str, *, bootstrap: str, security_protocol: str, sasl_mechanism: str | None,
                    users: dict[str, str], user: str | None, ca_path: Path | None, certificate, work_dir: Path) -> dict:
    """What ``client`` ("kafka-python", "aiokafka", "confluent-kafka") needs to reach
    ``bootstrap`` over ``security_protocol``: the CA, SASL credentials of ``user`` (the first of
    ``users`` by default) and ``certificate`` (a trustme leaf, written to ``work_dir``) for
    mutual TLS. A single broker's and a cluster's ``client_config`` both answer with it."""
    protocol = security_protocol
    uses_tls = protocol in ("SSL", "SASL_SSL")
    uses_sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
    if uses_sasl:
        user = user or next(iter(users), None)
        password = users.get(user)
    cert_path = None
    if certificate is not None:
        cert_path = work_dir / f"client-{id(certificate)}.pem"
        certificate.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    if client == "confluent-kafka":
        config = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
        if uses_tls:
            config["ssl.ca.location"] = str(ca_path)
            if cert_path is not None:
                config["ssl.certificate.location"] = config["ssl.key.location"] = str(cert_path)
        if uses_sasl:
            config.update({"sasl.mechanism": sasl_mechanism, "sasl.username": user, "sasl.password": password})
        return config
    if client not in ("kafka-python", "aiokafka"):
        raise ValueError(f"client {client!r} is not kafka-python, aiokafka or confluent-kafka")
    config = {"bootstrap_servers": bootstrap, "security_protocol": protocol}
    if uses_tls:
        if client == "aiokafka":
            import ssl

            context = ssl.create_default_context(cafile=str(ca_path))
            if cert_path is not None:
                context.load_cert_chain(str(cert_path))
            config["ssl_context"] = context
        else:
            config["ssl_cafile"] = str(ca_path)
            if cert_path is not None:
                config["ssl_certfile"] = config["ssl_keyfile"] = str(cert_path)
    if uses_sasl:
        config.update({"sasl_mechanism": sasl_mechanism, "sasl_plain_username": user,
                       "sasl_plain_password": password})
    return config


def kafka_request(bootstrap: str, api_key: int, version: int, body: dict, timeout: float = 10.0, *,
                  plain_login: tuple[str, str] | None = None):
    """One request to a broker over a plain blocking socket, for fixtures that read the
    cluster's own view of itself and tests that send what no client library can;
    ``plain_login`` = (user, password) authenticates with SASL PLAIN first."""
    from minikafka.broker.blocking_client import kafka_request as request

    return request(bootstrap, api_key, version, body, timeout=timeout, client_id="minikafka-pytest",
                   plain_login=plain_login)


def create_topics_body(name: str, partitions: int, replication_factor: int, timeout: float, configs: dict) -> dict:
    """A CreateTopics v0 body for one topic; ``configs`` are topic configs with ``_`` for ``.``
    (``message_format_version="0.10.2"``)."""
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [], "configs": [{"name": k.replace("_", "."), "value": str(v)}
                                                        for k, v in configs.items()]}],
            "timeout_ms": int(timeout * 1000)}
