"""Kafka's TLS protocol settings mapped onto Python's ``ssl.SSLContext`` (broker.security.tls):
ssl.enabled.protocols and ssl.protocol as the version range, ssl.cipher.suites by their IANA
names, ssl.endpoint.identification.algorithm on the inter-broker (client) side. Handshakes
against a running broker are in tests/e2e/test_tls_settings.py."""

from __future__ import annotations

import shutil
import ssl
import subprocess

import pytest
import trustme

from minikafka.broker.config import BrokerConfig, ConfigError
from minikafka.broker.security import tls


@pytest.fixture
def contexts(tmp_path):
    """``contexts(**settings)`` -> the server and client contexts of an SSL listener with
    ``settings`` (Kafka names with '_' for '.')."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "broker.pem"))

    def make(**settings: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        config = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(tmp_path / "broker.pem"),
                               "ssl.truststore.location": str(tmp_path / "ca.pem"),
                               **{name.replace("_", "."): value for name, value in settings.items()}})
        return tls.server_context(config, config.listener), tls.client_context(config, config.listener)

    return make


def test_defaults_offer_tls_1_2_and_1_3_and_check_no_host_name(contexts):
    server, client = contexts()
    assert (server.minimum_version, server.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    assert client.check_hostname is False


def test_enabled_protocols_and_ssl_protocol_make_the_version_range(contexts):
    server, _ = contexts(ssl_enabled_protocols="TLSv1.3")
    assert (server.minimum_version, server.maximum_version) == (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3)
    server, _ = contexts(ssl_enabled_protocols="TLSv1.2,TLSv1.3", ssl_protocol="TLSv1.2")
    assert (server.minimum_version, server.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2)


def test_endpoint_identification_https_checks_host_names_on_the_client_side(contexts):
    server, client = contexts(ssl_endpoint_identification_algorithm="https")
    assert client.check_hostname is True and client.verify_mode == ssl.CERT_REQUIRED
    assert server.check_hostname is False


def test_cipher_suites_by_iana_name(contexts):
    server, _ = contexts(ssl_cipher_suites="TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256")
    names = {cipher["name"] for cipher in server.get_ciphers() if cipher["protocol"] != "TLSv1.3"}
    assert names == {"ECDHE-ECDSA-CHACHA20-POLY1305"}
    assert server.maximum_version == ssl.TLSVersion.TLSv1_2  # no TLS 1.3 suite listed
    every_tls13 = ",".join(sorted(tls._tls13_suites()))
    server, _ = contexts(ssl_cipher_suites=every_tls13)
    assert server.minimum_version == ssl.TLSVersion.TLSv1_3  # no TLS 1.2 suite listed


@pytest.mark.parametrize(("settings", "message"), [
    ({"ssl_cipher_suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_NOT_A_SUITE"},
     "ssl.cipher.suites: TLS_NOT_A_SUITE unknown to OpenSSL"),
    ({"ssl_cipher_suites": "TLS_AES_128_GCM_SHA256"}, "ssl.cipher.suites: Python's ssl cannot choose among TLS 1.3"),
    ({"ssl_cipher_suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ssl_enabled_protocols": "TLSv1.3"},
     "ssl.cipher.suites: none of TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 can be used"),
    ({"ssl_enabled_protocols": "TLSv1.1,TLSv1.3"}, "ssl.enabled.protocols: TLSv1.1, TLSv1.3 leaves a version out"),
    ({"ssl_enabled_protocols": "SSLv3"}, "ssl.enabled.protocols: SSLv3 is not among"),
    ({"ssl_protocol": "SSLv3"}, "ssl.protocol: 'SSLv3' is not one of"),
    ({"ssl_protocol": "TLSv1.2", "ssl_enabled_protocols": "TLSv1.3"}, "ssl.protocol: TLSv1.2 offers none"),
    ({"ssl_endpoint_identification_algorithm": "ldap"}, "ssl.endpoint.identification.algorithm: 'ldap'"),
])
def test_settings_that_cannot_be_used_are_one_readable_line(contexts, settings, message):
    with pytest.raises(ConfigError) as refused:
        contexts(**settings)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_iana_names_are_openssls_own():
    """Every name we derive is the one ``openssl ciphers -stdname`` gives the suite."""
    listing = subprocess.run(["openssl", "ciphers", "-stdname", "ALL:@SECLEVEL=0"], capture_output=True,
                             text=True, check=True, timeout=30).stdout
    standard = {}
    for line in listing.splitlines():
        iana, _, rest = line.partition(" - ")
        standard[rest.split()[0]] = iana.strip()
    ours = tls.openssl_suite_names()
    assert len(ours) > 40
    assert {openssl: iana for iana, openssl in ours.items()} == {openssl: standard[openssl] for openssl in ours.values()}
    assert ours["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"] == "ECDHE-RSA-AES256-GCM-SHA384"
    assert ours["TLS_RSA_WITH_AES_128_CBC_SHA"] == "AES128-SHA"
