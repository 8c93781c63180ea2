"""Dynamic broker configs (Kafka's DynamicBrokerConfig): settings AlterConfigs changes on a
BROKER resource, this broker's own (its id) or the cluster's default (the empty name), which
take effect without a restart and override the static configuration.

Only the settings Kafka marks dynamic per broker and this broker applies live are accepted:
the defaults of the topic configs (``log.retention.ms``, ``log.segment.bytes``,
``message.max.bytes``, ...; Kafka's DynamicLogConfig), which every log without an override of
its own runs with at once, and the log cleaner's (``log.cleaner.backoff.ms``,
``log.cleaner.io.max.bytes.per.second``, ...), which restart the cleaner, the replication
throttles' rates (KIP-73, read at each fetch and each chunk of a move), and a broker's
``advertised.listeners``, which Metadata answers at once (in a cluster, once the controller has
seen the broker's registration change). A cluster keeps them where Kafka does, in ``/config/brokers/<id>``
and ``/config/brokers/<default>`` with a ``/config/changes`` notification each broker follows;
a single broker in its first log dir, in ``dynamic-broker-configs.json``:
``{"version":1,"brokers":{"<default>":{...},"<id>":{...}}}`` (the same entity names), written
atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from minikafka.storage.checkpoint import write_atomically

DYNAMIC_CONFIGS_FILE = "dynamic-broker-configs.json"
# Kafka's ConfigEntityName.Default: the entity of the cluster-wide defaults.
DEFAULT_ENTITY = "<default>"

# Kafka 2.8's DynamicLogConfig.ReconfigurableConfigs, as far as this broker has them.
DYNAMIC_CONFIGS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.index.size.max.bytes",
    "log.index.interval.bytes", "log.retention.ms", "log.retention.minutes", "log.retention.hours",
    "log.retention.bytes", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.segment.delete.delay.ms", "log.message.timestamp.type", "log.message.timestamp.difference.max.ms",
    "message.max.bytes", "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio",
    # Read at each acks=all produce (ReplicatedPartitions.min_insync_replicas), so live at once.
    "min.insync.replicas",
}) | frozenset({
    # Kafka 2.8's LogCleaner.ReconfigurableConfigs: a change stops the cleaner and starts a new
    # one with them (Broker._run_cleaner). Not max.connections and the listener/SSL ones:
    # this broker has no such settings.
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
}) | frozenset({
    # Kafka 2.8's DynamicConfig.Broker (the replication quotas, applied by its
    # BrokerConfigHandler): read at each use (replication.quota, move_replicas), so live at once.
    # kafka-reassign-partitions.sh sets them with --throttle / --replica-alter-log-dirs-throttle
    # and deletes them with --verify.
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})


# Kafka 2.x's DynamicListenerConfig: only this broker's own (DynamicBrokerConfig.PerBrokerConfigs,
# refused at the cluster default). In a cluster the broker rewrites its /brokers/ids/<id> and the
# controller, watching each registration (Kafka 2.x's BrokerModifications), tells every broker.
PER_BROKER_CONFIGS = frozenset({"advertised.listeners"})

#: The settings AlterConfigs may change on a BROKER resource.
BROKER_RESOURCE_CONFIGS = DYNAMIC_CONFIGS | PER_BROKER_CONFIGS


def entity_name(resource_name: str) -> str:
    """The entity a BROKER resource name stands for."""
    return DEFAULT_ENTITY if resource_name == "" else resource_name


class DynamicConfigFile:
    """A single broker's dynamic settings, by entity."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / DYNAMIC_CONFIGS_FILE

    def load(self) -> dict[str, dict[str, str]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError:
            if not (self.path.parent.is_dir() and os.access(self.path.parent, os.R_OK | os.X_OK)):
                return {}  # an unusable log dir: the broker's start says so in one line
            raise
        brokers = json.loads(text).get("brokers", {})
        return {str(entity): {str(k): str(v) for k, v in settings.items()} for entity, settings in brokers.items()}

    def save(self, settings: dict[str, dict[str, str]]) -> None:
        data = {"version": 1, "brokers": {entity: dict(sorted(values.items()))
                                          for entity, values in sorted(settings.items()) if values}}
        write_atomically(self.path, json.dumps(data, separators=(",", ":")).encode("utf-8"))
