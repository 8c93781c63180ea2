"""The admin APIs on a three-broker cluster, from the clients' admin interfaces: topic configs
altered through any broker reach every replica through ``/config/topics`` and Kafka 0.10.2's
``/config/changes`` notifications (a broker away meanwhile takes them at its start); added
partitions get replicas and leaders from the controller.

One cluster serves the module: each test works on topics of its own."""

from __future__ import annotations

import base64
import json
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, OffsetSpec
from confluent_kafka import Consumer, KafkaException, TopicPartition
from kafka import KafkaProducer
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.errors import NotEnoughReplicasError

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.storage import read_topic_id
from minikafka.testing import MinikafkaCluster, kafka_request
from minikafka.testing.broker import close_all

pytestmark = [pytest.mark.zookeeper, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, minikafka_zookeeper):
    started = MinikafkaCluster(tmp_path_factory.mktemp("admin-cluster"), 3,
                               zookeeper=minikafka_zookeeper.connect_string)
    try:
        yield started.start()
    finally:
        close_all([started])


def _stored_overrides(cluster, topic: str) -> dict[int, dict[str, str]]:
    """Each broker's ``topic-config.properties`` of its replica of partition 0."""
    found = {}
    for broker_id in cluster.ids:
        path = cluster.broker(broker_id).log_dir / f"{topic}-0" / "topic-config.properties"
        text = path.read_text() if path.exists() else ""
        found[broker_id] = dict(line.split("=", 1) for line in text.splitlines() if line)
    return found


def _until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout} s")
        time.sleep(0.1)


def _described(broker, topic: str, name: str) -> str:
    answer = kafka_request(broker.bootstrap, ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [
        {"resource_type": 2, "resource_name": topic, "configuration_keys": [name]}]})
    (result,) = answer.results
    assert result.error_code == ErrorCode.NONE
    return result.configs[0].value


def test_altered_topic_configs_reach_every_replica(cluster):
    cluster.create_topic("configured", 1, 3, retention_ms="3600000")
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "configured", incremental_configs=[
        ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET)])
    confluent.incremental_alter_configs([resource])[resource].result(timeout=30)
    wanted = {"retention.ms": "3600000", "segment.ms": "600000"}
    _until(lambda: all(found == wanted for found in _stored_overrides(cluster, "configured").values()),
           "applied by every replica")
    assert {_described(cluster.broker(b), "configured", "segment.ms") for b in cluster.ids} == {"600000"}

    # A broker away while the config changes takes it from ZooKeeper when it starts again.
    away = cluster.ids[-1]
    cluster.stop(away)
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker(cluster.ids[0]).bootstrap)
    admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, "configured", {"segment.ms": "900000"})])
    admin.close()
    cluster.restart(away)
    wanted = {"retention.ms": "3600000", "segment.ms": "900000"}
    _until(lambda: all(found == wanted for found in _stored_overrides(cluster, "configured").values()),
           "applied by every replica, the restarted one too")


def test_refused_alterations_change_nothing_in_the_cluster(cluster):
    cluster.create_topic("kept", 1, 3, retention_ms="3600000")
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "kept", incremental_configs=[
        ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="INVALID_REQUEST|Invalid config value"):
        confluent.incremental_alter_configs([resource])[resource].result(timeout=30)
    missing = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic", incremental_configs=[
        ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PART"):
        confluent.incremental_alter_configs([missing])[missing].result(timeout=30)
    assert all(found == {"retention.ms": "3600000"} for found in _stored_overrides(cluster, "kept").values())


def test_added_partitions_get_leaders_and_replicas(cluster):
    cluster.create_topic("growing", 1, 2)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    admin.create_partitions({"growing": 3})
    # Kafka answers once the controller knows the leaders; describe_topics asks any broker.
    cluster.wait_for_leaders("growing", 3)
    (described,) = admin.describe_topics(["growing"])
    admin.close()
    partitions = sorted(described["partitions"], key=lambda p: p["partition_index"])
    assert [len(p["replica_nodes"]) for p in partitions] == [2, 2, 2]
    assert all(p["leader_id"] in p["replica_nodes"] for p in partitions)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    assert producer.send("growing", b"to a new partition", partition=2).get(timeout=30).offset == 0
    producer.close()

    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    placed = cluster.ids[1:]
    confluent.create_partitions([NewPartitions("growing", 4, [placed])])["growing"].result(timeout=30)
    cluster.wait_until(lambda m: _replicas(m, "growing", 3) == placed, "partition 3 placed as asked")
    for new, code in ((NewPartitions("growing", 2), "INVALID_PARTITIONS"),
                      (NewPartitions("growing", 5, [[cluster.ids[0]]]), "INVALID_REPLICA_ASSIGNMENT"),
                      (NewPartitions("growing", 5, [[cluster.ids[0], 99]]), "INVALID_REPLICA_ASSIGNMENT")):
        with pytest.raises(Exception, match=code):
            confluent.create_partitions([new])["growing"].result(timeout=30)
    assert len(cluster.metadata(["growing"]).topics[0].partitions) == 4


def _replicas(metadata, topic: str, partition: int) -> list[int] | None:
    for found in metadata.topics:
        if found.name == topic:
            for entry in found.partitions:
                if entry.partition_index == partition:
                    return list(entry.replica_nodes)
    return None


def test_deleted_records_move_the_leaders_log_start(cluster):
    cluster.create_topic("trimmed", 1, 3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(5):
        producer.send("trimmed", b"record %d" % i).get(timeout=30)
    producer.close()
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    (future,) = confluent.delete_records([TopicPartition("trimmed", 0, 3)]).values()
    assert future.result(timeout=30).low_watermark == 3
    leader = cluster.broker(cluster.leader("trimmed", 0))
    body = {"replica_id": -1, "topics": [{"name": "trimmed", "partitions": [
        {"partition_index": 0, "timestamp": -2, "max_num_offsets": 1}]}]}
    (answer,) = kafka_request(leader.bootstrap, ApiKey.LIST_OFFSETS, 1, body).topics[0].partitions
    assert (answer.error_code, answer.offset) == (ErrorCode.NONE, 3)


def test_the_leader_lists_the_max_timestamp_and_a_follower_refuses(cluster):
    """ListOffsets v7 (KIP-734) from confluent-kafka's admin client reaches the leader; asked
    directly, a follower answers NOT_LEADER_OR_FOLLOWER, as for any ListOffsets."""
    cluster.create_topic("timed", 1, 3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5000)
    futures = [producer.send("timed", b"record %d" % i, partition=0, timestamp_ms=timestamp)
               for i, timestamp in enumerate((1_700_000_005_000, 1_700_000_009_000, 1_700_000_001_000))]
    producer.flush(timeout=30)
    assert [f.get(timeout=0).offset for f in futures] == [0, 1, 2]
    producer.close()
    partition = TopicPartition("timed", 0)
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    found = confluent.list_offsets({partition: OffsetSpec.max_timestamp()})[partition].result(timeout=30)
    assert (found.offset, found.timestamp) == (1, 1_700_000_009_000)
    leader = cluster.leader("timed", 0)
    body = {"replica_id": -1, "topics": [{"name": "timed", "partitions": [{"partition_index": 0, "timestamp": -3}]}]}
    for broker_id in cluster.ids:
        (answer,) = kafka_request(cluster.broker(broker_id).bootstrap, ApiKey.LIST_OFFSETS, 7, body).topics[0].partitions
        expected = (ErrorCode.NONE, 1) if broker_id == leader else (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
        assert (answer.error_code, answer.offset) == expected


def test_a_deleted_group_is_gone_from_its_coordinator(cluster):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.structs import OffsetAndMetadata

    cluster.create_topic("consumed", 1, 3)
    partition = KpTopicPartition("consumed", 0)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="leaving", enable_auto_commit=False)
    consumer.commit({partition: OffsetAndMetadata(2, "", -1)})
    consumer.close()
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    confluent.delete_consumer_groups(["leaving"])["leaving"].result(timeout=30)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="leaving", enable_auto_commit=False)
    assert consumer.committed(partition) is None
    consumer.close()


def test_preferred_leader_election_moves_leadership_back(cluster):
    from confluent_kafka import ElectionType

    cluster.create_topic("elected", 1, 3)
    metadata = cluster.metadata(["elected"])
    preferred = _replicas(metadata, "elected", 0)[0]
    other = next(b for b in _replicas(metadata, "elected", 0) if b != preferred)
    cluster.move_leader("elected", 0, other)
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    (answer,) = confluent.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elected", 0)]).result(timeout=30).values()
    assert answer is None
    cluster.wait_until(lambda m: _leader(m, "elected", 0) == preferred, "the preferred replica leading again")
    # Again: nothing to do (kafka-python takes ELECTION_NOT_NEEDED as no error).
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    answer = admin.elect_leaders(0, {"elected": [0]})
    admin.close()
    assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in answer.replica_election_results] == [("elected", [(0, ErrorCode.ELECTION_NOT_NEEDED)])]


def _leader(metadata, topic: str, partition: int) -> int | None:
    for found in metadata.topics:
        if found.name == topic:
            for entry in found.partitions:
                if entry.partition_index == partition:
                    return entry.leader_id
    return None


def _ids_everywhere(cluster, topic: str, partitions: int) -> dict[str, set[str]]:
    """The topic's id as each place holds it: its znode, each broker's Metadata v12 answer,
    each replica's partition.metadata."""
    znode = json.loads(cluster._zk().get(f"/brokers/topics/{topic}")[0])

    def described():  # by each broker, once its UpdateMetadata names the topic
        return [kafka_request(cluster.broker(b).bootstrap, ApiKey.METADATA, 12, {"topics": [{"name": topic}],
                                                                                "allow_auto_topic_creation": False})
                .topics[0] for b in cluster.ids]

    _until(lambda: all(t.error_code == ErrorCode.NONE for t in described()), f"{topic} known to every broker")
    answers = {t.topic_id for t in described()}
    files = {read_topic_id(cluster.broker(b).log_dir / f"{topic}-{p}") for b in cluster.ids for p in range(partitions)}
    return {"znode": {znode.get("topic_id")}, "metadata": answers, "files": files}


def test_a_topic_has_one_id_on_every_broker_and_is_deleted_by_it(cluster):
    controller = cluster.broker(cluster.controller())
    answer = kafka_request(controller.bootstrap, ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": "ided", "num_partitions": 2, "replication_factor": 3, "assignments": [], "configs": []}],
        "timeout_ms": 30000})
    (created,) = answer.topics
    assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 2, 3)
    cluster.wait_for_full_isr(["ided"])
    assert _ids_everywhere(cluster, "ided", 2) == {"znode": {created.topic_id}, "metadata": {created.topic_id},
                                                   "files": {created.topic_id}}

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    (by_id,) = admin.describe_topics([uuid.UUID(bytes=base64.urlsafe_b64decode(created.topic_id + "=="))])
    assert by_id["name"] == "ided"
    admin.delete_topics([uuid.UUID(bytes=base64.urlsafe_b64decode(created.topic_id + "=="))])
    admin.close()
    _until(lambda: not any((cluster.broker(b).log_dir / f"ided-{p}").exists() for b in cluster.ids for p in (0, 1)),
           "deleted everywhere")


def test_a_topic_from_before_ids_gets_one_from_the_controller(cluster):
    # As Kafka 0.10.2's kafka-topics.sh --zookeeper writes a topic: a version 1 znode, no id.
    replicas = cluster.ids
    cluster._zk().create("/brokers/topics/legacy", json.dumps(
        {"version": 1, "partitions": {"0": replicas}}, separators=(",", ":")).encode())
    cluster.wait_for_full_isr(["legacy"])
    found = _ids_everywhere(cluster, "legacy", 1)
    assert len(found["znode"] | found["metadata"] | found["files"]) == 1 and None not in found["znode"]


def test_every_broker_describes_the_whole_cluster(cluster):
    controller = cluster.controller()
    for broker_id in cluster.ids:
        admin = KafkaAdminClient(bootstrap_servers=cluster.broker(broker_id).bootstrap)
        described = admin.describe_cluster()
        admin.close()
        assert described["controller_id"] == controller
        assert sorted(b["broker_id"] for b in described["brokers"]) == sorted(cluster.ids)


def _alter_broker(broker, name: str, configs: dict[str, str | None]) -> int:
    answer = kafka_request(broker.bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 4, "resource_name": name, "configs": [
            {"name": key, "config_operation": 0 if value is not None else 1, "value": value}
            for key, value in configs.items()]}], "validate_only": False})
    return answer.responses[0].error_code


def _broker_config(cluster, broker_id: int, key: str) -> tuple[str, int]:
    answer = kafka_request(cluster.broker(broker_id).bootstrap, ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [
        {"resource_type": 4, "resource_name": str(broker_id), "configuration_keys": [key]}]})
    (entry,) = answer.results[0].configs
    return entry.value, entry.config_source


def test_dynamic_broker_configs_live_in_zookeeper(cluster):
    first_id, second_id = cluster.ids[:2]
    first = cluster.broker(first_id)
    assert _alter_broker(first, "", {"log.retention.ms": "7200000"}) == ErrorCode.NONE
    assert _alter_broker(cluster.broker(second_id), str(second_id), {"log.retention.ms": "3600000"}) == ErrorCode.NONE
    assert _alter_broker(first, str(second_id), {"log.retention.ms": "1"}) == ErrorCode.INVALID_REQUEST
    assert _alter_broker(first, "", {"num.partitions": "5"}) == ErrorCode.INVALID_REQUEST
    assert json.loads(cluster._zk().get("/config/brokers/<default>")[0]) == {
        "version": 1, "config": {"log.retention.ms": "7200000"}}
    wanted = {b: ("3600000", 2) if b == second_id else ("7200000", 3) for b in cluster.ids}
    _until(lambda: {b: _broker_config(cluster, b, "log.retention.ms") for b in cluster.ids} == wanted,
           "every broker running with the dynamic configs")
    # The cleaner's settings are cluster-wide too (each broker restarts its cleaner).
    assert _alter_broker(first, "", {"log.retention.ms": "7200000", "log.cleaner.backoff.ms": "1000"}) == ErrorCode.NONE
    _until(lambda: {_broker_config(cluster, b, "log.cleaner.backoff.ms") for b in cluster.ids} == {("1000", 3)},
           "every broker's cleaner running with the cluster default")
    # A broker started again takes them from ZooKeeper.
    cluster.restart(second_id)
    _until(lambda: _broker_config(cluster, second_id, "log.retention.ms") == ("3600000", 2),
           "the restarted broker running with its own")
    assert _alter_broker(first, "", {"log.retention.ms": None}) == ErrorCode.NONE
    assert _alter_broker(cluster.broker(second_id), str(second_id), {"log.retention.ms": None}) == ErrorCode.NONE
    _until(lambda: {_broker_config(cluster, b, "log.retention.ms")[1] for b in cluster.ids} == {5},
           "the static setting back everywhere")


def test_a_cluster_default_min_insync_replicas_guards_every_leader(cluster):
    cluster.create_topic("guarded", 1, 3)
    first = cluster.broker(cluster.ids[0])
    assert _alter_broker(first, "", {"min.insync.replicas": "4"}) == ErrorCode.NONE
    _until(lambda: {_broker_config(cluster, b, "min.insync.replicas") for b in cluster.ids} == {("4", 3)},
           "every broker running with it")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=0)
    with pytest.raises(NotEnoughReplicasError):
        producer.send("guarded", b"three replicas are not four").get(timeout=30)
    assert _alter_broker(first, "", {"min.insync.replicas": None}) == ErrorCode.NONE
    _until(lambda: {_broker_config(cluster, b, "min.insync.replicas")[1] for b in cluster.ids} == {5},
           "the static setting back everywhere")
    assert producer.send("guarded", b"enough again").get(timeout=30).offset == 0
    producer.close()


def _addresses(metadata) -> dict[int, str]:
    return {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}


def test_a_brokers_advertised_listeners_reach_every_broker(cluster):
    """Kafka 2.x's DynamicListenerConfig in a cluster: broker N's own advertised.listeners,
    altered through a client's admin API, rewrites its /brokers/ids/N in place; the controller,
    watching that registration, sends every broker UpdateMetadata, so each one's Metadata names
    the new address, which clients then use. The broker keeps it across a restart."""
    renamed_id = cluster.ids[1]
    renamed = cluster.broker(renamed_id)
    address = f"localhost:{renamed.port}"  # the same socket, by another name
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def alter(value: str) -> None:
        resource = ConfigResource(ConfigResource.Type.BROKER, str(renamed_id), incremental_configs=[
            ConfigEntry("advertised.listeners", value, incremental_operation=AlterConfigOpType.SET)])
        confluent.incremental_alter_configs([resource])[resource].result(timeout=30)

    # Each name one of the listeners, once: refused, nothing written.
    for refused, reason in ((f"SSL://{address}", "SSL is not one of the listeners"),
                            (f"PLAINTEXT://{address},PLAINTEXT://{address}", "listed twice")):
        with pytest.raises(KafkaException, match=reason):
            alter(refused)
    assert _broker_config(cluster, renamed_id, "advertised.listeners")[1] != 2  # not DYNAMIC_BROKER_CONFIG
    registered = cluster._zk().exists(f"/brokers/ids/{renamed_id}")

    alter(f"PLAINTEXT://{address}")
    for broker_id in cluster.ids:
        cluster.wait_until(lambda m: _addresses(m)[renamed_id] == address, f"broker {broker_id} naming it",
                           via=cluster.broker(broker_id))
    registration, stat = cluster._zk().get(f"/brokers/ids/{renamed_id}")
    assert json.loads(registration)["endpoints"] == [f"PLAINTEXT://{address}"]
    assert (stat.czxid, stat.version) == (registered.czxid, registered.version + 1)  # the same node, rewritten
    cluster.create_topic("renamed-leader", 1, 3)
    if cluster.leader("renamed-leader", 0) != renamed_id:
        cluster.move_leader("renamed-leader", 0, renamed_id)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    assert producer.send("renamed-leader", b"through the new address").get(timeout=30).offset == 0
    producer.close()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "renamed",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["renamed-leader"])
    message = None
    deadline = time.monotonic() + 30
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(1)
    consumer.close()
    assert message is not None and message.value() == b"through the new address"

    cluster.restart(renamed_id)
    for broker_id in cluster.ids:
        cluster.wait_until(lambda m: _addresses(m).get(renamed_id) == address, f"broker {broker_id} naming it",
                           via=cluster.broker(broker_id))
    assert _alter_broker(cluster.broker(renamed_id), str(renamed_id), {"advertised.listeners": None}) == ErrorCode.NONE
    cluster.wait_until(lambda m: _addresses(m)[renamed_id] == f"127.0.0.1:{renamed.port}", "the static address back")
