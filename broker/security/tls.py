"""TLS for SSL and SASL_SSL listeners: the server's ``ssl.SSLContext`` from Kafka's settings,
the context a broker dials other brokers with, and the principal a client certificate stands for.

Keys and certificates are PEM (``ssl.keystore.location``: the private key and the certificate
chain in one file; ``ssl.truststore.location``: CA certificates). ``ssl.client.auth`` maps to
``verify_mode``: none -> CERT_NONE, requested -> CERT_OPTIONAL, required -> CERT_REQUIRED.

Kafka's protocol settings map onto the context as follows (both directions):

* ``ssl.enabled.protocols`` (TLSv1 .. TLSv1.3) -> ``minimum_version`` / ``maximum_version``;
  Python enables a contiguous range of versions, so a list with a gap is refused.
* ``ssl.protocol`` (Java's SSLContext name) caps the range: ``TLSv1.2`` offers nothing newer
  than TLS 1.2; ``TLS`` (the default) does not cap.
* ``ssl.cipher.suites``: Java's (IANA) names, mapped to OpenSSL's for ``set_ciphers``. Python
  cannot choose among the TLS 1.3 suites, so those are listed all or not at all; a list without
  them leaves TLS 1.3 off (Java negotiates TLS 1.2 then, too), one with only them leaves TLS 1.2
  off.
* ``ssl.endpoint.identification.algorithm``: ``HTTPS`` makes a broker check, when it is the TLS
  *client* (inter-broker connections), that the certificate names the host it dialled; empty
  (Kafka 0.10.2's default) checks no name. A server does not check its clients' names, as in
  Kafka.

A setting that cannot be used is a ConfigError naming it, raised at start-up.
"""

from __future__ import annotations

import functools
import ssl

from minikafka.broker.config import BrokerConfig, ConfigError, Listener

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

# Kafka's (Java's) protocol names, oldest first.
TLS_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
                "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# ssl.protocol -> the newest version such a Java SSLContext offers (None: no cap).
_PROTOCOL_CAPS = {"TLS": None, "SSL": None, **{name: version for name, version in TLS_VERSIONS.items()}}


def server_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The TLS context of ``listener``; a key, certificate or CA file that cannot be used is a
    ConfigError naming the setting."""
    setting = lambda name: config.listener_setting(listener, name)  # noqa: E731
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    apply_protocol_settings(context, setting)
    endpoint_identification(config, listener)  # checked at start-up, used by client_context
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
    ``ssl.truststore.location``, shows its own keystore certificate (for mutual TLS) and checks
    the peer's host name if ``ssl.endpoint.identification.algorithm`` is HTTPS (the caller
    passes the host it dialled as ``server_hostname``)."""
    setting = lambda name: config.listener_setting(listener, name)  # noqa: E731
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    apply_protocol_settings(context, setting)
    context.check_hostname = endpoint_identification(config, listener)
    try:
        if setting("ssl.truststore.location"):
            context.load_verify_locations(cafile=setting("ssl.truststore.location"))
        context.load_cert_chain(setting("ssl.keystore.location"),
                                password=setting("ssl.key.password") or setting("ssl.keystore.password"))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"inter-broker TLS on listener {listener.name}: {exc}") from None
    return context


def endpoint_identification(config: BrokerConfig, listener: Listener) -> bool:
    """Whether a broker dialling ``listener`` of another broker checks the host name in its
    certificate (``ssl.endpoint.identification.algorithm``: HTTPS, any case, or empty)."""
    algorithm = (config.listener_setting(listener, "ssl.endpoint.identification.algorithm") or "").strip()
    if algorithm.upper() not in ("", "HTTPS"):
        raise ConfigError(f"ssl.endpoint.identification.algorithm: {algorithm!r} is not HTTPS or empty")
    return algorithm.upper() == "HTTPS"


def apply_protocol_settings(context: ssl.SSLContext, setting) -> None:
    """``ssl.protocol``, ``ssl.enabled.protocols`` and ``ssl.cipher.suites`` (as ``setting(name)``
    gives them) on ``context``: its version range and cipher suites."""
    low, high = _version_range(setting("ssl.protocol"), setting("ssl.enabled.protocols"))
    suites = setting("ssl.cipher.suites")
    if suites:
        low, high = _restrict_suites(context, suites, low, high)
    context.minimum_version, context.maximum_version = low, high


def _version_range(protocol: str, enabled: list[str]) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    if protocol not in _PROTOCOL_CAPS:
        raise ConfigError(f"ssl.protocol: {protocol!r} is not one of {', '.join(_PROTOCOL_CAPS)}")
    unknown = [name for name in enabled if name not in TLS_VERSIONS]
    if unknown or not enabled:
        raise ConfigError(f"ssl.enabled.protocols: {', '.join(unknown) or 'nothing'} is not among "
                          f"{', '.join(TLS_VERSIONS)}")
    versions = sorted({TLS_VERSIONS[name] for name in enabled})
    known = list(TLS_VERSIONS.values())
    if known.index(versions[-1]) - known.index(versions[0]) + 1 != len(versions):
        raise ConfigError(f"ssl.enabled.protocols: {', '.join(enabled)} leaves a version out between "
                          "them; Python's ssl enables one contiguous range")
    low, high = versions[0], versions[-1]
    cap = _PROTOCOL_CAPS[protocol]
    if cap is not None and cap < high:
        if cap < low:
            raise ConfigError(f"ssl.protocol: {protocol} offers none of ssl.enabled.protocols ({', '.join(enabled)})")
        high = cap
    return low, high


@functools.cache
def _tls13_suites() -> frozenset[str]:
    """The TLS 1.3 suites OpenSSL offers (their OpenSSL names are the IANA ones)."""
    return frozenset(c["name"] for c in ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).get_ciphers()
                     if c["protocol"] == "TLSv1.3")


# OpenSSL's descriptions of a suite's parts -> the words of its IANA name.
_KEY_EXCHANGES = {"kx-ecdhe": "ECDHE", "kx-dhe": "DHE", "kx-rsa": "RSA"}
_AUTHENTICATIONS = {"auth-rsa": "RSA", "auth-ecdsa": "ECDSA", "auth-dss": "DSS"}


def _iana_name(cipher: dict) -> str | None:
    """The IANA (and Java) name of a TLS 1.2-or-older suite from ``SSLContext.get_ciphers()``:
    ``TLS_<key exchange>_<authentication>_WITH_<cipher>_<MAC or PRF hash>``; None for the
    suites no broker uses (PSK, SRP, anonymous)."""
    exchange = _KEY_EXCHANGES.get(cipher["kea"])
    authentication = _AUTHENTICATIONS.get(cipher["auth"])
    if exchange is None or authentication is None:
        return None
    parties = exchange if exchange == authentication else f"{exchange}_{authentication}"
    symmetric = cipher["symmetric"].upper().replace("-", "_")
    if cipher["name"].endswith("CCM8"):
        symmetric += "_8"
    if cipher["digest"]:
        mac = "SHA" if cipher["digest"] == "sha1" else cipher["digest"].upper()
    elif "CCM" in symmetric:
        mac = None
    else:  # an AEAD suite names its PRF hash: SHA384 with 256-bit GCM, else SHA256
        mac = "SHA384" if symmetric.endswith("256_GCM") else "SHA256"
    return f"TLS_{parties}_WITH_{symmetric}" + (f"_{mac}" if mac else "")


@functools.cache
def openssl_suite_names() -> dict[str, str]:
    """IANA name -> OpenSSL name for the TLS 1.2-and-older suites this OpenSSL implements."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_ciphers("ALL:@SECLEVEL=0")
    names = {}
    for cipher in context.get_ciphers():
        if cipher["protocol"] != "TLSv1.3" and (iana := _iana_name(cipher)) is not None:
            names[iana] = cipher["name"]
    return names


def _restrict_suites(context: ssl.SSLContext, suites: list[str], low: ssl.TLSVersion,
                     high: ssl.TLSVersion) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    older = openssl_suite_names()
    unknown = [suite for suite in suites if suite not in older and suite not in _tls13_suites()]
    if unknown:
        raise ConfigError(f"ssl.cipher.suites: {', '.join(unknown)} unknown to {ssl.OPENSSL_VERSION} "
                          "(Java/IANA names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
    listed13 = {suite for suite in suites if suite in _tls13_suites()}
    if listed13 and listed13 != _tls13_suites():
        raise ConfigError("ssl.cipher.suites: Python's ssl cannot choose among TLS 1.3 suites; list all "
                          f"of {', '.join(sorted(_tls13_suites()))} or none (TLS 1.3 is then off)")
    chosen = [older[suite] for suite in suites if suite in older]
    if chosen:
        try:
            context.set_ciphers(":".join(chosen))
        except ssl.SSLError as exc:
            raise ConfigError(f"ssl.cipher.suites: OpenSSL refuses {', '.join(chosen)}: {exc}") from None
    else:
        low = max(low, ssl.TLSVersion.TLSv1_3)
    if not listed13:
        high = min(high, ssl.TLSVersion.TLSv1_2)
    if low > high:
        raise ConfigError(f"ssl.cipher.suites: none of {', '.join(suites)} can be used with "
                          "ssl.enabled.protocols and ssl.protocol")
    return low, high


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
