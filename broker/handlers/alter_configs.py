"""AlterConfigs (key 33), v0-v1: replace the whole set of a topic's overrides (configs left
out go back to the broker's); ``validate_only`` checks and changes nothing.

Per resource, as Kafka 2.8's KafkaApis and ZkAdminManager: a topic needs ALTER_CONFIGS on it
(TOPIC_AUTHORIZATION_FAILED), the broker ALTER_CONFIGS on the cluster
(CLUSTER_AUTHORIZATION_FAILED); an unknown topic is UNKNOWN_TOPIC_OR_PARTITION, an unknown
config INVALID_CONFIG, a null or bad value INVALID_REQUEST, as is any broker setting (none
changes while this broker runs, broker.configs). A refused resource changes nothing.
"""

from __future__ import annotations

from minikafka.broker.configs import alter_resources
from minikafka.protocol.apis import ApiKey

API_KEY = ApiKey.ALTER_CONFIGS


async def handle(broker, request) -> dict:
    return await alter_resources(broker, request, _replaced)


def _replaced(resource, current: dict[str, str]) -> dict[str, str | None]:
    return {entry.name: entry.value for entry in resource.configs}
