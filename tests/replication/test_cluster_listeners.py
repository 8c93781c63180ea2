"""A cluster with several listeners (Kafka's listener names): brokers replicate and take the
controller's requests over inter.broker.listener.name, each listener's clients are told that
listener's addresses, and a SASL client produces with acks=all and consumes across brokers."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from minikafka.testing import MinikafkaCluster

pytestmark = [pytest.mark.timeout(240), pytest.mark.zookeeper]

SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice", "sasl_plain_password": "alice-pw"}


@pytest.mark.parametrize("replication", ["PLAINTEXT", "SSL"])
def test_replication_uses_the_inter_broker_listener_and_clients_their_own(tmp_path, zookeeper, replication,
                                                                         minikafka_ca):
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,REPLICATION://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,REPLICATION:{replication},SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "REPLICATION",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";',
    }
    if replication == "SSL":
        # Mutual TLS between the brokers: each shows the keystore certificate and requires the peer's.
        keystore, ca_path = tmp_path / "broker.pem", tmp_path / "ca.pem"
        minikafka_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(keystore))
        minikafka_ca.cert_pem.write_to_path(str(ca_path))
        overrides.update({"listener.name.replication.ssl.keystore.location": str(keystore),
                          "listener.name.replication.ssl.truststore.location": str(ca_path),
                          "listener.name.replication.ssl.client.auth": "required"})
    # The link proxies forward to the REPLICATION listener the brokers dial each other on.
    with MinikafkaCluster(tmp_path / "c", 2, overrides, zookeeper=zookeeper.connect_string) as cluster:
        ports = {i + 1: b.listener_ports for i, b in enumerate(cluster.brokers)}  # broker ids 1..N
        # Metadata on the plaintext listener names every broker's PLAINTEXT port.
        metadata = cluster.metadata()
        assert {(b.node_id, b.port) for b in metadata.brokers} == {(i, p["PLAINTEXT"]) for i, p in ports.items()}
        sasl_bootstrap = f"127.0.0.1:{ports[1]['SASL_PLAINTEXT']}"
        admin = KafkaAdminClient(bootstrap_servers=sasl_bootstrap, **SASL)
        try:
            admin.create_topics([NewTopic("replicated", 2, 2)])
            # Over SASL, the brokers a client is sent to are the SASL listeners.
            described = admin.describe_cluster()
            assert {b["port"] for b in described["brokers"]} == \
                {p["SASL_PLAINTEXT"] for p in ports.values()}
        finally:
            admin.close()
        cluster.wait_until(lambda m: any(t.name == "replicated" and all(len(p.isr_nodes) == 2 for p in t.partitions)
                                         for t in m.topics), "both replicas in sync")
        producer = KafkaProducer(bootstrap_servers=sasl_bootstrap, acks="all", **SASL)
        for i in range(20):
            producer.send("replicated", f"m{i}".encode(), partition=i % 2).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer("replicated", bootstrap_servers=sasl_bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=10000, **SASL)
        got = sorted(m.value for m in consumer)
        consumer.close()
        assert got == sorted(f"m{i}".encode() for i in range(20))
        # SCRAM users live in ZooKeeper's /config/users/<user>, which every broker reads.
        added = subprocess.run([sys.executable, "-m", "minikafka.broker", "users", "add", "bob", "--mechanism",
                                "SCRAM-SHA-256", "--password-stdin", "--zookeeper", cluster.zookeeper_connect],
                               input="bob-Zk-pw\n", capture_output=True, text=True, timeout=60)
        assert added.returncode == 0, added.stderr
        for broker in cluster.brokers:
            scram = KafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}",
                                  security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                                  sasl_plain_username="bob", sasl_plain_password="bob-Zk-pw", acks="all")
            scram.send("replicated", b"from bob", partition=0).get(timeout=30)
            scram.close()
            assert "bob-Zk-pw" not in broker.stderr_since_start()
        listed = subprocess.run([sys.executable, "-m", "minikafka.broker", "users", "list", "--zookeeper",
                                 cluster.zookeeper_connect], capture_output=True, text=True, timeout=60)
        assert listed.stdout.splitlines() == ["bob\tSCRAM-SHA-256"]
        # Both replicas of both partitions hold the same bytes: the followers fetched them
        # from the leaders over REPLICATION (the ISR alone would not show it: a follower that
        # cannot fetch is only dropped from it after replica.lag.time.max.ms).
        for partition in (0, 1):
            segments = [b.log_dir / f"replicated-{partition}" / "00000000000000000000.log" for b in cluster.brokers]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len({s.read_bytes() for s in segments}) != 1:
                time.sleep(0.2)
            assert segments[0].read_bytes() and len({s.read_bytes() for s in segments}) == 1
        # Every replica caught up over the REPLICATION listener: both brokers log their
        # registration with it, and the followers' fetches reached the leaders there.
        for broker in cluster.brokers:
            log = broker.stderr_since_start()
            assert f"REPLICATION://127.0.0.1:{broker.listener_ports['REPLICATION']}" in log
            assert "TLS handshake failed" not in log
        assert all(link.live_connections for (frm, to), link in cluster.links.items() if to != "zookeeper")


def test_acls_written_to_zookeeper_apply_on_the_running_cluster(tmp_path, zookeeper):
    from kafka.errors import TopicAuthorizationFailedError

    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";',
        "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
        # The brokers talk to each other as User:ANONYMOUS over PLAINTEXT.
        "super.users": "User:ANONYMOUS",
    }
    with MinikafkaCluster(tmp_path / "c", 2, overrides, zookeeper=zookeeper.connect_string, links=False) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic("guarded", 1, 2)])
        admin.close()
        cluster.wait_until(lambda m: any(t.name == "guarded" and t.partitions for t in m.topics), "topic known")

        def produce_as_alice(via) -> None:
            producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{via.listener_ports['SASL_PLAINTEXT']}",
                                     acks="all", max_block_ms=10000, **SASL)
            try:
                producer.send("guarded", b"x").get(timeout=30)
            finally:
                producer.close()

        with pytest.raises(TopicAuthorizationFailedError):
            produce_as_alice(cluster.brokers[0])
        added = subprocess.run([sys.executable, "-m", "minikafka.broker", "acls", "add", "--zookeeper",
                                cluster.zookeeper_connect, "--allow-principal", "User:alice",
                                "--operation", "Write", "--topic", "guarded"],
                               capture_output=True, text=True, timeout=60)
        assert added.returncode == 0, added.stderr
        for broker in cluster.brokers:
            deadline = time.monotonic() + 15
            while True:  # each broker re-reads the ACL when its change notification arrives
                try:
                    produce_as_alice(broker)
                    break
                except TopicAuthorizationFailedError:
                    assert time.monotonic() < deadline, "the ACL never reached the broker"
                    time.sleep(0.5)
        listed = subprocess.run([sys.executable, "-m", "minikafka.broker", "acls", "list", "--zookeeper",
                                 cluster.zookeeper_connect], capture_output=True, text=True, timeout=60)
        assert "User:alice has Allow permission for operations: Write from hosts: *" in listed.stdout
