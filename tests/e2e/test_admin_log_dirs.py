"""DescribeLogDirs from kafka-python's KafkaAdminClient and raw requests (v0, v4) against a
single broker: each replica in the dir holding it, with its size; the dir's disk space (v4)."""

from __future__ import annotations

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import kafka_request

pytestmark = pytest.mark.timeout(120)


def test_replicas_are_listed_in_their_dirs_with_their_sizes(broker, new_topic):
    topic = new_topic("sized")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(topic, b"x" * 1000, partition=1).get(timeout=15)
    producer.close()
    (described,) = admin.describe_log_dirs()
    admin.close()
    found = {}
    for result in described["log_dirs"]:
        assert result["error_code"] == 0
        for entry in result["topics"]:
            for partition in entry["partitions"]:
                found[(entry["name"], partition["partition_index"])] = (result["log_dir"], partition["partition_size"])
    assert {found[(topic, p)][0] for p in (0, 1)} == {str(broker.log_dir)}
    assert found[(topic, 0)][1] == 0 and found[(topic, 1)][1] > 1000

    answer = kafka_request(broker.bootstrap, ApiKey.DESCRIBE_LOG_DIRS, 0, {"topics": [
        {"topic": topic, "partitions": [1]}]})
    listed = [(r.log_dir, [(t.name, [p.partition_index for p in t.partitions]) for t in r.topics]) for r in answer.results]
    assert listed == [(str(broker.log_dir), [(topic, [1])])]
    answer = kafka_request(broker.bootstrap, ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": []})
    assert answer.error_code == ErrorCode.NONE
    assert all(r.total_bytes > 0 and 0 <= r.usable_bytes <= r.total_bytes and not r.topics for r in answer.results)
