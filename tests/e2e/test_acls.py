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
    # kafka-acls' --resource-pattern-type prefixed: every topic beginning with "secr".
    prefixed = ("--topic", "secr", "--resource-pattern-type", "prefixed", "--allow-principal", "User:bob",
                "--operation", "Write")
    assert minikafka("acls", "add", *prefixed).returncode == 0
    assert "`Prefixed:Topic:secr`" in minikafka("acls", "list", "--topic", "secr", "--resource-pattern-type",
                                                "prefixed").stdout
    assert _may_write(broker, "bob", "secret")
    assert minikafka("acls", "remove", *prefixed).returncode == 0
    assert not _may_write(broker, "bob", "secret")


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


def test_config_apis_need_describe_configs_and_alter_configs(broker):
    """Kafka's resources and operations for the config APIs: DESCRIBE_CONFIGS / ALTER_CONFIGS
    on the topic, on the cluster for the broker's own settings; ALTER_CONFIGS implies
    DESCRIBE_CONFIGS. A refused resource changes nothing, its neighbours are served."""
    import confluent_kafka.admin
    from confluent_kafka import KafkaException

    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    admin = KafkaAdminClient(**broker.client_config(user="admin"))
    admin.create_topics([NewTopic("configurable", 1, 1)])
    admin.close()
    AclStore(broker.log_dir).add("Topic:configurable", [Acl.make("User:alice", "AlterConfigs")])
    described = _as(broker, "alice", ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [
        {"resource_type": 2, "resource_name": "configurable", "configuration_keys": ["retention.ms"]},
        {"resource_type": 2, "resource_name": "open", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "0", "configuration_keys": None}]}).results
    assert [(r.error_code, len(r.configs)) for r in described] == [
        (ErrorCode.NONE, 1), (ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0), (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, 0)]
    altered = _as(broker, "alice", ApiKey.ALTER_CONFIGS, 0, {"validate_only": False, "resources": [
        {"resource_type": 2, "resource_name": "configurable", "configs": [{"name": "retention.ms", "value": "60000"}]},
        {"resource_type": 2, "resource_name": "open", "configs": [{"name": "retention.ms", "value": "60000"}]},
        {"resource_type": 4, "resource_name": "0", "configs": []}]}).responses
    assert [r.error_code for r in altered] == [
        ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert (broker.log_dir / "configurable-0" / "topic-config.properties").read_text() == "retention.ms=60000\n"
    assert not (broker.log_dir / "open-0" / "topic-config.properties").exists()  # no overrides

    client = confluent_kafka.admin.AdminClient(broker.client_config("confluent-kafka", user="bob"))
    resource = confluent_kafka.admin.ConfigResource(confluent_kafka.admin.ConfigResource.Type.TOPIC, "configurable")
    with pytest.raises(KafkaException) as caught:
        client.describe_configs([resource])[resource].result(timeout=15)
    assert caught.value.args[0].name() == "TOPIC_AUTHORIZATION_FAILED"


def test_alter_on_the_topic_is_needed_to_add_partitions(broker):
    from confluent_kafka.admin import AdminClient, NewPartitions

    client = AdminClient(broker.client_config("confluent-kafka", user="alice"))
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        client.create_partitions([NewPartitions("open", 2)])["open"].result(timeout=15)
    assert not (broker.log_dir / "open-1").exists()
    AclStore(broker.log_dir).add("Topic:open", [Acl.make("User:alice", "Alter")])
    client.create_partitions([NewPartitions("open", 2)])["open"].result(timeout=15)
    assert (broker.log_dir / "open-1").exists()


def test_delete_on_the_topic_is_needed_to_delete_records(broker):
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    body = {"timeout_ms": 1000, "topics": [{"name": "open", "partitions": [{"partition_index": 0, "offset": 0}]}]}
    (answer,) = _as(broker, "alice", ApiKey.DELETE_RECORDS, 1, body).topics[0].partitions
    assert (answer.error_code, answer.low_watermark) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)
    (answer,) = _as(broker, "admin", ApiKey.DELETE_RECORDS, 1, body).topics[0].partitions
    assert (answer.error_code, answer.low_watermark) == (ErrorCode.NONE, 0)


def test_acl_apis_manage_what_the_authorizer_enforces(broker):
    """CreateAcls / DescribeAcls from kafka-python, DeleteAcls from confluent-kafka, as the
    super user: the ACLs land in the same store the authorizer reads (a producer is let in,
    then out again)."""
    import confluent_kafka.admin as confluent
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePattern, ResourcePatternFilter, ResourceType)
    from kafka.errors import NoError

    def bob_may_write() -> bool:
        producer = KafkaProducer(**broker.client_config(user="bob"), max_block_ms=5000, retries=0)
        try:
            producer.send("open", b"from bob").get(timeout=15)
            return True
        except TopicAuthorizationFailedError:
            return False
        finally:
            producer.close()

    assert not bob_may_write()
    admin = KafkaAdminClient(**broker.client_config(user="admin"))
    bobs = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
               ResourcePattern(ResourceType.TOPIC, "open"))
    created = admin.create_acls([bobs])
    assert created["succeeded"] == [bobs] and not created["failed"]
    assert Acl.make("User:bob", "Write") in AclStore(broker.log_dir).load()["Topic:open"]
    assert bob_may_write()
    found, error = admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                 ResourcePatternFilter(ResourceType.TOPIC, "open",
                                                                       ACLResourcePatternType.MATCH)))
    assert error is NoError
    assert {(a.principal, a.operation) for a in found} >= {("User:bob", ACLOperation.WRITE),
                                                           ("User:alice", ACLOperation.READ)}
    admin.close()

    client = confluent.AdminClient(broker.client_config("confluent-kafka", user="admin"))
    bobs_filter = confluent.AclBindingFilter(confluent.ResourceType.TOPIC, "open", confluent.ResourcePatternType.LITERAL,
                                             "User:bob", None, confluent.AclOperation.ANY,
                                             confluent.AclPermissionType.ANY)
    deleted = client.delete_acls([bobs_filter])[bobs_filter].result(timeout=15)
    assert [(b.principal, b.operation) for b in deleted] == [("User:bob", confluent.AclOperation.WRITE)]
    assert not bob_may_write()
    assert "User:bob" not in str(AclStore(broker.log_dir).load().get("Topic:open"))

    # Without ALTER (DESCRIBE) on the cluster.
    prefixed = confluent.AclBinding(confluent.ResourceType.TOPIC, "op", confluent.ResourcePatternType.PREFIXED,
                                    "User:bob", "*", confluent.AclOperation.READ, confluent.AclPermissionType.ALLOW)
    alices = confluent.AdminClient(broker.client_config("confluent-kafka", user="alice"))
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED"):
        alices.create_acls([prefixed])[prefixed].result(timeout=15)
    # (librdkafka's describe_acls reports DescribeAcls' top-level error as an empty list.)
    alices_admin = KafkaAdminClient(**broker.client_config(user="alice"))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            alices_admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                 ResourcePatternFilter(ResourceType.ANY, None,
                                                                       ACLResourcePatternType.ANY)))
    finally:
        alices_admin.close()


def _may_write(broker, user: str, topic: str) -> bool:
    producer = KafkaProducer(**broker.client_config(user=user), max_block_ms=5000, retries=0)
    try:
        producer.send(topic, b"from " + user.encode()).get(timeout=15)
        return True
    except TopicAuthorizationFailedError:
        return False
    finally:
        producer.close()


def test_prefixed_acls_cover_every_topic_their_prefix_begins(broker):
    """KIP-290 from both clients' admin APIs: a PREFIXED ALLOW lets bob write to every topic
    beginning with it and to no other, a DENY on a longer prefix wins over it; DescribeAcls and
    DeleteAcls select with LITERAL, PREFIXED, ANY (that exact name) and MATCH (every pattern
    that applies to the name)."""
    import confluent_kafka.admin as confluent
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePattern, ResourcePatternFilter, ResourceType)

    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    admin = KafkaAdminClient(**broker.client_config(user="admin"))
    admin.create_topics([NewTopic("pfx-x", 1, 1), NewTopic("pfx-y", 1, 1), NewTopic("other", 1, 1)])
    assert not _may_write(broker, "bob", "pfx-x")
    client = confluent.AdminClient(broker.client_config("confluent-kafka", user="admin"))
    allow = confluent.AclBinding(confluent.ResourceType.TOPIC, "pfx-", confluent.ResourcePatternType.PREFIXED,
                                 "User:bob", "*", confluent.AclOperation.WRITE, confluent.AclPermissionType.ALLOW)
    client.create_acls([allow])[allow].result(timeout=15)
    assert _may_write(broker, "bob", "pfx-x") and _may_write(broker, "bob", "pfx-y")
    assert not _may_write(broker, "bob", "other")
    deny = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
               ResourcePattern(ResourceType.TOPIC, "pfx-x", ACLResourcePatternType.PREFIXED))
    assert admin.create_acls([deny])["succeeded"] == [deny]
    assert not _may_write(broker, "bob", "pfx-x") and _may_write(broker, "bob", "pfx-y")

    def described(name: str, pattern_type) -> set:
        found, _ = admin.describe_acls(ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                 ResourcePatternFilter(ResourceType.TOPIC, name, pattern_type)))
        return {(a.resource_pattern.resource_name, a.resource_pattern.pattern_type, a.permission_type)
                for a in found}

    both = {("pfx-", ACLResourcePatternType.PREFIXED, ACLPermissionType.ALLOW),
            ("pfx-x", ACLResourcePatternType.PREFIXED, ACLPermissionType.DENY)}
    assert described("pfx-xyz", ACLResourcePatternType.MATCH) == both
    assert described("pfx-y", ACLResourcePatternType.MATCH) == {("pfx-", ACLResourcePatternType.PREFIXED,
                                                                 ACLPermissionType.ALLOW)}
    assert described("pfx-", ACLResourcePatternType.PREFIXED) == {("pfx-", ACLResourcePatternType.PREFIXED,
                                                                   ACLPermissionType.ALLOW)}
    assert described("pfx-x", ACLResourcePatternType.ANY) == {("pfx-x", ACLResourcePatternType.PREFIXED,
                                                                ACLPermissionType.DENY)}
    assert described("pfx-", ACLResourcePatternType.LITERAL) == set()
    assert described(None, ACLResourcePatternType.PREFIXED) == both

    # A filter's pattern type (ANY 1, MATCH 2) in a creation: clients refuse to send one.
    created = _as(broker, "admin", ApiKey.CREATE_ACLS, 1, {"creations": [{
        "resource_type": 2, "resource_name": "pfx-", "resource_pattern_type": pattern_type, "principal": "User:bob",
        "host": "*", "operation": 3, "permission_type": 3} for pattern_type in (1, 2)]})
    assert [r.error_code for r in created.results] == [ErrorCode.INVALID_REQUEST] * 2
    assert {found for found in described(None, ACLResourcePatternType.ANY) if found[0].startswith("pfx")} == both

    literal_only = confluent.AclBindingFilter(confluent.ResourceType.TOPIC, "pfx-", confluent.ResourcePatternType.LITERAL,
                                              "User:bob", None, confluent.AclOperation.ANY,
                                              confluent.AclPermissionType.ANY)
    assert client.delete_acls([literal_only])[literal_only].result(timeout=15) == []
    matching = confluent.AclBindingFilter(confluent.ResourceType.TOPIC, "pfx-xyz", confluent.ResourcePatternType.MATCH,
                                          "User:bob", None, confluent.AclOperation.ANY, confluent.AclPermissionType.ANY)
    deleted = client.delete_acls([matching])[matching].result(timeout=15)
    assert {(b.name, b.resource_pattern_type) for b in deleted} == {("pfx-", confluent.ResourcePatternType.PREFIXED),
                                                                   ("pfx-x", confluent.ResourcePatternType.PREFIXED)}
    assert not _may_write(broker, "bob", "pfx-y")
    admin.close()


def test_acl_apis_without_an_authorizer_answer_security_disabled(minikafka_broker_factory):
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode
    from minikafka.testing import kafka_request

    plain = minikafka_broker_factory()
    described = kafka_request(plain.bootstrap, ApiKey.DESCRIBE_ACLS, 1, {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    assert described.error_code == ErrorCode.SECURITY_DISABLED
    created = kafka_request(plain.bootstrap, ApiKey.CREATE_ACLS, 1, {"creations": [{
        "resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:bob",
        "host": "*", "operation": 3, "permission_type": 3}]})
    assert [r.error_code for r in created.results] == [ErrorCode.SECURITY_DISABLED]
    assert not (plain.log_dir / "acls.json").exists()


def test_delete_on_the_group_is_needed_to_delete_it_or_its_offsets(broker):
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    deleted = _as(broker, "alice", ApiKey.DELETE_GROUPS, 1, {"groups_names": ["alices"]}).results
    assert [(r.group_id, r.error_code) for r in deleted] == [("alices", ErrorCode.GROUP_AUTHORIZATION_FAILED)]
    offsets = _as(broker, "alice", ApiKey.OFFSET_DELETE, 0, {"group_id": "alices", "topics": [
        {"name": "open", "partitions": [{"partition_index": 0}]}]})
    assert offsets.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_describe_on_the_cluster_is_needed_to_describe_log_dirs(broker):
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    refused = _as(broker, "alice", ApiKey.DESCRIBE_LOG_DIRS, 3, {"topics": None})
    assert (refused.error_code, refused.results) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    allowed = _as(broker, "admin", ApiKey.DESCRIBE_LOG_DIRS, 3, {"topics": None})
    assert allowed.error_code == ErrorCode.NONE and len(allowed.results) == 1


def test_alter_on_the_cluster_is_needed_to_alter_replica_log_dirs(broker):
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    body = {"dirs": [{"path": str(broker.log_dir), "topics": [{"name": "open", "partitions": [0, 7]}]}]}
    refused = _as(broker, "alice", ApiKey.ALTER_REPLICA_LOG_DIRS, 1, body)
    assert [(r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions]) for r in refused.results] == [
        ("open", [(0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED), (7, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)])]
    allowed = _as(broker, "admin", ApiKey.ALTER_REPLICA_LOG_DIRS, 1, body)
    assert [(p.partition_index, p.error_code) for p in allowed.results[0].partitions] == [
        (0, ErrorCode.NONE), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


def test_alter_on_the_cluster_is_needed_to_elect_leaders(broker):
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    body = {"election_type": 0, "timeout_ms": 1000, "topic_partitions": [{"topic": "open", "partitions": [0]}]}
    refused = _as(broker, "alice", ApiKey.ELECT_LEADERS, 1, body)
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [p.error_code for p in refused.replica_election_results[0].partition_result] == [
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    allowed = _as(broker, "admin", ApiKey.ELECT_LEADERS, 1, body)
    assert [p.error_code for p in allowed.replica_election_results[0].partition_result] == [
        ErrorCode.ELECTION_NOT_NEEDED]



def test_the_cluster_is_needed_to_alter_or_list_reassignments(broker):
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    body = {"timeout_ms": 1000, "topics": [{"name": "open", "partitions": [{"partition_index": 0, "replicas": [0]}]}]}
    refused = _as(broker, "alice", ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [p.error_code for p in refused.responses[0].partitions] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    allowed = _as(broker, "admin", ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
    assert allowed.error_code == ErrorCode.NONE
    assert [p.error_code for p in allowed.responses[0].partitions] == [ErrorCode.NONE]
    listed = _as(broker, "alice", ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None})
    assert (listed.error_code, list(listed.topics)) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    listed = _as(broker, "admin", ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None})
    assert (listed.error_code, list(listed.topics)) == (ErrorCode.NONE, [])

def test_the_cluster_is_needed_to_describe_or_alter_scram_users(broker):
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    described = _as(broker, "alice", ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    altered = _as(broker, "alice", ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [
        {"name": "mallory", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}]})
    assert [(r.user, r.error_code) for r in altered.results] == [("mallory", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
    assert not (broker.log_dir / "scram-credentials.json").exists()


def test_offset_for_leader_epoch_needs_describe_on_the_topic_without_cluster_action(broker):
    """Kafka 2.1+ (KIP-320): consumers ask OffsetForLeaderEpoch too, so without ClusterAction
    Describe on the topic suffices (TOPIC_AUTHORIZATION_FAILED otherwise), at every version."""
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    for version in (0, 2, 3):
        answer = _as(broker, "alice", ApiKey.OFFSET_FOR_LEADER_EPOCH, version, {"topics": [
            {"topic": "open", "partitions": [{"partition": 0, "leader_epoch": 0}]},
            {"topic": "secret", "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
        assert {t.topic: t.partitions[0].error_code for t in answer.topics} == \
            {"open": ErrorCode.NONE, "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED}, version


def test_txn_offset_commit_needs_write_on_the_transactional_id_and_read_on_group_and_topic(fresh_broker):
    """Kafka 2.8's handleTxnOffsetCommitRequest: TRANSACTIONAL_ID_AUTHORIZATION_FAILED, then
    GROUP_AUTHORIZATION_FAILED, on every partition; then TOPIC_AUTHORIZATION_FAILED per topic."""
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ErrorCode

    admin = KafkaAdminClient(**fresh_broker.client_config(user="admin"))
    admin.create_topics([NewTopic("open", 1, 1), NewTopic("secret", 1, 1)])
    admin.close()
    store = AclStore(fresh_broker.log_dir)
    store.add("TransactionalId:alices-tx", [Acl.make("User:alice", "Write")])
    store.add("Group:alices", [Acl.make("User:alice", "Read")])
    store.add("Topic:open", [Acl.make("User:alice", "Read")])

    def commit(transactional_id: str, group: str) -> list[tuple[str, int]]:
        body = {"transactional_id": transactional_id, "group_id": group, "producer_id": 5, "producer_epoch": 0,
                "topics": [{"name": name, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                          "committed_metadata": ""}]}
                           for name in ("open", "secret")]}
        answer = _as(fresh_broker, "alice", ApiKey.TXN_OFFSET_COMMIT, 0, body)
        return [(t.name, p.error_code) for t in answer.topics for p in t.partitions]

    assert commit("bobs-tx", "alices") == [("open", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                                          ("secret", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    assert commit("alices-tx", "bobs") == [("open", ErrorCode.GROUP_AUTHORIZATION_FAILED),
                                          ("secret", ErrorCode.GROUP_AUTHORIZATION_FAILED)]
    assert commit("alices-tx", "alices") == [("open", ErrorCode.NONE), ("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
