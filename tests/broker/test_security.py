"""The sans-I/O security pieces: SCRAM credentials and their file, the SCRAM and PLAIN server
mechanisms (against RFC 7677's example and kafka-python's own SCRAM client), Kafka's JAAS
syntax, and the certificate DN a mutual-TLS principal is named by."""

from __future__ import annotations

import base64
import json
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from minikafka.broker.security.sasl import (
    AuthenticationFailed, JaasError, PlainServer, ScramServer, parse_jaas, plain_users)
from minikafka.broker.security.scram import CredentialError, CredentialStore, ScramCredential
from minikafka.broker.security.tls import certificate_dn


def test_rfc7677_example_exchange():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = ScramCredential.from_password("SCRAM-SHA-256", "pencil", salt=salt, iterations=4096)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.user == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_scram_client_authenticates(mechanism):
    credential = ScramCredential.from_password(mechanism, "s3cret")
    server = ScramServer(mechanism, {"alice": credential}.get)
    client = ScramClient("alice", "s3cret", mechanism)
    client.process_server_first_message(server.step(client.first_message()))
    client.process_server_final_message(server.step(client.final_message()))  # checks v=
    assert server.user == "alice"


@pytest.mark.parametrize("user, password, reason", [
    ("alice", "not-the-pw", "wrong password for user 'alice'"),
    ("mallory", "s3cret", "unknown user 'mallory'"),
])
def test_scram_refuses_a_wrong_password_and_an_unknown_user(user, password, reason):
    server = ScramServer("SCRAM-SHA-256", {"alice": ScramCredential.from_password("SCRAM-SHA-256", "s3cret")}.get)
    client = ScramClient(user, password, "SCRAM-SHA-256")
    with pytest.raises(AuthenticationFailed, match=reason) as info:
        client.process_server_first_message(server.step(client.first_message()))
        server.step(client.final_message())
    assert password not in str(info.value)
    assert server.user is None


@pytest.mark.parametrize("token", [b"", b"p=tls-unique,,n=a,r=x", b"n,,r=x", b"n,,n=a=,r=x", b"\xff"])
def test_scram_refuses_malformed_first_messages(token):
    with pytest.raises(AuthenticationFailed):
        ScramServer("SCRAM-SHA-256", lambda user: None).step(token)


def test_scram_refuses_a_replayed_nonce():
    credential = ScramCredential.from_password("SCRAM-SHA-256", "s3cret")
    server = ScramServer("SCRAM-SHA-256", {"alice": credential}.get)
    server.step(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.step(b"c=biws,r=abcother,p=AAAA")


def test_plain():
    server = PlainServer({"alice": "s3cret"})
    assert server.step(b"\0alice\0s3cret") == b"" and server.user == "alice"
    assert PlainServer({"alice": "s3cret"}).step(b"alice\0alice\0s3cret") == b""
    for token in (b"\0alice\0not-the-pw", b"\0bob\0s3cret", b"bob\0alice\0s3cret", b"alice\0s3cret", b"\0\xff\0x"):
        with pytest.raises(AuthenticationFailed) as info:
            PlainServer({"alice": "s3cret"}).step(token)
        assert "s3cret" not in str(info.value) and "not-the-pw" not in str(info.value)


def test_jaas_syntax():
    text = ('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
            '  username="admin" password="admin-secret"\n'
            '  user_admin="admin-secret" user_alice="with \\"quote\\" and ;" user_bob=bare;')
    module, options = parse_jaas(text)
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options["username"] == "admin"
    assert plain_users(text) == {"admin": "admin-secret", "alice": 'with "quote" and ;', "bob": "bare"}
    with pytest.raises(JaasError, match="';' ends"):
        parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required user_a="x"')
    with pytest.raises(JaasError, match="PLAIN needs"):
        plain_users("org.apache.kafka.common.security.scram.ScramLoginModule required;")


def test_credential_store_keeps_only_salted_keys(tmp_path):
    store = CredentialStore(tmp_path)
    store.add("alice", "s3cret", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
    store.add("bob", "s3cret", ["SCRAM-SHA-256"], iterations=8192)
    text = store.path.read_text()
    assert "s3cret" not in text
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    stored = json.loads(text)["alice"]["SCRAM-SHA-256"]
    assert stored.startswith("salt=") and ",stored_key=" in stored and stored.endswith(",iterations=4096")
    # A second user with the same password gets another salt, hence other keys.
    assert store.get("alice", "SCRAM-SHA-256").stored_key != store.get("bob", "SCRAM-SHA-256").stored_key
    assert store.users() == {"alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"], "bob": ["SCRAM-SHA-256"]}
    assert store.remove("alice", ["SCRAM-SHA-512"]) and store.users()["alice"] == ["SCRAM-SHA-256"]
    assert store.remove("alice") and "alice" not in store.users()
    assert not store.remove("alice")
    assert store.get("alice", "SCRAM-SHA-256") is None
    with pytest.raises(CredentialError, match="at least 4096"):
        store.add("carol", "x", ["SCRAM-SHA-256"], iterations=100)


def test_certificate_dn_is_rfc2253_most_specific_first():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Example, Inc."),),
                        (("organizationalUnitName", "Eng"),), (("commonName", "alice"),))}
    assert certificate_dn(cert) == "CN=alice,OU=Eng,O=Example\\, Inc.,C=US"


def test_authorizer_follows_kafkas_rules(tmp_path):
    from minikafka.broker.security.acl import Acl, AclError, AclStore, Authorizer, parse_super_users

    store = AclStore(tmp_path)
    store.add("Topic:orders", [Acl.make("User:alice", "Write"), Acl.make("User:*", "Read", host="10.0.0.1")])
    store.add("Topic:*", [Acl.make("User:carol", "All")])
    store.add("Group:billing", [Acl.make("User:alice", "Read"), Acl.make("User:alice", "Read", "Deny", "10.9.9.9")])
    authorizer = Authorizer(store, super_users=parse_super_users("User:root; User:CN=ops,O=Example"))
    allowed = lambda *args: authorizer.authorize(*args)  # noqa: E731
    assert allowed("User:alice", "127.0.0.1", "Write", "Topic", "orders")
    assert allowed("User:alice", "127.0.0.1", "Describe", "Topic", "orders")  # WRITE implies DESCRIBE
    assert not allowed("User:alice", "127.0.0.1", "Read", "Topic", "orders")  # READ only from 10.0.0.1
    assert allowed("User:bob", "10.0.0.1", "Read", "Topic", "orders")          # User:* from that host
    assert allowed("User:carol", "1.2.3.4", "Delete", "Topic", "anything")     # ALL on Topic:*
    assert not allowed("User:alice", "10.9.9.9", "Read", "Group", "billing")   # DENY wins
    assert allowed("User:alice", "10.0.0.2", "Read", "Group", "billing")
    assert allowed("User:CN=ops,O=Example", "h", "Create", "Cluster", "kafka-cluster")  # super user
    # No ACL on a resource: closed unless allow.everyone.if.no.acl.found.
    assert not allowed("User:alice", "h", "Read", "Group", "other")
    assert Authorizer(store, allow_if_no_acls=True).authorize("User:alice", "h", "Read", "Group", "other")
    # Removing takes effect at the next decision (the file is re-read when it changes).
    assert store.remove("Topic:orders", [Acl.make("User:alice", "Write")]) == 1
    assert not allowed("User:alice", "127.0.0.1", "Write", "Topic", "orders")
    with pytest.raises(AclError, match="operation 'Fly'"):
        Acl.make("User:alice", "Fly")
    store.path.write_text("{not json")
    with pytest.raises(AclError, match="cannot read"):
        authorizer.authorize("User:alice", "h", "Read", "Topic", "orders")


_NAMES = st.text(alphabet="ab-", min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(patterns=st.lists(st.tuples(st.booleans(), st.one_of(_NAMES, st.just("*")), st.booleans()), max_size=6),
       name=_NAMES)
def test_prefixed_acls_apply_to_every_name_they_begin(patterns, name):
    """KIP-290: the ACLs deciding on Topic ``name`` are those of the patterns a MATCH filter on
    ``name`` selects (literal equal, literal ``*``, a prefix of it): one DENY among them
    denies, else one ALLOW allows, and none leaves it to allow.everyone.if.no.acl.found."""
    from types import SimpleNamespace

    from minikafka.broker.security.acl import Acl, Authorizer, ZkAcls, entry_json, resource_key
    from minikafka.broker.security.acl_admin import ANY, MATCH, Filter

    by_key: dict[str, list[Acl]] = {}
    for prefixed, pattern, deny in patterns:
        by_key.setdefault(resource_key("Topic", pattern, prefixed=prefixed), []).append(
            Acl.make("User:bob", "Write", "Deny" if deny else "Allow"))
    store = ZkAcls()
    store.replace({key: entry_json(acls) for key, acls in by_key.items()})
    match = Filter(SimpleNamespace(resource_type_filter=2, pattern_type_filter=MATCH, resource_name_filter=name,
                                   principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY))
    applying = [acl for key, acls in by_key.items() for acl in acls if match.matches(key, acl)]
    assert bool(applying) == any(name.startswith(pattern) if prefixed else pattern in (name, "*")
                                 for prefixed, pattern, _ in patterns)
    for allow_if_no_acls in (False, True):
        decided = Authorizer(store, allow_if_no_acls=allow_if_no_acls).authorize("User:bob", "h", "Write", "Topic", name)
        if not applying:
            assert decided == allow_if_no_acls
        else:
            assert decided == (all(acl.permission == "Allow" for acl in applying))


def test_a_prefixed_deny_covers_the_allows_it_begins_for_authorize_any():
    from minikafka.broker.security.acl import Acl, Authorizer, ZkAcls, entry_json

    store = ZkAcls()
    allow, deny = Acl.make("User:bob", "Write"), Acl.make("User:bob", "Write", "Deny")
    store.replace({"Topic:pfx-x": entry_json([allow]), "Prefixed:Topic:pfx-y": entry_json([allow]),
                   "Prefixed:Topic:pfx-": entry_json([deny])})
    assert not Authorizer(store).authorize_any("User:bob", "h", "Write", "Topic")
    store.update("Prefixed:Topic:p", entry_json([allow]))
    assert Authorizer(store).authorize_any("User:bob", "h", "Write", "Topic")
