"""Broker configuration under Kafka's own names, from a ``server.properties`` file and overrides.

``CONFIG_KEYS`` is the table of every key the broker understands (name, type, default,
description) as data: the CLI validates against it and README's table is generated from it.
Keys that start with ``offsets.`` or ``group.`` and are not in the table are kept as raw
strings for the group coordinator (``BrokerConfig.get``). Any other unknown key is an error,
so a typo never silently falls back to a default.

Precedence (lowest first): the built-in defaults, the ``--config`` file, ``--override``
pairs, then the dedicated CLI flags (``--host``, ``--port``, ``--log-dir``).
"""

from __future__ import annotations

import difflib
import logging
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import javaproperties

from minikafka.storage.config import LogConfig

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9092
DEFAULT_LOG_DIR = "./minikafka-data"

# Left unset in the table, these keys stand for "no limit" / "derive from another key".
_UNSET = None


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one readable sentence."""


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One supported configuration key: Kafka's name, its value type, default and meaning.

    ``type`` is one of ``int`` (32-bit), ``long`` (64-bit), ``bool``, ``string``, ``list``
    (comma-separated) or ``enum`` (one of ``choices``). ``default`` is the typed value, or
    ``None`` when the key is unset by default (its description says what that means).
    """

    name: str
    type: str
    default: Any
    description: str
    minimum: int | None = None
    choices: tuple[str, ...] = ()


CONFIG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("broker.id", "int", 0, "Node id this broker reports in Metadata.", minimum=0),
    ConfigKey("listeners", "string", f"PLAINTEXT://{DEFAULT_HOST}:{DEFAULT_PORT}",
              "The listener, PLAINTEXT://HOST:PORT (an empty HOST binds every interface; "
              "port 0 picks a free port)."),
    ConfigKey("advertised.listeners", "string", _UNSET,
              "The address clients are told to connect to, PLAINTEXT://HOST:PORT; "
              "defaults to the listener (with the bound port when the listener port is 0)."),
    ConfigKey("log.dirs", "list", _UNSET, "Data directories (comma-separated); overrides log.dir."),
    ConfigKey("log.dir", "string", DEFAULT_LOG_DIR, "Data directory used when log.dirs is unset."),
    ConfigKey("num.partitions", "int", 1, "Partitions of an auto-created topic.", minimum=1),
    ConfigKey("auto.create.topics.enable", "bool", True,
              "Create unknown topics on Metadata and Produce requests."),
    ConfigKey("message.max.bytes", "int", 1048588,
              "Largest message set (after compression) a Produce may append to a partition; "
              "topic-level max.message.bytes.", minimum=0),
    ConfigKey("socket.request.max.bytes", "int", 104857600,
              "Largest request frame accepted; a bigger size prefix closes the connection.",
              minimum=1),
    ConfigKey("queued.max.request.bytes", "long", 104857600,
              "Bytes of request frames being read or waiting to be handled, across all "
              "connections (KIP-72); beyond it the broker stops reading from sockets until "
              "handled requests free memory. -1: no bound (Kafka's default).", minimum=-1),
    ConfigKey("connections.max.idle.ms", "long", 600000,
              "Close a connection after this long without a request in flight or bytes received; "
              "-1 never.", minimum=-1),
    ConfigKey("log.segment.bytes", "int", 1073741824,
              "Roll to a new segment when the active one reaches this size; topic-level "
              "segment.bytes.", minimum=14),
    ConfigKey("log.roll.ms", "long", _UNSET,
              "Roll a segment this long after its first message; overrides log.roll.hours; "
              "topic-level segment.ms.", minimum=1),
    ConfigKey("log.roll.hours", "int", 168, "log.roll.ms in hours.", minimum=1),
    ConfigKey("log.retention.ms", "long", _UNSET,
              "Delete closed segments whose newest message is older than this; -1 keeps them "
              "forever; overrides log.retention.minutes/hours; topic-level retention.ms.",
              minimum=-1),
    ConfigKey("log.retention.minutes", "int", _UNSET, "log.retention.ms in minutes.", minimum=-1),
    ConfigKey("log.retention.hours", "int", 168, "log.retention.ms in hours.", minimum=-1),
    ConfigKey("log.retention.bytes", "long", -1,
              "Delete the oldest closed segments while a partition is larger than this; "
              "-1 no size limit; topic-level retention.bytes.", minimum=-1),
    ConfigKey("log.retention.check.interval.ms", "long", 300000,
              "How often the retention pass runs.", minimum=1),
    ConfigKey("log.flush.interval.messages", "long", INT64_MAX,
              "fsync a partition after this many appended messages; topic-level "
              "flush.messages.", minimum=1),
    ConfigKey("log.flush.interval.ms", "long", _UNSET,
              "fsync a partition when its oldest unflushed message is this old; unset leaves "
              "flushing to the OS (Kafka's default); topic-level flush.ms.", minimum=0),
    ConfigKey("log.flush.scheduler.interval.ms", "long", 1000,
              "How often partitions are checked against log.flush.interval.ms.", minimum=1),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", "int", 60000,
              "How often the recovery-point and log-start-offset checkpoints are written.",
              minimum=1),
    ConfigKey("log.index.interval.bytes", "int", 4096,
              "Bytes of messages between two offset/time index entries; topic-level "
              "index.interval.bytes.", minimum=0),
    ConfigKey("log.index.size.max.bytes", "int", 10485760,
              "Largest offset or time index file; a full index rolls the segment; "
              "topic-level segment.index.bytes.", minimum=12),
    ConfigKey("log.segment.delete.delay.ms", "long", 60000,
              "How long a segment removed by retention stays on disk (renamed .deleted) so "
              "in-flight fetches can finish; topic-level file.delete.delay.ms.", minimum=0),
    ConfigKey("log.message.timestamp.type", "enum", "CreateTime",
              "CreateTime keeps the producer's timestamps, LogAppendTime stamps the broker's "
              "clock; topic-level message.timestamp.type.",
              choices=("CreateTime", "LogAppendTime")),
    ConfigKey("log.message.timestamp.difference.max.ms", "long", INT64_MAX,
              "Under CreateTime, refuse a message set with INVALID_TIMESTAMP when a timestamp "
              "is further than this from the broker's clock; topic-level "
              "message.timestamp.difference.max.ms.", minimum=0),
    # -- cluster mode (Kafka 0.10.2's names); without zookeeper.connect they have no effect
    ConfigKey("zookeeper.connect", "string", _UNSET,
              "HOST:PORT[,HOST:PORT...][/chroot] of the ZooKeeper ensemble: set, the broker joins "
              "the cluster registered there (broker.id must be unique in it); unset, it is the "
              "embedded single broker."),
    ConfigKey("zookeeper.session.timeout.ms", "int", 6000,
              "ZooKeeper session timeout: a broker silent for this long is dead to the cluster.",
              minimum=1),
    ConfigKey("zookeeper.connection.timeout.ms", "int", _UNSET,
              "How long start-up waits to connect to ZooKeeper; unset means "
              "zookeeper.session.timeout.ms.", minimum=1),
    ConfigKey("default.replication.factor", "int", 1,
              "Replication factor of auto-created topics (and of CreateTopics asking for -1).",
              minimum=1),
    ConfigKey("min.insync.replicas", "int", 1,
              "With acks=all, refuse a produce with NOT_ENOUGH_REPLICAS while the ISR is smaller "
              "than this; topic-level min.insync.replicas.", minimum=1),
    ConfigKey("unclean.leader.election.enable", "bool", False,
              "Let a replica outside the ISR become leader when every ISR member is dead (data "
              "loss). Kafka 0.10.2 defaulted to true; minikafka keeps the later default, false; "
              "topic-level unclean.leader.election.enable."),
    ConfigKey("replica.lag.time.max.ms", "long", 10000,
              "A follower that has not caught up with the leader's log end for this long leaves "
              "the ISR.", minimum=1),
    ConfigKey("replica.fetch.wait.max.ms", "int", 500,
              "How long a follower's fetch waits at the leader for replica.fetch.min.bytes.",
              minimum=0),
    ConfigKey("replica.fetch.min.bytes", "int", 1,
              "Bytes a follower's fetch waits for.", minimum=0),
    ConfigKey("replica.fetch.max.bytes", "int", 1048576,
              "Bytes a follower fetches per partition (at least one message is returned whole).",
              minimum=0),
    ConfigKey("replica.fetch.response.max.bytes", "int", 10485760,
              "Bytes a follower's fetch returns in all (Fetch v3).", minimum=0),
    ConfigKey("replica.fetch.backoff.ms", "int", 1000,
              "How long a follower waits after a failed fetch before trying again.", minimum=0),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", "long", 5000,
              "How often every partition's high watermark is checkpointed "
              "(replication-offset-checkpoint).", minimum=1),
    ConfigKey("controller.socket.timeout.ms", "int", 30000,
              "How long the controller waits for a broker's answer to LeaderAndIsr, "
              "UpdateMetadata and StopReplica.", minimum=1),
    ConfigKey("controlled.shutdown.enable", "bool", True,
              "On SIGTERM, ask the controller to move this broker's leaderships away first."),
    ConfigKey("controlled.shutdown.max.retries", "int", 3,
              "How often a controlled shutdown asks the controller before stopping anyway.",
              minimum=0),
    ConfigKey("controlled.shutdown.retry.backoff.ms", "long", 5000,
              "Wait between controlled shutdown attempts.", minimum=0),
    ConfigKey("minikafka.export.dir", "string", _UNSET,
              "Hand closed segments to the Spark exporter in this directory "
              "(same as `minikafka serve --export-to DIR`); segments are kept until exported."),
    ConfigKey("minikafka.export.master", "string", _UNSET,
              "Spark master URL the exporter runs on (same as `minikafka serve --export-master URL`); "
              "unset means local[*]. On a cluster, the log dirs and the export directory must be "
              "at the same path on the driver and every worker."),
    ConfigKey("minikafka.test.control.port", "int", _UNSET,
              "For tests only: open the test-control port on 127.0.0.1 (0 picks a free one; "
              "same as `minikafka serve --test-control`), through which clients can inject "
              "errors and delays into this broker's answers. Unset in production.",
              minimum=0),
)

_GROUP_KEY_DESCRIPTIONS = {
    "group.min.session.timeout.ms": "Smallest session timeout a consumer may ask for.",
    "group.max.session.timeout.ms": "Largest session timeout a consumer may ask for.",
    "group.initial.rebalance.delay.ms":
        "How long the coordinator waits for more members before the first rebalance of an "
        "empty group (Kafka's default is 3000; a test broker wants a lone consumer assigned at once).",
    "offsets.topic.num.partitions": "Partitions of __consumer_offsets when it is created.",
    "offsets.topic.segment.bytes": "Segment size of __consumer_offsets.",
    "offsets.retention.minutes": "Committed offsets expire this long after their commit.",
    "offsets.retention.check.interval.ms": "How often expired committed offsets are removed.",
    "offset.metadata.max.bytes": "Longest metadata string of an offset commit.",
    "offsets.snapshot.interval.events":
        "Snapshot a __consumer_offsets partition after this many events since the last snapshot.",
    "offsets.snapshot.interval.bytes":
        "Snapshot a __consumer_offsets partition after this many bytes of events since the last one.",
}


def _group_coordinator_keys() -> tuple[ConfigKey, ...]:
    """The group coordinator's keys, with the coordinator's own defaults (it reads them with
    ``BrokerConfig.is_set`` / ``get``)."""
    from minikafka.broker.groups.config import GroupConfig

    defaults = GroupConfig()
    return tuple(
        ConfigKey(name, "long", getattr(defaults, field) // unit,
                  _GROUP_KEY_DESCRIPTIONS.get(name, "Group coordinator setting."), minimum=minimum)
        for name, field, minimum, unit in GroupConfig._KEYS
    )


CONFIG_KEYS = CONFIG_KEYS + _group_coordinator_keys()

CONFIG_KEYS_BY_NAME: dict[str, ConfigKey] = {key.name: key for key in CONFIG_KEYS}

_TRUE = {"true"}
_FALSE = {"false"}


def parse_value(key: ConfigKey, raw: str) -> Any:
    """Convert ``raw`` (the text of a properties file or --override) to ``key``'s type."""
    text = raw.strip()
    if key.type in ("int", "long"):
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{key.name}: {raw!r} is not an integer") from None
        upper = INT32_MAX if key.type == "int" else INT64_MAX
        if value > upper or value < -upper - 1:
            raise ConfigError(f"{key.name}: {value} is out of range")
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"{key.name}: {value} is below the minimum {key.minimum}")
        return value
    if key.type == "bool":
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(f"{key.name}: {raw!r} is not true or false")
    if key.type == "list":
        return [item.strip() for item in text.split(",") if item.strip()]
    if key.type == "enum":
        if text not in key.choices:
            raise ConfigError(f"{key.name}: {raw!r} is not one of {', '.join(key.choices)}")
        return text
    return text


def parse_properties(text: str, *, source: str = "properties") -> dict[str, str]:
    """Parse ``server.properties``-style text into a dict, as java.util.Properties reads it
    (``javaproperties``: separators, comments, continuations, escapes). Later duplicates win;
    trailing blanks stay in values, as in Java (typed settings ignore them).
    """
    result: dict[str, str] = {}
    try:
        for entry in javaproperties.parse(text):
            if isinstance(entry, javaproperties.KeyValue):
                if not entry.key:
                    raise ConfigError(f"{source}: {entry.source.strip()!r} has no key")
                result[entry.key] = entry.value
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return result


def load_properties_file(path: Path) -> dict[str, str]:
    """Read and parse a properties file; unreadable files raise ConfigError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read config file {path}: {reason}") from None
    return parse_properties(text, source=str(path))


@dataclass(frozen=True, slots=True)
class Listener:
    """A PLAINTEXT listener address. ``host`` None means every interface."""

    host: str | None
    port: int

    @classmethod
    def parse(cls, name: str, text: str) -> "Listener":
        entries = [entry.strip() for entry in text.split(",") if entry.strip()]
        if len(entries) != 1:
            raise ConfigError(f"{name}: exactly one listener is supported, got {text!r}")
        match = re.fullmatch(r"(?:(?P<proto>[A-Za-z_]+)://)?(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>\d+)",
                             entries[0])
        if match is None:
            raise ConfigError(f"{name}: {text!r} is not PLAINTEXT://HOST:PORT")
        protocol = (match.group("proto") or "PLAINTEXT").upper()
        if protocol != "PLAINTEXT":
            raise ConfigError(f"{name}: only PLAINTEXT listeners are supported, got {protocol}")
        port = int(match.group("port"))
        if port > 65535:
            raise ConfigError(f"{name}: port {port} is out of range")
        host = match.group("host").strip("[]") or None
        return cls(host, port)

    def __str__(self) -> str:
        return f"PLAINTEXT://{host_port(self.host or '', self.port)}"


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as clients' bootstrap.servers take it: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


logger = logging.getLogger(__name__)

# Kafka broker settings with no meaning for one Python process on one listener (threads,
# socket buffers, ZooKeeper/KRaft quorum, replication factors, security, the cleaner). They
# are accepted with a warning so a server.properties written for Kafka starts as it is; any
# other unknown key is a mistake and is refused.
IGNORED_KAFKA_KEYS = frozenset({
    "num.network.threads", "num.io.threads", "num.recovery.threads.per.data.dir",
    "num.replica.fetchers", "background.threads", "queued.max.requests",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "zookeeper.set.acl", "process.roles", "node.id", "controller.quorum.voters",
    "controller.quorum.bootstrap.servers", "controller.listener.names",
    "inter.broker.listener.name", "listener.security.protocol.map",
    "security.inter.broker.protocol", "inter.broker.protocol.version",
    "log.message.format.version", "delete.topic.enable", "auto.leader.rebalance.enable",
    "offsets.topic.replication.factor", "offsets.commit.required.acks",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
    "log.cleaner.enable", "log.cleaner.threads", "log.cleanup.policy", "compression.type",
    "metric.reporters",
    "offsets.topic.compression.codec", "offsets.commit.timeout.ms", "offsets.load.buffer.size",
    "group.max.size", "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
})


class BrokerConfig:
    """The broker's validated configuration: every key of ``CONFIG_KEYS`` with its typed value.

    Build it with ``BrokerConfig.from_sources`` (CLI) or ``BrokerConfig(props)`` where
    ``props`` maps Kafka names to strings; invalid or unknown keys raise ``ConfigError``.
    """

    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        values: dict[str, Any] = {key.name: key.default for key in CONFIG_KEYS}
        self._explicit: set[str] = set()
        for name, raw in (properties or {}).items():
            key = CONFIG_KEYS_BY_NAME.get(name)
            if key is None:
                if name in IGNORED_KAFKA_KEYS:
                    logger.warning("config key %r has no effect in minikafka; ignored", name)
                    continue
                close = difflib.get_close_matches(name, CONFIG_KEYS_BY_NAME, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"unknown config key {name!r}{hint}")
            values[name] = parse_value(key, str(raw))
            self._explicit.add(name)
        self._values = values
        # Parse the derived settings now so a bad value fails at startup, not later.
        self.listener = Listener.parse("listeners", values["listeners"])
        advertised = values["advertised.listeners"]
        self.advertised_listener = Listener.parse("advertised.listeners", advertised) if advertised else None
        if self.advertised_listener is not None and self.advertised_listener.host is None:
            raise ConfigError("advertised.listeners: a host is required")
        if values["minikafka.export.master"] and not values["minikafka.export.dir"]:
            # Without an export dir there is no exporter to run on that master.
            raise ConfigError("minikafka.export.master: set without minikafka.export.dir "
                              "(serve --export-to DIR), so nothing would be exported")
        if (values["minikafka.test.control.port"] or 0) > 65535:
            raise ConfigError(f"minikafka.test.control.port: {values['minikafka.test.control.port']} "
                              "is out of range 0-65535")
        self.log_config()

    @classmethod
    def from_sources(
        cls,
        *,
        config_file: Path | None = None,
        overrides: Mapping[str, str] | None = None,
        host: str | None = None,
        port: int | None = None,
        log_dir: Path | None = None,
    ) -> "BrokerConfig":
        """Merge, in increasing precedence: ``config_file``, ``overrides``, then the flags."""
        properties: dict[str, str] = {}
        if config_file is not None:
            properties.update(load_properties_file(config_file))
        properties.update(overrides or {})
        if host is not None or port is not None:
            current = Listener.parse("listeners", properties.get("listeners", CONFIG_KEYS_BY_NAME["listeners"].default))
            new_host = current.host if host is None else (host or None)
            new_port = current.port if port is None else port
            properties["listeners"] = str(Listener(new_host, new_port))
        if log_dir is not None:
            properties["log.dirs"] = str(log_dir)
            properties.pop("log.dir", None)
        return cls(properties)

    def get(self, name: str, default: Any = None) -> Any:
        """The typed value of a table key, or ``default`` when the key is unset (its table
        default is None) or not in the table."""
        value = self._values.get(name)
        return default if value is None else value

    def is_set(self, name: str) -> bool:
        """Whether ``name`` was given explicitly (file, override or flag)."""
        return name in self._explicit

    @property
    def node_id(self) -> int:
        return self._values["broker.id"]

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self._values["log.dirs"] or [self._values["log.dir"]]
        return [Path(d).expanduser().absolute() for d in dirs]

    @property
    def zookeeper_connect(self) -> str | None:
        """Set: this broker is part of the cluster coordinated by that ZooKeeper."""
        return self._values["zookeeper.connect"] or None

    @property
    def num_partitions(self) -> int:
        return self._values["num.partitions"]

    @property
    def auto_create_topics(self) -> bool:
        return self._values["auto.create.topics.enable"]

    @property
    def message_max_bytes(self) -> int:
        return self._values["message.max.bytes"]

    @property
    def socket_request_max_bytes(self) -> int:
        return self._values["socket.request.max.bytes"]

    @property
    def queued_max_request_bytes(self) -> int | None:
        value = self._values["queued.max.request.bytes"]
        return None if value < 0 else value

    @property
    def connections_max_idle_ms(self) -> int:
        return self._values["connections.max.idle.ms"]

    @property
    def retention_check_interval_ms(self) -> int:
        return self._values["log.retention.check.interval.ms"]

    @property
    def flush_scheduler_interval_ms(self) -> int:
        return self._values["log.flush.scheduler.interval.ms"]

    @property
    def checkpoint_interval_ms(self) -> int:
        return self._values["log.flush.offset.checkpoint.interval.ms"]

    @property
    def export_dir(self) -> Path | None:
        value = self._values["minikafka.export.dir"]
        return Path(value).expanduser().absolute() if value else None

    @property
    def export_master(self) -> str | None:
        """The exporter's Spark master URL; None for the exporter's default (local[*])."""
        return self._values["minikafka.export.master"] or None

    @property
    def test_control_port(self) -> int | None:
        """The test-control port (0: any free one); None when fault injection is off."""
        return self._values["minikafka.test.control.port"]

    def advertised_address(self, bound_port: int) -> tuple[str, int]:
        """The (host, port) Metadata reports: advertised.listeners if set, else the listener,
        with the port actually bound when the configured one is 0, and this machine's name
        when the listener binds every interface."""
        listener = self.advertised_listener or self.listener
        host = listener.host
        if host is None or host in ("0.0.0.0", "::"):
            host = socket.getfqdn()
        return host, listener.port or bound_port

    def log_config(self) -> LogConfig:
        """The broker-wide default topic configuration (what a topic without overrides gets)."""
        v = self._values
        retention_ms = v["log.retention.ms"]
        if retention_ms is None and v["log.retention.minutes"] is not None:
            retention_ms = v["log.retention.minutes"] * 60_000
        if retention_ms is None:
            retention_ms = v["log.retention.hours"] * 3_600_000
        if retention_ms < 0:
            retention_ms = -1
        roll_ms = v["log.roll.ms"]
        if roll_ms is None:
            roll_ms = v["log.roll.hours"] * 3_600_000
        flush_messages = v["log.flush.interval.messages"]
        return LogConfig(
            segment_bytes=v["log.segment.bytes"],
            segment_ms=roll_ms,
            segment_index_bytes=v["log.index.size.max.bytes"],
            index_interval_bytes=v["log.index.interval.bytes"],
            retention_ms=retention_ms,
            retention_bytes=v["log.retention.bytes"],
            flush_interval_messages=None if flush_messages == INT64_MAX else flush_messages,
            flush_interval_ms=v["log.flush.interval.ms"],
            file_delete_delay_ms=v["log.segment.delete.delay.ms"],
            message_timestamp_type=v["log.message.timestamp.type"],
            message_timestamp_difference_max_ms=v["log.message.timestamp.difference.max.ms"],
            max_message_bytes=v["message.max.bytes"],
        )


def config_table() -> list[dict[str, str]]:
    """The supported keys as rows (name, type, default, description) for documentation."""
    rows = []
    for key in CONFIG_KEYS:
        default = "" if key.default is None else key.default
        if isinstance(default, bool):
            default = str(default).lower()
        rows.append({"name": key.name, "type": key.type, "default": str(default),
                     "description": key.description})
    return rows
