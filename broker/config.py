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

import copy
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from minikafka.storage.cleaner import CleanerConfig
from minikafka.storage.config import LogConfig, message_format_magic

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9092
DEFAULT_LOG_DIR = "./minikafka-data"

# Left unset in the table, these keys stand for "no limit" / "derive from another key".
_UNSET = None


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one readable sentence."""


class ConfigKey(NamedTuple):
    """One supported configuration key: Kafka's name, its value type, default and meaning.

    ``type`` is one of ``int`` (32-bit), ``long`` (64-bit), ``double``, ``bool``, ``string``, ``list``
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
              "Comma-separated listeners NAME://HOST:PORT (an empty HOST binds every interface; "
              "port 0 picks a free port); NAME is a security protocol (PLAINTEXT, SSL, "
              "SASL_PLAINTEXT, SASL_SSL) or a name listener.security.protocol.map maps to one. "
              "The first listener is the one --host/--port change."),
    ConfigKey("advertised.listeners", "string", _UNSET,
              "The addresses clients are told to connect to, NAME://HOST:PORT per listener; a "
              "listener not named here advertises its own address (with the bound port when the "
              "listener port is 0)."),
    ConfigKey("listener.security.protocol.map", "string",
              "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
              "NAME:PROTOCOL pairs giving each listener name its security protocol."),
    ConfigKey("inter.broker.listener.name", "string", _UNSET,
              "The listener brokers of a cluster use to talk to each other (controller requests, "
              "replica fetches); unset means the listener named after security.inter.broker.protocol."),
    ConfigKey("security.inter.broker.protocol", "enum", "PLAINTEXT",
              "Security protocol between brokers when inter.broker.listener.name is unset.",
              choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    ConfigKey("ssl.keystore.location", "string", _UNSET,
              "PEM file holding the broker's private key and certificate chain (SSL and SASL_SSL "
              "listeners); JKS and PKCS12 keystores are not read. Per listener: "
              "listener.name.NAME.ssl.keystore.location."),
    ConfigKey("ssl.keystore.type", "enum", "PEM", "Format of ssl.keystore.location: PEM only.",
              choices=("PEM",)),
    ConfigKey("ssl.keystore.password", "string", _UNSET,
              "Password of an encrypted private key in ssl.keystore.location when ssl.key.password "
              "is unset."),
    ConfigKey("ssl.key.password", "string", _UNSET,
              "Password of an encrypted private key in ssl.keystore.location."),
    ConfigKey("ssl.truststore.location", "string", _UNSET,
              "PEM file of the CA certificates client certificates must chain to (mutual TLS); "
              "unset uses the system's CAs."),
    ConfigKey("ssl.truststore.type", "enum", "PEM", "Format of ssl.truststore.location: PEM only.",
              choices=("PEM",)),
    ConfigKey("ssl.client.auth", "enum", "none",
              "Ask TLS clients for a certificate: none; requested (verified if given); required "
              "(refuse a client without one). The principal is User:<the certificate's subject DN>.",
              choices=("none", "requested", "required")),
    ConfigKey("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"],
              "TLS versions offered, a contiguous range of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3 (Kafka "
              "0.10.2 offered TLSv1.2,TLSv1.1,TLSv1, which OpenSSL 3 refuses below TLS 1.2 at its "
              "default security level)."),
    ConfigKey("ssl.protocol", "string", "TLS",
              "Java's SSLContext protocol: TLS (or SSL) leaves ssl.enabled.protocols as it is; "
              "TLSv1.2 (say) offers nothing newer."),
    ConfigKey("ssl.cipher.suites", "list", [],
              "Cipher suites by their Java/IANA names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, ...); "
              "empty: OpenSSL's defaults. TLS 1.3's suites go all or none (none turns TLS 1.3 off)."),
    ConfigKey("ssl.endpoint.identification.algorithm", "string", "",
              "HTTPS: a broker dialling another's TLS inter-broker listener checks that the "
              "certificate names the host it dialled; empty (Kafka 0.10.2's default): no check."),
    ConfigKey("sasl.enabled.mechanisms", "list", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
              "SASL mechanisms SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
              "(no GSSAPI). Per listener: listener.name.NAME.sasl.enabled.mechanisms."),
    ConfigKey("sasl.jaas.config", "string", _UNSET,
              "PLAIN's users in Kafka's JAAS syntax: org.apache.kafka.common.security.plain."
              "PlainLoginModule required user_NAME=\"PASSWORD\" ...; Per listener and mechanism: "
              "listener.name.NAME.plain.sasl.jaas.config. SCRAM users live in the log dir "
              "(minikafka users)."),
    ConfigKey("sasl.mechanism.inter.broker.protocol", "enum", "PLAIN",
              "SASL mechanism brokers authenticate to each other with on a SASL inter-broker "
              "listener; the broker's own username/password come from that listener's "
              "listener.name.NAME.MECHANISM.sasl.jaas.config. Kafka's default is GSSAPI, which "
              "minikafka does not offer.", choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    ConfigKey("log.dirs", "list", _UNSET, "Data directories (comma-separated); overrides log.dir."),
    ConfigKey("log.dir", "string", DEFAULT_LOG_DIR, "Data directory used when log.dirs is unset."),
    ConfigKey("num.partitions", "int", 1, "Partitions of an auto-created topic.", minimum=1),
    ConfigKey("auto.create.topics.enable", "bool", True,
              "Create unknown topics named in Metadata requests (Produce never creates one)."),
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
    ConfigKey("connection.failed.authentication.delay.ms", "int", 100,
              "How long a SASL connection whose authentication failed stays open after its error "
              "response, unless the client closes it first (KIP-306): a client reads the answer "
              "before it sees the connection close.", minimum=0),
    ConfigKey("producer.id.expiration.ms", "int", 86400000,
              "A partition forgets an idempotent producer this long after the timestamp of its "
              "last batch there (KIP-854's setting and default; Kafka 2.8 used "
              "transactional.id.expiration.ms); its next batch then starts afresh.", minimum=1),
    ConfigKey("producer.id.expiration.check.interval.ms", "int", 600000,
              "How often partitions look for expired producers.", minimum=1),
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
    ConfigKey("log.cleaner.enable", "bool", True,
              "Run the log cleaner, which compacts topics with cleanup.policy=compact (keeps the "
              "latest record per key; storage.cleaner)."),
    ConfigKey("log.cleaner.threads", "int", 1,
              "Worker processes of the log cleaner: passes over this many logs run at once, each "
              "with its share of log.cleaner.dedupe.buffer.size and of the I/O rate.", minimum=0),
    ConfigKey("log.cleaner.backoff.ms", "long", 15000,
              "How long the cleaner sleeps when no log is due for cleaning.", minimum=0),
    ConfigKey("log.cleaner.io.max.bytes.per.second", "double", float("inf"),
              "Bytes a second the cleaner may read plus write (inf: no limit).", minimum=0),
    ConfigKey("log.cleaner.dedupe.buffer.size", "long", 134217728,
              "Memory for the cleaner's offset map: it holds up to this / 24 * "
              "log.cleaner.io.buffer.load.factor keys a pass (Kafka's count; a Python dict "
              "takes some five times the memory per key).", minimum=1),
    ConfigKey("log.cleaner.io.buffer.load.factor", "double", 0.9,
              "How full the offset map may get.", minimum=0),
    ConfigKey("log.cleaner.io.buffer.size", "int", 524288,
              "The cleaner reads and writes segments in chunks of this size.", minimum=1),
    ConfigKey("log.cleaner.delete.retention.ms", "long", 86400000,
              "How long a tombstone (a null value) stays once the records after it are clean; "
              "topic-level delete.retention.ms.", minimum=0),
    ConfigKey("log.cleaner.min.cleanable.ratio", "double", 0.5,
              "A compacted log is cleaned once its dirty (not yet cleaned) bytes exceed this share "
              "of the log; topic-level min.cleanable.dirty.ratio.", minimum=0),
    ConfigKey("log.cleaner.min.compaction.lag.ms", "long", 0,
              "Records younger than this are not compacted; topic-level min.compaction.lag.ms.",
              minimum=0),
    ConfigKey("log.message.timestamp.type", "enum", "CreateTime",
              "CreateTime keeps the producer's timestamps, LogAppendTime stamps the broker's "
              "clock; topic-level message.timestamp.type.",
              choices=("CreateTime", "LogAppendTime")),
    ConfigKey("log.message.format.version", "string", "3.0",
              "Record format new topics are written in: 0.11.0 and later (1.0 ... 3.x) store "
              "magic 2 record batches (headers, zstd, producer ids), 0.10.2 and older "
              "the magic 0/1 log of Kafka 0.10; topic-level message.format.version. A log "
              "holding magic 0/1 data with no topic override keeps that format."),
    ConfigKey("compression.type", "enum", "producer",
              "Codec topics store records in: producer keeps each producer's, "
              "uncompressed/gzip/snappy/lz4/zstd recompress what arrives in another (magic 0/1 "
              "topics too, zstd there refused: UNSUPPORTED_COMPRESSION_TYPE); topic-level "
              "compression.type. A Fetch below v10 of a zstd topic is refused "
              "(UNSUPPORTED_COMPRESSION_TYPE).",
              choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    ConfigKey("log.message.timestamp.difference.max.ms", "long", INT64_MAX,
              "Under CreateTime, refuse a message set with INVALID_TIMESTAMP when a timestamp "
              "is further than this from the broker's clock; topic-level "
              "message.timestamp.difference.max.ms.", minimum=0),
    ConfigKey("authorizer.class.name", "string", _UNSET,
              "Set (e.g. kafka.security.auth.SimpleAclAuthorizer, the only authorizer there is), "
              "requests are checked against the ACLs of `minikafka acls`; unset, everyone may do "
              "everything."),
    ConfigKey("super.users", "string", _UNSET,
              "Principals the authorizer lets do anything, separated by ';' (User:admin;User:CN=ops,O=Example)."),
    ConfigKey("allow.everyone.if.no.acl.found", "bool", False,
              "With the authorizer on, a resource without any ACL is open to everyone (else to super users only)."),
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
    ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", "long", 9223372036854775807,
              "Bytes per second that moving replicas between this broker's log dirs "
              "(AlterReplicaLogDirs) copies at most, all moves together.", minimum=1),
    ConfigKey("leader.replication.throttled.rate", "long", 9223372036854775807,
              "Bytes per second this broker, as leader, serves at most to followers outside the ISR "
              "of the partitions whose replica here their topic's leader.replication.throttled.replicas "
              "lists (KIP-73; dynamic, as kafka-reassign-partitions.sh --throttle sets it).", minimum=0),
    ConfigKey("follower.replication.throttled.rate", "long", 9223372036854775807,
              "Bytes per second this broker, as follower, fetches at most for its replicas outside the "
              "ISR that their topic's follower.replication.throttled.replicas lists (KIP-73; dynamic).",
              minimum=0),
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
    ConfigKey("minikafka.test.broker.dial", "string", _UNSET,
              "For tests only: `ID=HOST:PORT,...` makes this broker connect to broker ID at "
              "HOST:PORT instead of its registered address (the cluster fixture's per-link "
              "proxies, which it can cut to partition the network). Unset in production."),
)

_GROUP_KEY_DESCRIPTIONS = {
    "group.min.session.timeout.ms": "Smallest session timeout a consumer may ask for.",
    "group.max.session.timeout.ms": "Largest session timeout a consumer may ask for.",
    "group.initial.rebalance.delay.ms":
        "How long the coordinator waits for more members before the first rebalance of an "
        "empty group (Kafka's default is 3000; a test broker wants a lone consumer assigned at once).",
    "offsets.topic.num.partitions": "Partitions of __consumer_offsets when it is created.",
    "offsets.topic.segment.bytes": "Segment size of __consumer_offsets.",
    "offsets.topic.replication.factor":
        "In a cluster, replicas of each __consumer_offsets partition; the topic is created once this "
        "many brokers are live (COORDINATOR_NOT_AVAILABLE until then). A single broker ignores it.",
    "offsets.commit.required.acks":
        "In a cluster, -1 answers an OffsetCommit once every in-sync replica has it, 1 once the leader has.",
    "offsets.commit.timeout.ms":
        "In a cluster, how long an OffsetCommit waits for offsets.commit.required.acks "
        "(then COORDINATOR_NOT_AVAILABLE).",
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

# The transaction coordinator's keys (broker.transactions), Kafka's names and defaults but for
# the partition count, small as __consumer_offsets' here.
CONFIG_KEYS = CONFIG_KEYS + (
    ConfigKey("transaction.state.log.num.partitions", "int", 4,
              "Partitions of __transaction_state when it is created (Kafka: 50).", minimum=1),
    ConfigKey("transaction.state.log.segment.bytes", "int", 104857600,
              "Segment size of __transaction_state.", minimum=1024),
    ConfigKey("transaction.state.log.snapshot.interval.events", "int", 10000,
              "Snapshot a __transaction_state partition after this many state changes since the last "
              "snapshot (minikafka; in a cluster every replica does, from the committed log).", minimum=1),
    ConfigKey("transaction.state.log.replication.factor", "int", 3,
              "In a cluster, replicas of each __transaction_state partition. A single broker ignores it.",
              minimum=1),
    ConfigKey("transaction.state.log.min.isr", "int", 2,
              "In a cluster, min.insync.replicas of __transaction_state. A single broker ignores it.",
              minimum=1),
    ConfigKey("request.timeout.ms", "int", 30000,
              "In a cluster, how long the transaction coordinator waits for a state change or a "
              "marker to be replicated (acks=all) before it answers or retries.", minimum=1),
    ConfigKey("transaction.max.timeout.ms", "int", 900000,
              "Largest transaction timeout a producer may ask for (larger: INVALID_TRANSACTION_TIMEOUT).",
              minimum=1),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
              "How often the coordinator aborts transactions open longer than their timeout.", minimum=1),
    ConfigKey("transactional.id.expiration.ms", "int", 604800000,
              "A transactional id without a transaction for this long is forgotten.", minimum=1),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
              "How often the coordinator looks for expired transactional ids.", minimum=1),
)

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
    if key.type == "double":
        try:
            number = float(text)
        except ValueError:
            raise ConfigError(f"{key.name}: {raw!r} is not a number") from None
        if number != number or (key.minimum is not None and number < key.minimum):
            raise ConfigError(f"{key.name}: {number} is below the minimum {key.minimum}")
        return number
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
    import javaproperties  # ~13 ms of imports (xml, email, urllib), for a --config file only

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


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_LISTENER = re.compile(r"(?:(?P<name>[A-Za-z0-9_]+)://)?(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>\d+)")


class Listener(NamedTuple):
    """One listener: where it binds (``host`` None means every interface), its name and the
    security protocol the name maps to."""

    host: str | None
    port: int
    name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def parse(cls, name: str, text: str, protocol_map: Mapping[str, str] | None = None) -> "Listener":
        """The first of ``parse_all`` (what --host/--port change)."""
        return parse_listeners(name, text, protocol_map)[0]

    def __str__(self) -> str:
        return f"{self.name}://{host_port(self.host or '', self.port)}"


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: NAME:PROTOCOL pairs."""
    result = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL with "
                              f"PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        result[name] = protocol
    return result


def parse_listeners(key: str, text: str, protocol_map: Mapping[str, str] | None = None) -> list[Listener]:
    """Kafka's listener list, ``NAME://HOST:PORT,...``; a missing NAME:// means PLAINTEXT."""
    protocols = parse_protocol_map(CONFIG_KEYS_BY_NAME["listener.security.protocol.map"].default) \
        if protocol_map is None else protocol_map
    listeners: list[Listener] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        match = _LISTENER.fullmatch(entry)
        if match is None:
            raise ConfigError(f"{key}: {entry!r} is not NAME://HOST:PORT")
        listener_name = (match.group("name") or "PLAINTEXT").upper()
        protocol = protocols.get(listener_name)
        if protocol is None:
            raise ConfigError(f"{key}: listener {listener_name} is not in listener.security.protocol.map "
                              f"({', '.join(protocols)})")
        port = int(match.group("port"))
        if port > 65535:
            raise ConfigError(f"{key}: port {port} is out of range")
        if any(other.name == listener_name for other in listeners):
            raise ConfigError(f"{key}: listener {listener_name} is listed twice")
        listeners.append(Listener(match.group("host").strip("[]") or None, port, listener_name, protocol))
    if not listeners:
        raise ConfigError(f"{key}: no listener in {text!r}")
    return listeners


def parse_broker_dial(text: str) -> dict[int, tuple[str, int]]:
    """``minikafka.test.broker.dial``: ``"2=127.0.0.1:40001,3=127.0.0.1:40002"`` -> {2: (host, port), ...}."""
    dial: dict[int, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        broker_id, sep, address = item.partition("=")
        host, colon, port = address.rpartition(":")
        if not (sep and colon and host and broker_id.strip().isdigit() and port.isdigit()
                and 0 < int(port) <= 65535):
            raise ConfigError(f"minikafka.test.broker.dial: {item!r} is not BROKER_ID=HOST:PORT")
        dial[int(broker_id)] = (host.strip("[]"), int(port))
    return dial


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as clients' bootstrap.servers take it: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


logger = logging.getLogger(__name__)

# Kafka broker settings with no meaning for one Python process on one listener (threads,
# socket buffers, ZooKeeper/KRaft quorum, replication factors, security). They
# are accepted with a warning so a server.properties written for Kafka starts as it is; any
# other unknown key is a mistake and is refused.
IGNORED_KAFKA_KEYS = frozenset({
    "num.network.threads", "num.io.threads", "num.recovery.threads.per.data.dir",
    "num.replica.fetchers", "background.threads", "queued.max.requests",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "zookeeper.set.acl", "process.roles", "node.id", "controller.quorum.voters",
    "controller.quorum.bootstrap.servers", "controller.listener.names",
    "inter.broker.protocol.version",
    "delete.topic.enable", "auto.leader.rebalance.enable",
    "log.cleanup.policy",
    "metric.reporters",
    "offsets.topic.compression.codec", "offsets.load.buffer.size",
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
        # listener.name.<listener>.<key>: Kafka's per-listener security settings, checked
        # against the table under the plain key once the listeners are known.
        self._per_listener: dict[str, dict[str, str]] = {}
        for name, raw in (properties or {}).items():
            key = CONFIG_KEYS_BY_NAME.get(name)
            if key is None and name.startswith("listener.name."):
                listener_name, _, setting = name[len("listener.name."):].partition(".")
                self._per_listener.setdefault(listener_name.upper(), {})[setting] = str(raw)
                self._explicit.add(name)
                continue
            if key is None:
                if name in IGNORED_KAFKA_KEYS:
                    logger.warning("config key %r has no effect in minikafka; ignored", name)
                    continue
                import difflib

                close = difflib.get_close_matches(name, CONFIG_KEYS_BY_NAME, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"unknown config key {name!r}{hint}")
            values[name] = parse_value(key, str(raw))
            self._explicit.add(name)
        self._values = values
        # Parse the derived settings now so a bad value fails at startup, not later.
        protocol_map = parse_protocol_map(values["listener.security.protocol.map"])
        self.listeners = parse_listeners("listeners", values["listeners"], protocol_map)
        self.listener = self.listeners[0]
        self.advertised_listeners = self._advertised_listeners()
        self._check_security()
        if values["minikafka.export.master"] and not values["minikafka.export.dir"]:
            # Without an export dir there is no exporter to run on that master.
            raise ConfigError("minikafka.export.master: set without minikafka.export.dir "
                              "(serve --export-to DIR), so nothing would be exported")
        if (values["minikafka.test.control.port"] or 0) > 65535:
            raise ConfigError(f"minikafka.test.control.port: {values['minikafka.test.control.port']} "
                              "is out of range 0-65535")
        self.test_broker_dial = parse_broker_dial(values["minikafka.test.broker.dial"] or "")
        try:
            message_format_magic(values["log.message.format.version"])
        except ValueError as exc:
            raise ConfigError(f"log.{exc}") from None
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
            protocol_map = parse_protocol_map(properties.get(
                "listener.security.protocol.map", CONFIG_KEYS_BY_NAME["listener.security.protocol.map"].default))
            listeners = parse_listeners("listeners", properties.get(
                "listeners", CONFIG_KEYS_BY_NAME["listeners"].default), protocol_map)
            current = listeners[0]
            new_host = current.host if host is None else (host or None)
            new_port = current.port if port is None else port
            listeners[0] = Listener(new_host, new_port, current.name, current.security_protocol)
            properties["listeners"] = ",".join(map(str, listeners))
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

    # Dynamic settings over the static ones (with_dynamic): "broker" (this broker's own) and
    # "default" (the cluster's), each name -> text as given.
    dynamic_layers: Mapping[str, Mapping[str, str]] = {}
    _static: "BrokerConfig | None" = None

    def static_value(self, name: str) -> Any:
        """``get(name)`` of the configuration as started, before dynamic settings."""
        return (self._static or self).get(name)

    def with_dynamic(self, default: Mapping[str, str], broker: Mapping[str, str]) -> "BrokerConfig":
        """This configuration with dynamic settings over it, as Kafka's DynamicBrokerConfig
        layers them: each name takes this broker's own value, else the cluster default, else
        the static one. ConfigError names a value that does not parse."""
        layered = copy.copy(self)
        layered._values = dict(self._values)
        for settings in (default, broker):
            for name, raw in settings.items():
                layered._values[name] = parse_value(CONFIG_KEYS_BY_NAME[name], str(raw))
        layered.dynamic_layers = {"broker": dict(broker), "default": dict(default)}
        layered._static = self._static or self
        layered.log_config()
        layered.advertised_listeners = layered._advertised_listeners()
        return layered

    def _advertised_listeners(self) -> dict[str, Listener]:
        """advertised.listeners by listener name; ConfigError for a name not in ``listeners``."""
        advertised = self._values["advertised.listeners"]
        protocol_map = parse_protocol_map(self._values["listener.security.protocol.map"])
        found: dict[str, Listener] = {}
        for entry in parse_listeners("advertised.listeners", advertised, protocol_map) if advertised else ():
            if entry.host is None:
                raise ConfigError("advertised.listeners: a host is required")
            if not any(listener.name == entry.name for listener in self.listeners):
                raise ConfigError(f"advertised.listeners: {entry.name} is not one of the listeners")
            found[entry.name] = entry
        return found

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
    def replica_alter_log_dirs_io_max_bytes_per_second(self) -> int | None:
        """None for Kafka's default, Long.MaxValue: no limit."""
        value = self._values["replica.alter.log.dirs.io.max.bytes.per.second"]
        return None if value >= 2**63 - 1 else value

    @property
    def leader_replication_throttled_rate(self) -> int:
        return self._values["leader.replication.throttled.rate"]

    @property
    def follower_replication_throttled_rate(self) -> int:
        return self._values["follower.replication.throttled.rate"]

    @property
    def retention_check_interval_ms(self) -> int:
        return self._values["log.retention.check.interval.ms"]

    @property
    def producer_id_expiration_check_interval_ms(self) -> int:
        return self._values["producer.id.expiration.check.interval.ms"]

    @property
    def flush_scheduler_interval_ms(self) -> int:
        return self._values["log.flush.scheduler.interval.ms"]

    @property
    def cleaner_enabled(self) -> bool:
        return self._values["log.cleaner.enable"]

    @property
    def cleaner_backoff_ms(self) -> int:
        return self._values["log.cleaner.backoff.ms"]

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

    def _check_security(self) -> None:
        for listener_name, settings in self._per_listener.items():
            if not any(listener.name == listener_name for listener in self.listeners):
                raise ConfigError(f"listener.name.{listener_name.lower()}: no listener named {listener_name}")
            for setting, raw in settings.items():
                mechanism, _, rest = setting.partition(".")
                if rest == "sasl.jaas.config" and mechanism.upper() in SASL_MECHANISMS:
                    continue
                key = CONFIG_KEYS_BY_NAME.get(setting)
                if key is None or not setting.startswith(("ssl.", "sasl.")):
                    raise ConfigError(f"listener.name.{listener_name.lower()}.{setting}: not a "
                                      "per-listener security setting")
                settings[setting] = parse_value(key, raw)
        for listener in self.listeners:
            if listener.uses_sasl:
                for mechanism in self.listener_setting(listener, "sasl.enabled.mechanisms"):
                    if mechanism not in SASL_MECHANISMS:
                        raise ConfigError(f"sasl.enabled.mechanisms: {mechanism} is not supported "
                                          f"(only {', '.join(SASL_MECHANISMS)})")
            if listener.uses_tls and not self.listener_setting(listener, "ssl.keystore.location"):
                raise ConfigError(f"ssl.keystore.location: listener {listener.name} uses TLS and "
                                  "needs a PEM key and certificate")
        self._check_inter_broker_listener()  # fails now rather than when the cluster forms

    def listener_setting(self, listener: Listener, name: str, mechanism: str | None = None) -> Any:
        """A security setting as ``listener`` sees it: ``listener.name.<l>.<mech>.<name>``
        (for sasl.jaas.config), then ``listener.name.<l>.<name>``, then ``<name>``."""
        settings = self._per_listener.get(listener.name, {})
        if mechanism is not None and f"{mechanism.lower()}.{name}" in settings:
            return settings[f"{mechanism.lower()}.{name}"]
        if name in settings:
            return settings[name]
        return self._values[name]

    def inter_broker_listener(self) -> Listener:
        """The listener other brokers reach this one on (inter.broker.listener.name, else the
        one named after security.inter.broker.protocol)."""
        wanted = self._values["inter.broker.listener.name"] or self._values["security.inter.broker.protocol"]
        for listener in self.listeners:
            if listener.name == wanted.upper():
                return listener
        if self.zookeeper_connect is None:
            return self.listener  # a single broker has no peers to talk to
        key = "inter.broker.listener.name" if self._values["inter.broker.listener.name"] else \
            "security.inter.broker.protocol"
        raise ConfigError(f"{key}: no listener named {wanted} in listeners")

    def _check_inter_broker_listener(self) -> None:
        listener = self.inter_broker_listener()
        if self.zookeeper_connect is not None and (listener.uses_tls or listener.uses_sasl):
            from minikafka.broker.security.inter_broker import channel_security

            channel_security(self)  # the broker's own credentials and certificates load

    def advertised_address(self, bound_port: int, listener: Listener | None = None) -> tuple[str, int]:
        """The (host, port) Metadata reports for ``listener`` (default the first):
        advertised.listeners if it names it, else the listener, with the port actually bound
        when the configured one is 0, and this machine's name when the listener binds every
        interface."""
        listener = listener or self.listener
        listener = self.advertised_listeners.get(listener.name, listener)
        host = listener.host
        if host is None or host in ("0.0.0.0", "::"):
            import socket

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
            producer_id_expiration_ms=v["producer.id.expiration.ms"],
            message_format_version=v["log.message.format.version"],
            compression_type=v["compression.type"],
            delete_retention_ms=v["log.cleaner.delete.retention.ms"],
            min_compaction_lag_ms=v["log.cleaner.min.compaction.lag.ms"],
            min_cleanable_dirty_ratio=v["log.cleaner.min.cleanable.ratio"],
        )

    def cleaner_config(self) -> CleanerConfig:
        """The log cleaner's settings (log.cleaner.*)."""
        v = self._values
        return CleanerConfig(
            dedupe_buffer_size=v["log.cleaner.dedupe.buffer.size"],
            dedupe_buffer_load_factor=v["log.cleaner.io.buffer.load.factor"],
            io_buffer_size=v["log.cleaner.io.buffer.size"],
            max_io_bytes_per_second=v["log.cleaner.io.max.bytes.per.second"],
            threads=v["log.cleaner.threads"],
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
