"""Configs of the broker and its topics as DescribeConfigs shows them and AlterConfigs /
IncrementalAlterConfigs change them (Kafka 2.8's ZkAdminManager and ConfigHelper).

A resource is a topic (its overrides, and the broker settings a topic without an override
falls back on) or this broker (its settings). Each config is described with where its value
comes from (``ConfigSource``) and, when asked, its synonyms: the settings that would give it
a value, the one in effect first (Kafka's ``TopicConfigSynonyms``: ``retention.ms`` falls back
on ``log.retention.ms``, then ``log.retention.minutes``, then ``log.retention.hours``).

Broker settings are read-only but for the dynamic ones (``broker.dynamic_configs``: the topic
defaults, ``log.retention.ms`` and the like), which AlterConfigs sets for this broker or the
cluster's default (the empty name); AlterConfigs of any other setting answers INVALID_REQUEST
as Kafka does for a setting it cannot update dynamically.
Topic configs are altered by replacing the topic's
overrides (``Partitions.alter_topic_configs``), which takes effect on the running logs.
"""

from __future__ import annotations

import enum
from typing import Any, Callable

from minikafka.broker.config import CONFIG_KEYS_BY_NAME, BrokerConfig
from minikafka.broker.config import ConfigError as BadBrokerConfig
from minikafka.broker.dynamic_configs import BROKER_RESOURCE_CONFIGS, PER_BROKER_CONFIGS, entity_name
from minikafka.broker.partitions import TopicError
from minikafka.protocol.errors import ErrorCode
from minikafka.storage.config import TOPIC_CONFIG_NAMES, LogConfig


class ResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigType (DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterOp(enum.IntEnum):
    """IncrementalAlterConfigs' AlterConfigOp.OpType."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigError(Exception):
    """A resource's request refused with a Kafka error code and message."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message


# Kafka 2.8's LogConfig.TopicConfigSynonyms: the broker settings each topic config falls back
# on, in order of precedence (only those this broker has are shown).
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {
    "segment.bytes": ("log.segment.bytes",),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "max.message.bytes": ("message.max.bytes",),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "cleanup.policy": ("log.cleanup.policy",),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
    "min.insync.replicas": ("min.insync.replicas",),
    "compression.type": ("compression.type",),
    "preallocate": ("log.preallocate",),
    "message.format.version": ("log.message.format.version",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms",),
    "message.downconversion.enable": ("log.message.downconversion.enable",),
}

# Kafka's own defaults of the topic configs that this broker accepts without a broker setting
# behind them (LogConfig's defaults), as DescribeConfigs shows them.
_KAFKA_TOPIC_DEFAULTS = {
    "segment.jitter.ms": "0",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "min.cleanable.dirty.ratio": "0.5",
    "compression.type": "producer",
    "preallocate": "false",
    # The format this broker writes without a message.format.version of its own.
    "message.format.version": "0.10.2-IV0",
    "message.downconversion.enable": "true",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    "cleanup.policy": "delete",
}

_LIST_TOPIC_CONFIGS = frozenset({"cleanup.policy", "leader.replication.throttled.replicas",
                                 "follower.replication.throttled.replicas"})
_TOPIC_CONFIG_TYPES = {
    "cleanup.policy": ConfigType.LIST, "compression.type": ConfigType.STRING,
    "message.format.version": ConfigType.STRING, "message.timestamp.type": ConfigType.STRING,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE, "preallocate": ConfigType.BOOLEAN,
    "unclean.leader.election.enable": ConfigType.BOOLEAN, "message.downconversion.enable": ConfigType.BOOLEAN,
    "leader.replication.throttled.replicas": ConfigType.LIST,
    "follower.replication.throttled.replicas": ConfigType.LIST,
    "segment.bytes": ConfigType.INT, "segment.index.bytes": ConfigType.INT,
    "index.interval.bytes": ConfigType.INT, "max.message.bytes": ConfigType.INT,
    "min.insync.replicas": ConfigType.INT,
}
_BROKER_TYPES = {"int": ConfigType.INT, "long": ConfigType.LONG, "bool": ConfigType.BOOLEAN,
                 "double": ConfigType.DOUBLE, "string": ConfigType.STRING, "list": ConfigType.LIST,
                 "enum": ConfigType.STRING}
# Settings whose values DescribeConfigs never shows (Kafka's PASSWORD type).
SENSITIVE_BROKER_CONFIGS = frozenset({"ssl.keystore.password", "ssl.key.password", "ssl.truststore.password",
                                      "sasl.jaas.config"})


def _text(value: Any) -> str | None:
    """A broker setting's typed value as Kafka shows it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _entry(name: str, value: str | None, source: ConfigSource, *, read_only: bool, sensitive: bool = False,
           synonyms: list[dict], config_type: ConfigType) -> dict:
    return {"name": name, "value": None if sensitive else value, "read_only": read_only,
            "config_source": int(source), "is_default": source == ConfigSource.DEFAULT_CONFIG,
            "is_sensitive": sensitive, "synonyms": synonyms, "config_type": int(config_type)}


# ---------------------------------------------------------------------------------------- broker


def _broker_source(config: BrokerConfig, name: str) -> ConfigSource:
    if name in config.dynamic_layers.get("broker", {}):
        return ConfigSource.DYNAMIC_BROKER_CONFIG
    if name in config.dynamic_layers.get("default", {}):
        return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    return ConfigSource.STATIC_BROKER_CONFIG if config.is_set(name) else ConfigSource.DEFAULT_CONFIG


def _broker_synonyms(config: BrokerConfig, names: tuple[str, ...]) -> list[dict]:
    """The entries of ``names`` that give a value (set, or with a default), in order, each
    from the dynamic layers that hold it first (Kafka's DynamicBrokerConfig synonyms), then
    its static value or default."""
    synonyms = []
    for name in names:
        if name not in CONFIG_KEYS_BY_NAME:
            continue
        for layer, source in (("broker", ConfigSource.DYNAMIC_BROKER_CONFIG),
                              ("default", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)):
            if name in config.dynamic_layers.get(layer, {}):
                synonyms.append({"name": name, "value": config.dynamic_layers[layer][name], "source": int(source)})
        static = config.is_set(name)
        value = _text(config.static_value(name))
        if static or value is not None:
            synonyms.append({"name": name, "value": None if name in SENSITIVE_BROKER_CONFIGS else value,
                             "source": int(ConfigSource.STATIC_BROKER_CONFIG if static else ConfigSource.DEFAULT_CONFIG)})
    return synonyms


def _synonym_group(name: str) -> tuple[str, ...]:
    """A broker setting and those it falls back on (``log.retention.minutes``:
    itself and ``log.retention.hours``)."""
    for group in TOPIC_CONFIG_SYNONYMS.values():
        if name in group:
            return group[group.index(name):]
    return (name,)


def describe_broker(config: BrokerConfig, names: set[str] | None, *, default_entity: bool = False) -> list[dict]:
    """Every setting of this broker (or those in ``names``), read-only but for the dynamic
    ones (see the module docstring); of the cluster's default entity (``default_entity``),
    only the dynamic defaults set, as Kafka describes the empty broker name."""
    entries = []
    for key in CONFIG_KEYS_BY_NAME.values():
        if names is not None and key.name not in names:
            continue
        if default_entity:
            value = config.dynamic_layers.get("default", {}).get(key.name)
            if value is not None:
                entries.append(_entry(key.name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, read_only=False,
                                      synonyms=[{"name": key.name, "value": value,
                                                 "source": int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)}],
                                      config_type=_BROKER_TYPES[key.type]))
            continue
        sensitive = key.name in SENSITIVE_BROKER_CONFIGS
        entries.append(_entry(key.name, _text(config.get(key.name)), _broker_source(config, key.name),
                              read_only=key.name not in BROKER_RESOURCE_CONFIGS,
                              sensitive=sensitive,
                              synonyms=_broker_synonyms(config, _synonym_group(key.name)),
                              config_type=ConfigType.PASSWORD if sensitive else _BROKER_TYPES[key.type]))
    return entries


def check_broker_resource(name: str, node_id: int) -> None:
    """ConfigError(INVALID_REQUEST) unless ``name`` is this broker's id (Kafka's
    resourceNameToBrokerId). The empty name, the cluster's dynamic defaults, has none here."""
    try:
        broker_id = int(name)
    except ValueError:
        raise ConfigError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None
    if broker_id != node_id:
        raise ConfigError(ErrorCode.INVALID_REQUEST,
                          f"Unexpected broker id, expected {node_id} or empty string, but received {name}")


def refuse_broker_alteration(name: str, configs: list[str]) -> ConfigError:
    """What altering broker settings answers: none can change while the broker runs."""
    return ConfigError(ErrorCode.INVALID_REQUEST,
                       f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): "
                       f"Cannot update these configs dynamically: Set({', '.join(sorted(configs))})")


# ---------------------------------------------------------------------------------------- topics


def describe_topic(config: BrokerConfig, default_log_config: LogConfig, overrides: dict[str, str],
                   names: set[str] | None, include_synonyms: bool) -> list[dict]:
    """The topic's every config (or those in ``names``) with the value in effect: its
    override, else the broker's setting, else Kafka's default."""
    enforced = default_log_config.kafka_values()
    entries = []
    for name in sorted(TOPIC_CONFIG_NAMES):
        if names is not None and name not in names:
            continue
        broker_synonyms = _broker_synonyms(config, TOPIC_CONFIG_SYNONYMS.get(name, ()))
        synonyms = [{"name": name, "value": overrides[name], "source": int(ConfigSource.TOPIC_CONFIG)}] \
            if name in overrides else []
        synonyms += broker_synonyms
        if name in overrides:
            value, source = overrides[name], ConfigSource.TOPIC_CONFIG
        elif name in enforced:
            value = enforced[name]
            # The first broker setting that gives it (dynamic ones first), else Kafka's default.
            source = ConfigSource(next((s["source"] for s in broker_synonyms
                                        if s["source"] != ConfigSource.DEFAULT_CONFIG), ConfigSource.DEFAULT_CONFIG))
        elif broker_synonyms:
            value, source = broker_synonyms[0]["value"], ConfigSource(broker_synonyms[0]["source"])
        else:
            value, source = _KAFKA_TOPIC_DEFAULTS.get(name), ConfigSource.DEFAULT_CONFIG
        entries.append(_entry(name, value, source, read_only=False,
                              synonyms=synonyms if include_synonyms else [],
                              config_type=_TOPIC_CONFIG_TYPES.get(name, ConfigType.LONG)))
    return entries


def incremental_overrides(current: dict[str, str], changes) -> dict[str, str]:
    """The topic's overrides after IncrementalAlterConfigs' ``changes`` (name,
    config_operation, value); ConfigError for an operation Kafka refuses."""
    names = [change.name for change in changes]
    if len(set(names)) != len(names):
        raise ConfigError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    overrides = dict(current)
    for change in changes:
        try:
            op = AlterOp(change.config_operation)
        except ValueError:
            raise ConfigError(ErrorCode.INVALID_REQUEST,
                              f"Unknown alter config operation {change.config_operation}") from None
        if op == AlterOp.SET:
            if change.value is None:
                raise ConfigError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {change.name}")
            overrides[change.name] = change.value
        elif op == AlterOp.DELETE:
            overrides.pop(change.name, None)
        else:
            if change.name not in _LIST_TOPIC_CONFIGS:
                raise ConfigError(ErrorCode.INVALID_CONFIG,
                                  f"Config value append is not allowed for config key: {change.name}")
            present = [v for v in overrides.get(change.name, _KAFKA_TOPIC_DEFAULTS.get(change.name, "")).split(",")
                       if v]
            given = [v.strip() for v in (change.value or "").split(",") if v.strip()]
            if op == AlterOp.APPEND:
                updated = present + [v for v in given if v not in present]
            else:
                updated = [v for v in present if v not in given]
            overrides[change.name] = ",".join(updated)
    return overrides


def _refuse_nulls(configs: dict[str, str | None]) -> None:
    """Kafka's ConfigException (INVALID_REQUEST) for the configs set to null, if any."""
    nulls = sorted(name for name, value in configs.items() if value is None)
    if nulls:
        raise ConfigError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")


def check_topic_overrides(default_log_config: LogConfig, overrides: dict[str, str | None]) -> dict[str, str]:
    """``overrides`` if a topic may have them, else ConfigError: INVALID_CONFIG for an unknown
    name, INVALID_REQUEST for a null or bad value (Kafka's ConfigException)."""
    unknown = sorted(name for name in overrides if name not in TOPIC_CONFIG_NAMES)
    if unknown:
        raise ConfigError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {unknown[0]}")
    _refuse_nulls(overrides)
    try:
        LogConfig.from_topic_configs(default_log_config, overrides)
    except ValueError as exc:
        raise ConfigError(ErrorCode.INVALID_REQUEST, f"Invalid config value: {exc}") from None
    return dict(overrides)


async def alter_resources(broker, request, new_overrides: Callable[[Any, dict[str, str]], dict[str, str | None]]
                          ) -> dict:
    """The response to an AlterConfigs / IncrementalAlterConfigs ``request``: each topic
    resource's overrides become ``new_overrides(resource, current overrides)``, unless it is
    refused (see the handlers), which changes nothing; ``validate_only`` changes nothing."""
    responses = []
    for resource in request.body.resources:
        response = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                    "error_code": ErrorCode.NONE, "error_message": None}
        try:
            await _alter_resource(broker, request, resource, new_overrides)
        except ConfigError as exc:
            response.update(error_code=exc.code, error_message=exc.message)
        responses.append(response)
    return {"responses": responses}


async def _alter_resource(broker, request, resource, new_overrides) -> None:
    name = resource.resource_name
    if resource.resource_type == ResourceType.TOPIC:
        if not broker.authorize(request, "AlterConfigs", "Topic", name):
            raise ConfigError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        partitions = broker.partitions
        try:
            partitions.check_topic_name(name)
            overrides = check_topic_overrides(broker.default_log_config,
                                              new_overrides(resource, await partitions.topic_overrides(name)))
            if not request.body.validate_only:
                await partitions.alter_topic_configs(name, overrides)
        except TopicError as exc:
            raise ConfigError(exc.code, str(exc)) from None
        return
    if resource.resource_type == ResourceType.BROKER:
        if not broker.authorize(request, "AlterConfigs", "Cluster"):
            raise ConfigError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if name != "":
            check_broker_resource(name, broker.node_id)
        entity = entity_name(name)
        settings = new_overrides(resource, broker.dynamic_configs(entity))
        fixed = [config for config in settings if config not in BROKER_RESOURCE_CONFIGS]
        if fixed:
            raise refuse_broker_alteration(name, fixed)
        per_broker = sorted(PER_BROKER_CONFIGS & set(settings)) if name == "" else []
        if per_broker:
            raise ConfigError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, "
                                                         f"broker id must be specified: Set({', '.join(per_broker)})")
        _refuse_nulls(settings)
        try:
            broker.check_dynamic_configs(entity, settings)
        except BadBrokerConfig as exc:
            raise ConfigError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource "
                                                         f"ConfigResource(type=BROKER, name='{name}'): {exc}") from None
        if not request.body.validate_only and settings != broker.dynamic_configs(entity):
            await broker.alter_dynamic_configs(entity, settings)
        return
    raise ConfigError(ErrorCode.INVALID_REQUEST, f"Unexpected resource type {resource.resource_type} "
                                                 f"for resource {name}")
