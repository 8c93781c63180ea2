"""IncrementalAlterConfigs (key 44), v0 (KIP-339): set, delete, append to or subtract from
single topic configs, leaving the others as they are; ``validate_only`` changes nothing.

Errors as AlterConfigs' (alter_configs.py), plus INVALID_REQUEST for a config named twice in
one resource or an unknown operation, and INVALID_CONFIG for APPEND / SUBTRACT on a config
that is not a list (Kafka 2.8's ZkAdminManager.prepareIncrementalConfigs).
"""

from __future__ import annotations

from minikafka.broker.configs import alter_resources, incremental_overrides
from minikafka.protocol.apis import ApiKey

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS


async def handle(broker, request) -> dict:
    return await alter_resources(broker, request, lambda resource, current: incremental_overrides(
        current, resource.configs))
