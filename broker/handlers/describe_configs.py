"""DescribeConfigs (key 32), v0-v3: the configs of topics and of this broker (broker.configs).

Per resource, as Kafka 2.8's KafkaApis and ZkAdminManager: a topic needs DESCRIBE_CONFIGS on
it (TOPIC_AUTHORIZATION_FAILED), the broker DESCRIBE_CONFIGS on the cluster
(CLUSTER_AUTHORIZATION_FAILED); an unknown topic is UNKNOWN_TOPIC_OR_PARTITION, a broker id
other than this broker's, or another resource type, INVALID_REQUEST. ``configuration_keys``
null lists every config. Synonyms are listed only when asked (v1+); documentation is not kept.
"""

from __future__ import annotations

from minikafka.broker import configs
from minikafka.broker.configs import ConfigError, ResourceType
from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DESCRIBE_CONFIGS


async def handle(broker, request) -> dict:
    body = request.body
    results = []
    for resource in body.resources:
        result = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                  "error_code": ErrorCode.NONE, "error_message": None, "configs": []}
        names = None if resource.configuration_keys is None else set(resource.configuration_keys)
        try:
            result["configs"] = await _describe(broker, request, resource, names, body.include_synonyms)
        except ConfigError as exc:
            result.update(error_code=exc.code, error_message=exc.message)
        results.append(result)
    return {"results": results}


async def _describe(broker, request, resource, names: set[str] | None, include_synonyms: bool) -> list[dict]:
    name = resource.resource_name
    if resource.resource_type == ResourceType.TOPIC:
        if not broker.authorize(request, "DescribeConfigs", "Topic", name):
            raise ConfigError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        try:
            broker.partitions.check_topic_name(name)
            overrides = await broker.partitions.topic_overrides(name)
        except TopicError as exc:
            raise ConfigError(exc.code, str(exc)) from None
        return configs.describe_topic(broker.config, broker.default_log_config, overrides, names, include_synonyms)
    if resource.resource_type == ResourceType.BROKER:
        if not broker.authorize(request, "DescribeConfigs", "Cluster"):
            raise ConfigError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if name != "":
            configs.check_broker_resource(name, broker.node_id)
        described = configs.describe_broker(broker.config, names, default_entity=name == "")
        if not include_synonyms:
            for entry in described:
                entry["synonyms"] = []
        return described
    raise ConfigError(ErrorCode.INVALID_REQUEST,
                      f"Unexpected resource type {resource.resource_type} for resource {name}")
