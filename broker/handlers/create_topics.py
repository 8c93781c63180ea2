"""CreateTopics (key 19), v0-v4: create topics with partitions and per-topic configs.

Kafka's rules on a one-broker cluster: the replication factor must be 1 (-1 takes the
default, as do -1 partitions, since clients such as kafka-python send -1 for "broker
default"), explicit replica assignments may only name this broker, topic configs use Kafka's
topic-level names (``retention.ms``, ``segment.bytes``, ``message.timestamp.type``, ...) and a
bad one fails with INVALID_CONFIG. A topic named twice in one request fails with
INVALID_REQUEST. ``validate_only`` (v1) runs every check and creates nothing. v1 responses
carry a readable error message. v5+ answer a created (or validated) topic's partition count,
replication factor and every config as DescribeConfigs describes it, as Kafka 2.8's
ZkAdminManager, or TOPIC_AUTHORIZATION_FAILED in ``topic_config_error_code`` for a principal
without DescribeConfigs on the topic; v7 the created topic's id.
"""

from __future__ import annotations

from collections import Counter

from minikafka.broker import configs as broker_configs
from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.types import ZERO_UUID

API_KEY = ApiKey.CREATE_TOPICS


async def handle(broker, request) -> dict:
    body = request.body
    counts = Counter(topic.name for topic in body.topics)
    results = []
    reported = set()
    may_create = broker.authorize(request, "Create", "Cluster")
    for topic in body.topics:
        if topic.name in reported:
            continue
        reported.add(topic.name)
        if not may_create:
            results.append({"name": topic.name, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            "error_message": "Authorization failed."})
            continue
        if counts[topic.name] > 1:
            results.append({"name": topic.name, "error_code": ErrorCode.INVALID_REQUEST,
                            "error_message": "Create topics request from client contains "
                                             f"multiple entries for topic {topic.name}."})
            continue
        assignments = {entry.partition_index: list(entry.broker_ids) for entry in topic.assignments}
        configs = {entry.name: entry.value for entry in topic.configs}
        try:
            count, factor = await broker.partitions.create_topic(
                topic.name, topic.num_partitions, topic.replication_factor, assignments, configs,
                validate_only=body.validate_only, timeout_ms=body.timeout_ms)
        except TopicError as exc:
            results.append({"name": topic.name, "error_code": exc.code, "error_message": str(exc)})
            continue
        result = {"name": topic.name, "error_code": ErrorCode.NONE, "error_message": None}
        if request.api_version >= 5 and not broker.authorize(request, "DescribeConfigs", "Topic", topic.name):
            result["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif request.api_version >= 5:
            described = broker_configs.describe_topic(broker.config, broker.default_log_config, configs, None,
                                                      include_synonyms=False)
            result.update(num_partitions=count, replication_factor=factor, configs=[
                {key: entry[key] for key in ("name", "value", "read_only", "config_source", "is_sensitive")}
                for entry in described])
        if request.api_version >= 7 and not body.validate_only:
            result["topic_id"] = (await broker.partitions.topic_ids([topic.name])).get(topic.name, ZERO_UUID)
        results.append(result)
    return {"topics": results}
