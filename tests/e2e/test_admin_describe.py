"""DescribeCluster and DescribeTopicPartitions (KIP-966) from the clients' admin interfaces
against a single broker: the cluster as Metadata shows it, and topics paged by a cursor."""

from __future__ import annotations

import base64
import uuid

import pytest
from confluent_kafka.admin import AdminClient
from kafka.admin import NewTopic

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.storage import read_topic_id
from minikafka.testing import kafka_request

pytestmark = pytest.mark.timeout(120)


def test_the_cluster_as_each_client_describes_it(broker, admin):
    described = admin.describe_cluster()
    host, port = broker.bootstrap.rsplit(":", 1)
    assert described["cluster_id"] and described["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in described["brokers"]] == [(0, host, int(port))]
    # kafka-python names the cluster's authorized operations so; every one, without an authorizer.
    assert {"DESCRIBE", "ALTER", "CREATE"} <= set(described["authorized_operations"])
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    confluent = client.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert (confluent.cluster_id, confluent.controller.id) == (described["cluster_id"], 0)
    assert [node.id for node in confluent.nodes] == [0] and confluent.authorized_operations
    answer = kafka_request(broker.bootstrap, ApiKey.DESCRIBE_CLUSTER, 1,
                           {"include_cluster_authorized_operations": False, "endpoint_type": 2})
    assert answer.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE and not answer.brokers


def test_topic_partitions_come_in_pages(broker, admin, new_topic):
    first, second = sorted([new_topic("paged-a"), new_topic("paged-b")])
    admin.create_topics([NewTopic(first, 3, 1), NewTopic(second, 2, 1)])
    page = admin.describe_topic_partitions([second, first, "zz-no-such-topic"], response_partition_limit=2)
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]] == [(first, [0, 1])]
    assert page["topics"][0]["topic_id"] == uuid.UUID(bytes=base64.urlsafe_b64decode(
        read_topic_id(broker.log_dir / f"{first}-0") + "=="))
    assert page["next_cursor"] == {"topic_name": first, "partition_index": 2}
    page = admin.describe_topic_partitions([second, first, "zz-no-such-topic"], response_partition_limit=2,
                                           cursor=page["next_cursor"])
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]] == [
        (first, [2]), (second, [0])]
    assert page["next_cursor"] == {"topic_name": second, "partition_index": 1}
    page = admin.describe_topic_partitions([second, first, "zz-no-such-topic"], cursor=page["next_cursor"])
    assert [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]] == [
        (second, 0, [1]), ("zz-no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])]
    assert page["next_cursor"] is None
    assert all(p["leader_id"] == 0 and p["isr_nodes"] == [0] for p in page["topics"][0]["partitions"])

    # Every topic when none is named; a cursor topic not asked for is an invalid request.
    everything = admin.describe_topic_partitions([])
    assert {first, second} <= {t["name"] for t in everything["topics"]}
    answer = kafka_request(broker.bootstrap, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": first}], "cursor": {"topic_name": second, "partition_index": 0}})
    assert [t.error_code for t in answer.topics] == [ErrorCode.INVALID_REQUEST]
