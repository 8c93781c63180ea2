"""ACLs with Kafka's semantics, seen by kafka-python and confluent-kafka over SASL_PLAINTEXT:
WRITE on the topic to produce, READ on the group to commit, CREATE on the cluster to create
topics, super users unrestricted, Metadata hiding what a principal may not describe, and
``minikafka acls`` changes taking effect on the running broker."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import (ClusterAuthorizationFailedError, GroupAuthorizationFailedError,
                          TopicAuthorizationFailedError)
from kafka.structs import OffsetAndMetadata

from minikafka.broker.security.acl import Acl, AclStore
from minikafka.testing import MinikafkaBroker

pytestmark = pytest.mark.timeout(120)

USERS = {"admin": "admin-pw-1", "alice": "alice-pw-2", "bob": "bob-pw-3"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("acls")
    running = MinikafkaBroker(work, {"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
                                     "super.users": "User:admin", "auto.create.topics.enable": "false"},
                              security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", users=USERS)
    store = AclStore(running.log_dir)
    store.add("Topic:open", [Acl.make("User:alice", "Write"), Acl.make("User:alice", "Read")])
    store.add("Group:described-only", [Acl.make("User:alice", "Describe")])
    store.add("Group:alices", [Acl.make("User:alice", "Read")])
    with running:
        admin = KafkaAdminClient(**running.client_config(user="admin"))
        admin.create_topics([NewTopic("open", 1, 1), NewTopic("secret", 1, 1)])
        admin.close()
        yield running


def test_super_user_does_everything(broker):
    producer = KafkaProducer(**broker.client_config(user="admin"))
    producer.send("secret", b"classified").get(timeout=15)
    producer.close()
    consumer = KafkaConsumer("secret", **broker.client_config(user="admin"), auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    assert [m.value for m in consumer] == [b"classified"]
    consumer.close()


def test_write_is_needed_to_produce(broker):
    producer = KafkaProducer(**broker.client_config(user="alice"), max_block_ms=5000)
    producer.send("open", b"fine").get(timeout=15)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("secret", b"nope").get(timeout=15)
    producer.close()


def test_read_on_the_group_is_needed_to_commit(broker):
    consumer = KafkaConsumer(**broker.client_config(user="alice"), group_id="described-only",
                             enable_auto_commit=False)
    partition = TopicPartition("open", 0)
    consumer.assign([partition])
    with pytest.raises(GroupAuthorizationFailedError):
        consumer.commit({partition: OffsetAndMetadata(0, "", -1)})
    consumer.close()
    allowed = KafkaConsumer(**broker.client_config(user="alice"), group_id="alices", enable_auto_commit=False)
    allowed.assign([partition])
    allowed.commit({partition: OffsetAndMetadata(0, "", -1)})
    assert allowed.committed(partition) == 0
    allowed.close()


def test_create_on_the_cluster_is_needed_to_create_topics(broker):
    admin = KafkaAdminClient(**broker.client_config(user="bob"))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.create_topics([NewTopic("bobs", 1, 1)])
    finally:
        admin.close()


def test_metadata_hides_topics_the_principal_may_not_describe(broker):
    import confluent_kafka.admin

    def visible(user: str) -> set[str]:
        client = confluent_kafka.admin.AdminClient(broker.client_config("confluent-kafka", user=user))
        return {name for name in client.list_topics(timeout=15).topics if not name.startswith("__")}

    assert visible("alice") == {"open"}  # WRITE/READ imply DESCRIBE
    assert visible("bob") == set()
    assert visible("admin") == {"open", "secret"}


def test_acls_cli_changes_take_effect_on_the_running_broker(broker):
    def minikafka(*args):
        return subprocess.run([sys.executable, "-m", "minikafka.broker", *args, "--log-dir", str(broker.log_dir)],
                              capture_output=True, text=True, timeout=60)

    assert minikafka("acls", "add", "--topic", "secret", "--allow-principal", "User:bob",
                     "--operation", "Describe").returncode == 0
    listed = minikafka("acls", "list", "--topic", "secret").stdout
    assert "User:bob has Allow permission for operations: Describe from hosts: *" in listed
    import confluent_kafka.admin

    client = confluent_kafka.admin.AdminClient(broker.client_config("confluent-kafka", user="bob"))
    assert "secret" in client.list_topics(timeout=15).topics
    # A DENY wins over any ALLOW. (Not idempotent: with Write denied on her one topic, alice may
    # write nowhere, so an idempotent producer gets no producer id at all, as from Kafka 2.8.)
    assert minikafka("acls", "add", "--topic", "open", "--deny-principal", "User:alice",
                     "--operation", "Write").returncode == 0
    producer = KafkaProducer(**broker.client_config(user="alice"), max_block_ms=5000, enable_idempotence=False)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("open", b"denied now").get(timeout=15)
    producer.close()
    assert minikafka("acls", "remove", "--topic", "open", "--deny-principal", "User:alice",
                     "--operation", "Write").returncode == 0


def test_broker_to_broker_requests_need_cluster_action(broker):
    """The controller's requests and a follower's fetch come from brokers: a client principal
    without CLUSTER_ACTION gets CLUSTER_AUTHORIZATION_FAILED, never a changed replica state."""
    import socket

    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode
    from minikafka.protocol.framing import ClientConnection

    client = ClientConnection("alice")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        def call(api_key, version, body):
            sock.sendall(client.send_request(api_key, version, body)[1])
            while (response := client.next_response()) is None:
                data = sock.recv(65536)
                assert data, "the broker closed the connection"
                client.receive_data(data)
            return response.body

        assert call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
        # PLAIN's bare token frame, then the empty success frame.
        sock.sendall(len(b"\0alice\0alice-pw-2").to_bytes(4, "big") + b"\0alice\0alice-pw-2")
        assert sock.recv(4) == b"\0\0\0\0"
        assert call(ApiKey.UPDATE_METADATA, 0, {"controller_id": 1, "controller_epoch": 99,
                                                "ungrouped_partition_states": [], "live_brokers": []}
                    ).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert call(ApiKey.CONTROLLED_SHUTDOWN, 1, {"broker_id": 0}).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        fetch = call(ApiKey.FETCH, 3, {"replica_id": 1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1000,
                                       "topics": [{"topic": "open", "partitions": [
                                           {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}]})
        assert fetch.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _as(broker, user: str, api_key, version: int, body: dict):
    """One raw request authenticated as ``user``: what no client library sends."""
    from minikafka.testing import kafka_request

    return kafka_request(broker.bootstrap, api_key, version, body, plain_login=(user, USERS[user]))


@pytest.fixture
def fresh_broker(minikafka_broker_factory):
    """A broker of its own, topics auto-created (the default), no group ever used."""
    return minikafka_broker_factory(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", users=USERS, **{
        "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer", "super.users": "User:admin"})


def test_describe_on_the_group_is_needed_to_describe_it(fresh_broker):
    """Kafka's handleDescribeGroupRequest: GROUP_AUTHORIZATION_FAILED per group without
    Describe, before the coordinator is asked (which would create __consumer_offsets)."""
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    AclStore(fresh_broker.log_dir).add("Group:watched", [Acl.make("User:alice", "Describe")])
    refused = _as(fresh_broker, "bob", ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["watched"]}).groups
    assert [(g.group_id, g.error_code, g.members) for g in refused] == \
        [("watched", ErrorCode.GROUP_AUTHORIZATION_FAILED, [])]
    assert not (fresh_broker.log_dir / "__consumer_offsets-0").exists()

    member = KafkaConsumer("watched-topic", **fresh_broker.client_config(user="admin"), group_id="watched",
                           client_id="the-member", consumer_timeout_ms=3000)
    try:
        list(member)  # joins the group
        refused = _as(fresh_broker, "bob", ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["watched"]}).groups[0]
        assert (refused.error_code, refused.group_state, refused.members) == \
            (ErrorCode.GROUP_AUTHORIZATION_FAILED, "", [])
        allowed = _as(fresh_broker, "alice", ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["watched", "unwatched"]}).groups
        assert [(g.error_code, [m.client_id for m in g.members]) for g in allowed] == \
            [(ErrorCode.NONE, ["the-member"]), (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])]
    finally:
        member.close()


def test_produce_never_creates_a_topic(fresh_broker):
    """Kafka's Produce answers UNKNOWN_TOPIC_OR_PARTITION for a topic it does not have:
    creating topics is Metadata's (with Create on the cluster) or CreateTopics'. Write on a
    topic that does not exist yet creates nothing."""
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode
    from minikafka.protocol.records import build_message_set

    AclStore(fresh_broker.log_dir).add("Topic:alices-new", [Acl.make("User:alice", "Write")])
    produced = _as(fresh_broker, "alice", ApiKey.PRODUCE, 2, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": "alices-new", "partition_data": [{"index": 0, "records": build_message_set([(None, b"x", 1)])}]}]})
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not (fresh_broker.log_dir / "alices-new-0").exists()
    # A client asks Metadata first, which refuses her the creation.
    producer = KafkaProducer(**fresh_broker.client_config(user="alice"), max_block_ms=5000)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("alices-new", b"x").get(timeout=15)
    producer.close()
    assert not (fresh_broker.log_dir / "alices-new-0").exists()


def test_offset_fetch_leaves_out_topics_the_principal_may_not_describe(broker):
    """Kafka 0.10.2's handleOffsetFetchRequest: a named partition of a topic without Describe
    answers UNKNOWN_TOPIC_OR_PARTITION and offset -1; v2's every-partition form omits it."""
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    committer = KafkaConsumer(**broker.client_config(user="admin"), group_id="alices", enable_auto_commit=False)
    committer.commit({TopicPartition("open", 0): OffsetAndMetadata(1, "", -1),
                      TopicPartition("secret", 0): OffsetAndMetadata(7, "secret meta", -1)})
    committer.close()

    for version in (0, 1, 2):
        answer = _as(broker, "alice", ApiKey.OFFSET_FETCH, version, {"group_id": "alices", "topics": [
            {"name": "open", "partition_indexes": [0]}, {"name": "secret", "partition_indexes": [0]}]})
        assert {(t.name, p.committed_offset, p.metadata, p.error_code) for t in answer.topics for p in t.partitions} \
            == {("open", 1, "", ErrorCode.NONE), ("secret", -1, "", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}, version
    admin = KafkaAdminClient(**broker.client_config(user="alice"))
    try:
        assert admin.list_group_offsets({"alices": None}) == \
            {"alices": {TopicPartition("open", 0): OffsetAndMetadata(1, "", -1)}}
    finally:
        admin.close()
