"""TLS for SSL and SASL_SSL listeners: the server's ``ssl.SSLContext`` from Kafka's settings,
and the principal a client certificate stands for.

Keys and certificates are PEM (``ssl.keystore.location``: the private key and the certificate
chain in one file; ``ssl.truststore.location``: CA certificates). ``ssl.client.auth`` maps to
``verify_mode``: none -> CERT_NONE, requested -> CERT_OPTIONAL, required -> CERT_REQUIRED.
"""

from __future__ import annotations

import ssl

from minikafka.broker.config import BrokerConfig, ConfigError, Listener

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The TLS context of ``listener``; a key, certificate or CA file that cannot be used is a
    ConfigError naming the setting."""
    setting = lambda name: config.listener_setting(listener, name)  # noqa: E731
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    keystore = setting("ssl.keystore.location")
    password = setting("ssl.key.password") or setting("ssl.keystore.password")
    try:
        context.load_cert_chain(keystore, password=password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.keystore.location: cannot load a PEM key and certificate from "
                          f"{keystore} for listener {listener.name}: {exc}") from None
    truststore = setting("ssl.truststore.location")
    try:
        if truststore:
            context.load_verify_locations(cafile=truststore)
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.truststore.location: cannot load PEM CA certificates from "
                          f"{truststore} for listener {listener.name}: {exc}") from None
    context.verify_mode = _VERIFY[setting("ssl.client.auth")]
    return context


def client_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The TLS context a broker connects to other brokers' ``listener`` with: it trusts
    ``ssl.truststore.location`` and shows its own keystore certificate (for mutual TLS). Host
    names are not checked, as Kafka 0.10.2 did not by default
    (``ssl.endpoint.identification.algorithm`` was empty)."""
    setting = lambda name: config.listener_setting(listener, name)  # noqa: E731
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    try:
        if setting("ssl.truststore.location"):
            context.load_verify_locations(cafile=setting("ssl.truststore.location"))
        context.load_cert_chain(setting("ssl.keystore.location"),
                                password=setting("ssl.key.password") or setting("ssl.keystore.password"))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"inter-broker TLS on listener {listener.name}: {exc}") from None
    return context


# RFC 2253's attribute names for the OIDs Python reports under longer names.
_RDN_NAMES = {"commonName": "CN", "countryName": "C", "localityName": "L",
              "stateOrProvinceName": "ST", "organizationName": "O",
              "organizationalUnitName": "OU", "streetAddress": "STREET",
              "domainComponent": "DC", "userId": "UID", "emailAddress": "EMAILADDRESS"}


def _escape(value: str) -> str:
    escaped = "".join("\\" + ch if ch in ',+"\\<>;=' else ch for ch in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def certificate_dn(peercert: dict) -> str:
    """The subject of a verified peer certificate as Java's ``X500Principal.getName()`` writes
    it (RFC 2253: most specific RDN first, e.g. ``CN=alice,O=Example,C=US``), which is how
    Kafka's default principal builder names mutual-TLS users."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{_RDN_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn))
    return ",".join(rdns)
