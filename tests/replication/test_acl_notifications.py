"""ACL changes reach a cluster's brokers through Kafka's ``/kafka-acl-changes`` notifications:
the decisions (which notifications are new, which are old enough to purge), the listener on a
real ZooKeeper, and a secured cluster where a denied client becomes allowed and denied again,
by ``minikafka acls`` and by the ACL APIs of any broker."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.errors import NoError, TopicAuthorizationFailedError

from minikafka.replication.kafka_zk import ACL_CHANGE_PREFIX, ACL_CHANGES_PATH, KafkaZk
from minikafka.replication.notifications import NotificationListener, expired, pending, sequence_of
from minikafka.replication.zookeeper import ZkClient


def test_pending_notifications_are_the_new_ones_in_sequence_order():
    children = ["acl_changes_0000000010", "acl_changes_0000000002", "acl_changes_0000000011", "stray"]
    assert pending(children, "acl_changes_", -1) == [(2, "acl_changes_0000000002"), (10, "acl_changes_0000000010"),
                                                      (11, "acl_changes_0000000011")]
    assert pending(children, "acl_changes_", 10) == [(11, "acl_changes_0000000011")]
    assert pending(children, "acl_changes_", 11) == []
    assert sequence_of("acl_changes_x", "acl_changes_") is None


def test_expired_notifications_are_those_older_than_the_expiration():
    created = {"a": 1_000, "b": 5_000, "c": 9_000}
    assert expired(created, now_ms=10_000, expiration_ms=4_000) == ["a", "b"]
    assert expired(created, now_ms=10_000, expiration_ms=9_000) == []


@pytest.mark.zookeeper
@pytest.mark.timeout(60)
async def test_listener_handles_each_notification_once_and_purges_old_ones(zk_chroot):
    handled: list[bytes] = []
    now = [0.0]

    async def handle(data: bytes) -> None:
        handled.append(data)

    async with ZkClient(zk_chroot) as zk, ZkClient(zk_chroot) as writer:
        kafka = KafkaZk(writer)
        await kafka.set_acls("Topic", "a", {"version": 1, "acls": []})
        listener = NotificationListener(zk, ACL_CHANGES_PATH, ACL_CHANGE_PREFIX, handle,
                                        expiration_ms=60_000, clock=lambda: now[0])
        children = await zk.children(ACL_CHANGES_PATH)
        now[0] = time.time()
        await listener.on_children(children)
        await listener.on_children(children)  # the same children again: nothing new
        assert handled == [b"Topic:a"]
        await kafka.set_acls("Group", "g", None)
        await listener.on_children(await zk.children(ACL_CHANGES_PATH))
        assert handled == [b"Topic:a", b"Group:g"]
        assert len(await zk.children(ACL_CHANGES_PATH)) == 2
        # Past the expiration both are purged, and handled no more.
        now[0] = time.time() + 61
        await listener.on_children(await zk.children(ACL_CHANGES_PATH))
        assert await zk.children(ACL_CHANGES_PATH) == []
        assert handled == [b"Topic:a", b"Group:g"]


SASL_ALICE = {"sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-pw"}


def _acls(cluster, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "minikafka.broker", "acls", *args, "--zookeeper",
                           cluster.zookeeper_connect], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _alice_may_write(cluster, broker_id: int) -> bool:
    port = cluster.broker(broker_id).listener_ports["SASL_PLAINTEXT"]
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
                             acks="all", max_block_ms=10000, retries=0, **SASL_ALICE)
    try:
        producer.send("guarded", b"x", partition=0).get(timeout=30)
        return True
    except TopicAuthorizationFailedError:
        return False
    finally:
        producer.close()


@pytest.mark.zookeeper
@pytest.mark.timeout(240)
def test_an_acl_change_reaches_every_broker_of_a_secured_cluster(minikafka_cluster_factory, until):
    # The brokers replicate over SASL as User:broker, which the authorizer lets through as a
    # super user (a follower's Fetch needs ClusterAction); the fixture looks the cluster up as
    # User:ANONYMOUS on PLAINTEXT.
    cluster = minikafka_cluster_factory(3, security_protocol="SASL_PLAINTEXT", users={"alice": "alice-pw"},
                                        links=False, **{"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
                                                        "super.users": "User:broker;User:ANONYMOUS"})
    cluster.create_topic("guarded", 1, 3)
    assert not any(_alice_may_write(cluster, b) for b in cluster.ids)
    _acls(cluster, "add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "guarded")
    until(lambda: _alice_may_write(cluster, cluster.leader("guarded", 0)), "the ACL at the leader", 20)
    for broker_id in cluster.ids:
        # Every broker, leader or not, re-read just that resource when notified.
        until(lambda: "ACLs of Topic:guarded re-read after a change notification"
               in cluster.broker(broker_id).stderr_since_start(), f"broker {broker_id} notified")
    _acls(cluster, "remove", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "guarded")
    until(lambda: not _alice_may_write(cluster, cluster.leader("guarded", 0)), "the removal at the leader")

    # The same through the ACL APIs, asked of a broker that does not lead the partition.
    import confluent_kafka.admin as confluent
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePatternFilter, ResourceType)

    asked = next(b for b in cluster.ids if b != cluster.leader("guarded", 0))
    admin = confluent.AdminClient({"bootstrap.servers": cluster.broker(asked).bootstrap})
    binding = confluent.AclBinding(confluent.ResourceType.TOPIC, "guarded", confluent.ResourcePatternType.LITERAL,
                                   "User:alice", "*", confluent.AclOperation.WRITE, confluent.AclPermissionType.ALLOW)
    admin.create_acls([binding])[binding].result(timeout=30)
    until(lambda: _alice_may_write(cluster, cluster.leader("guarded", 0)), "the API's ACL at the leader", 20)
    kafka_python = KafkaAdminClient(bootstrap_servers=cluster.broker(asked).bootstrap)
    alices = ACLFilter("User:alice", None, ACLOperation.ANY, ACLPermissionType.ANY,
                       ResourcePatternFilter(ResourceType.TOPIC, "guarded", ACLResourcePatternType.LITERAL))
    ((_, deleted, error),) = kafka_python.delete_acls([alices])
    kafka_python.close()
    assert [a.operation for a in deleted] == [ACLOperation.WRITE] and error is NoError
    until(lambda: not _alice_may_write(cluster, cluster.leader("guarded", 0)), "the API's removal at the leader")
    cluster.wait_for_full_isr(["guarded"])  # replication kept going as User:broker all along

    # PREFIXED patterns (KIP-290) travel by /kafka-acl-extended-changes: by the CLI, then
    # created through one broker's API and enforced by another; a restarted broker reads them
    # back from /kafka-acl-extended.
    leader = cluster.leader("guarded", 0)
    prefixed_args = ("--allow-principal", "User:alice", "--operation", "Write", "--topic", "guar",
                     "--resource-pattern-type", "prefixed")
    _acls(cluster, "add", *prefixed_args)
    until(lambda: _alice_may_write(cluster, leader), "the prefixed ACL at the leader", 20)
    for broker_id in cluster.ids:
        until(lambda: "ACLs of Prefixed:Topic:guar re-read after a change notification"
              in cluster.broker(broker_id).stderr_since_start(), f"broker {broker_id} notified of the prefixed ACL")
    _acls(cluster, "remove", *prefixed_args)
    until(lambda: not _alice_may_write(cluster, leader), "the prefixed ACL's removal at the leader")
    prefixed = confluent.AclBinding(confluent.ResourceType.TOPIC, "gua", confluent.ResourcePatternType.PREFIXED,
                                    "User:alice", "*", confluent.AclOperation.WRITE, confluent.AclPermissionType.ALLOW)
    asked = next(b for b in cluster.ids if b != leader)
    admin = confluent.AdminClient({"bootstrap.servers": cluster.broker(asked).bootstrap})
    admin.create_acls([prefixed])[prefixed].result(timeout=30)
    until(lambda: _alice_may_write(cluster, leader), "the API's prefixed ACL at the leader", 20)
    # A follower restarted: its Metadata answer (Describe, implied by Write) comes from what
    # it read at start-up.
    other = next(b for b in cluster.ids if b not in (asked, leader))
    cluster.restart(other)
    assert _alice_may_write(cluster, other)
