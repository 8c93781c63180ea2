"""Kafka 0.10.2's cluster state in ZooKeeper: its paths and its JSON, byte for byte in form.

Kafka-era tools (``kafka-topics.sh --zookeeper``, zkCli, Burrow, kafka-manager) read these
nodes, so a minikafka cluster looks to them like a Kafka cluster. The layout follows
``kafka.utils.ZkUtils`` and friends at 0.10.2:

==========================================================  ===================================
/cluster/id                                                 {"version":"1","id":"<id>"}
/brokers/ids/<id>  (ephemeral)                              Broker.toJson, version 4
/controller  (ephemeral)                                    {"version":1,"brokerid":N,"timestamp":"<ms>"}
/controller_epoch                                           plain text integer, first epoch 1
/brokers/topics/<t>                                         {"version":3,"partitions":{"0":[1,2]},...,"topic_id":"<id>"}
/brokers/topics/<t>/partitions/<p>/state                    {"controller_epoch":E,"leader":L,"version":1,"leader_epoch":LE,"isr":[..]}
/config/topics/<t>                                          {"version":1,"config":{"k":"v"}}
/config/users/<u>                                           {"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=N"}}
/config/changes/config_change_<seq>                         {"version":1,"entity_type":"topics","entity_name":"<t>"}
/kafka-acl/<Topic|Group|Cluster>/<name>                     {"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Read","host":"*"}]}
/kafka-acl-changes/acl_changes_<seq>                        "<Type>:<name>" (a change notification)
/kafka-acl-extended/prefixed/<Type>/<prefix>                as /kafka-acl (Kafka >= 2.0, KIP-290)
/kafka-acl-extended-changes/acl_changes_<seq>               {"version":1,"resourceType":"TOPIC","name":"<prefix>","patternType":"PREFIXED"}
/admin/delete_topics/<t>                                    empty
/isr_change_notification/isr_change_<seq>                   {"version":1,"partitions":[{"topic":t,"partition":p}]}
/admin/preferred_replica_election                           {"version":1,"partitions":[{"topic":t,"partition":p}]}
==========================================================  ===================================

Topic znodes are Kafka 2.8's (KIP-516): version 3 with the topic's id, which every broker's
replicas and Metadata answers take from there (0.10.2's readers only look at ``partitions``);
a version 1 node, without an id, gets one from the controller, as Kafka 2.8's does.

One extension of ours: an entry of ``/admin/preferred_replica_election`` may name the replica
to elect, ``{"topic":t,"partition":p,"minikafka.leader":id}``, which the controller treats as
the preferred one for that election only (the assignment's order in ZooKeeper is unchanged,
so a later plain preferred election moves leadership back). Kafka ignores the field.

The ``encode_*`` / ``decode_*`` functions are pure (bytes in, values out); ``KafkaZk`` puts
them on a ``ZkClient``. JSON is compact like Kafka's ``Json.encode`` (no spaces); Kafka's
parser reads numbers as Int, so every number here is an integer.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterable

import trio

from minikafka.replication.zookeeper import (
    BadVersion, NodeExists, NoNode, ZkClient, ZooKeeperError, parse_json_object,
)
from minikafka.storage.partition_metadata import parse_topic_id

__all__ = [
    "BrokerInfo", "LeaderIsr", "KafkaZk", "MalformedZnode", "new_cluster_id",
    "CLUSTER_ID_PATH", "BROKER_IDS_PATH", "BROKER_TOPICS_PATH", "CONTROLLER_PATH",
    "CONTROLLER_EPOCH_PATH", "TOPIC_CONFIG_PATH", "DELETE_TOPICS_PATH",
    "ISR_CHANGE_NOTIFICATION_PATH", "PREFERRED_REPLICA_ELECTION_PATH", "PERSISTENT_PATHS", "INITIAL_CONTROLLER_EPOCH",
    "broker_path", "topic_path", "partition_state_path", "topic_config_path", "delete_topic_path",
    "encode_broker", "decode_broker", "encode_controller", "decode_controller",
    "encode_controller_epoch", "decode_controller_epoch", "encode_cluster_id", "decode_cluster_id",
    "encode_topic_assignment", "decode_topic_assignment", "decode_topic_reassignment", "decode_topic_id",
    "encode_topic_config",
    "decode_topic_config", "encode_leader_isr", "decode_leader_isr", "encode_isr_change",
    "decode_isr_change", "encode_preferred_replica_election", "decode_preferred_replica_election",
]

CLUSTER_ID_PATH = "/cluster/id"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
TOPIC_CONFIG_PATH = "/config/topics"
USER_CONFIG_PATH = "/config/users"
BROKER_CONFIG_PATH = "/config/brokers"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ACL_PATH = "/kafka-acl"
ACL_CHANGES_PATH = "/kafka-acl-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
PREFIXED_ACL_PATH = "/kafka-acl-extended/prefixed"
EXTENDED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"
# Kafka's ResourceType enum names, which ExtendedAclChangeEvent carries.
_RESOURCE_TYPE_ENUM = {"Topic": "TOPIC", "Group": "GROUP", "Cluster": "CLUSTER", "TransactionalId": "TRANSACTIONAL_ID"}
DELETE_TOPICS_PATH = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
PREFERRED_LEADER_FIELD = "minikafka.leader"
_ISR_CHANGE_PREFIX = "isr_change_"

# ZkUtils.persistentZkPaths: what a 0.10.2 broker makes sure of at start-up.
PERSISTENT_PATHS = (
    "/consumers", BROKER_IDS_PATH, BROKER_TOPICS_PATH, "/config/changes", TOPIC_CONFIG_PATH,
    "/config/clients", DELETE_TOPICS_PATH, "/brokers/seqid", ISR_CHANGE_NOTIFICATION_PATH,
)

# KafkaController.InitialControllerEpoch: the first controller writes 1.
INITIAL_CONTROLLER_EPOCH = 1

_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# EndPoint.uriParseExp: LISTENER://host:port, an IPv6 host in brackets, the host may be empty.
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


class MalformedZnode(ZooKeeperError, ValueError):
    """A node holds data that is not Kafka's format for that node."""


@dataclass(frozen=True)
class BrokerInfo:
    """A broker's registration. ``host``/``port`` are the PLAINTEXT endpoint old clients use
    (Kafka writes host null, port -1 for a broker without one: pass "" and -1); ``endpoints``
    maps listener name to (host, port)."""

    id: int
    host: str
    port: int
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)
    rack: str | None = None
    # listener name -> security protocol; a listener missing here is named after its protocol
    # (or is PLAINTEXT), as in registrations older than listener_security_protocol_map.
    protocols: dict[str, str] = field(default_factory=dict, compare=False)

    def protocol(self, listener: str) -> str:
        return self.protocols.get(listener) or (listener if listener in _SECURITY_PROTOCOLS else "PLAINTEXT")

    def address(self, listener: str) -> tuple[str, int]:
        """Where this broker's ``listener`` is reached (its v0 host/port without one)."""
        return self.endpoints.get(listener, (self.host, self.port))


@dataclass(frozen=True)
class LeaderIsr:
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int


def new_cluster_id() -> str:
    """A fresh cluster id in Kafka's form (CoreUtils.generateUuidAsBase64): 22 url-safe chars."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


# -- paths ------------------------------------------------------------------------------------

def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS_PATH}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS_PATH}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIG_PATH}/{topic}"


def broker_config_path(entity: str) -> str:
    """A broker's dynamic configs (its id), or the cluster's defaults (``<default>``): Kafka >= 1.1."""
    return f"{BROKER_CONFIG_PATH}/{entity}"


def user_config_path(user: str) -> str:
    return f"{USER_CONFIG_PATH}/{user}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


# -- JSON codecs (pure) -------------------------------------------------------------------------

def _acl_path(resource_type: str, name: str, prefixed: bool) -> str:
    return f"{PREFIXED_ACL_PATH if prefixed else ACL_PATH}/{resource_type}/{name}"


def literal_acl_change(data: bytes) -> tuple[str, str]:
    """The ``(resource type, name)`` of the literal pattern a ``/kafka-acl-changes`` notification
    (``<Type>:<name>``) names."""
    resource_type, _, name = data.decode("utf-8", "replace").partition(":")
    return resource_type, name


def extended_acl_change(data: bytes) -> tuple[str, str]:
    """The ``(resource type, name)`` of the prefixed pattern an ``/kafka-acl-extended-changes``
    event names; MalformedZnode if none."""
    try:
        event = json.loads(data)
        resource_type = {enum: name for name, enum in _RESOURCE_TYPE_ENUM.items()}.get(event["resourceType"],
                                                                                      event["resourceType"])
        if event["patternType"] != "PREFIXED":
            raise ValueError(f"pattern type {event['patternType']!r}")
        return resource_type, event["name"]
    except (ValueError, KeyError, TypeError) as exc:
        raise MalformedZnode(f"ACL change event {data!r}: {exc}") from None


def _encode(value) -> bytes:
    # Kafka's Json.encode writes non-ASCII as is (in UTF-8) and no whitespace.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _object(raw: bytes, what: str) -> dict:
    try:
        return parse_json_object(raw, what)
    except ZooKeeperError as exc:
        raise MalformedZnode(str(exc)) from None


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedZnode(f"{what} is {value!r}, not an integer")
    return value


def _int_list(value, what: str) -> list[int]:
    if not isinstance(value, list):
        raise MalformedZnode(f"{what} is {value!r}, not a list of integers")
    return [_int(item, what) for item in value]


def _field(obj: dict, key: str, what: str):
    try:
        return obj[key]
    except KeyError:
        raise MalformedZnode(f"{what} has no {key!r}: {obj!r}") from None


def _format_endpoint(listener: str, host: str | None, port: int) -> str:
    # Utils.formatAddress: an IPv6 literal goes in brackets; a missing host leaves ":port".
    if not host:
        return f"{listener}://:{port}"
    return f"{listener}://[{host}]:{port}" if ":" in host else f"{listener}://{host}:{port}"


def _parse_endpoint(text, what: str) -> tuple[str, str, int]:
    match = _ENDPOINT.match(text) if isinstance(text, str) else None
    if match is None:
        raise MalformedZnode(f"{what}: cannot parse endpoint {text!r}")
    return match.group(1), match.group(2), int(match.group(3))


def encode_broker(info: BrokerInfo, timestamp_ms: int | None = None) -> bytes:
    """Broker.toJson version 4, key order as a 0.10.2 broker writes it.

    ``listener_security_protocol_map`` comes from ``info.protocols`` (a listener named after a
    security protocol uses that protocol, any other PLAINTEXT).
    """
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    registration = {
        "listener_security_protocol_map": {
            name: info.protocol(name) for name in info.endpoints},
        "endpoints": [_format_endpoint(name, host, port) for name, (host, port) in info.endpoints.items()],
        "jmx_port": -1,
        "host": info.host or None,
        "timestamp": str(timestamp_ms),
        "port": info.port,
        "version": 4,
    }
    if info.rack is not None:
        registration["rack"] = info.rack
    return _encode(registration)


def decode_broker(broker_id: int, raw: bytes) -> BrokerInfo:
    """Any registration version Kafka 0.10.2 reads (1 to 4)."""
    what = broker_path(broker_id)
    obj = _object(raw, what)
    version = _int(_field(obj, "version", what), f"{what} version")
    host = obj.get("host")
    port = obj.get("port", -1)
    if version < 1:
        raise MalformedZnode(f"{what}: unsupported registration version {version}")
    if version == 1:
        if not isinstance(host, str):
            raise MalformedZnode(f"{what}: version 1 registration without a host: {obj!r}")
        endpoints = {"PLAINTEXT": (host, _int(port, f"{what} port"))}
    else:
        listed = _field(obj, "endpoints", what)
        if not isinstance(listed, list):
            raise MalformedZnode(f"{what}: endpoints is {listed!r}, not a list")
        endpoints = {}
        for text in listed:
            name, ep_host, ep_port = _parse_endpoint(text, what)
            endpoints[name] = (ep_host, ep_port)
    rack = obj.get("rack")
    if not isinstance(host, str) or not host:
        # A broker without a PLAINTEXT listener writes host null, port -1 (KafkaHealthcheck).
        first = next(iter(endpoints.values()), ("", -1))
        host, port = first
    protocols = obj.get("listener_security_protocol_map")
    protocols = {str(k): str(v) for k, v in protocols.items()} if isinstance(protocols, dict) else {}
    return BrokerInfo(broker_id, host, _int(port, f"{what} port"), endpoints,
                      rack if isinstance(rack, str) else None, protocols)


def encode_controller(broker_id: int, timestamp_ms: int | None = None) -> bytes:
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    return _encode({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(raw: bytes) -> int:
    """The controller's broker id; like KafkaController.parseControllerId, also the bare
    integer that 0.8.1 brokers wrote."""
    text = raw.decode("utf-8", "replace").strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    obj = _object(raw, CONTROLLER_PATH)
    return _int(_field(obj, "brokerid", CONTROLLER_PATH), f"{CONTROLLER_PATH} brokerid")


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(raw: bytes) -> int:
    text = raw.decode("ascii", "replace").strip()
    if not re.fullmatch(r"-?\d+", text):
        raise MalformedZnode(f"{CONTROLLER_EPOCH_PATH} holds {raw[:60]!r}, not an integer")
    return int(text)


def encode_cluster_id(cluster_id: str) -> bytes:
    # Kafka writes this version as a string, unlike every other node's.
    return _encode({"version": "1", "id": cluster_id})


def decode_cluster_id(raw: bytes) -> str:
    value = _field(_object(raw, CLUSTER_ID_PATH), "id", CLUSTER_ID_PATH)
    if not isinstance(value, str):
        raise MalformedZnode(f"{CLUSTER_ID_PATH} id is {value!r}, not a string")
    return value


def encode_topic_assignment(assignment: dict[int, list[int]], topic_id: str | None = None,
                            adding: dict[int, list[int]] | None = None,
                            removing: dict[int, list[int]] | None = None) -> bytes:
    """Kafka 2.8's TopicZNode.encode: each partition's replicas and, while a reassignment runs
    (KIP-455), the replicas it is adding and removing (the partition's replicas are then the
    target's and the origin's together)."""
    partitions = {str(partition): list(replicas) for partition, replicas in sorted(assignment.items())}
    if topic_id is None and not adding and not removing:
        return _encode({"version": 1, "partitions": partitions})
    value = {"version": 3 if topic_id is not None else 2, "partitions": partitions,
             "adding_replicas": {str(p): list(r) for p, r in sorted((adding or {}).items())},
             "removing_replicas": {str(p): list(r) for p, r in sorted((removing or {}).items())}}
    if topic_id is not None:
        value["topic_id"] = topic_id
    return _encode(value)


def decode_topic_reassignment(topic: str, raw: bytes) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """The replicas being added and removed per partition, as a topic znode of version 2+ holds
    them; empty for none (and for a version 1 node)."""
    what = topic_path(topic)
    value = _object(raw, what)
    adding, removing = (_replicas_by_partition(value.get(name) or {}, f"{what} {name}")
                        for name in ("adding_replicas", "removing_replicas"))
    return ({p: r for p, r in adding.items() if r}, {p: r for p, r in removing.items() if r})


def decode_topic_id(topic: str, raw: bytes) -> str | None:
    """The topic id a topic znode holds; None for a node from before topic ids."""
    what = topic_path(topic)
    value = _object(raw, what).get("topic_id")
    if value is None:
        return None
    try:
        return parse_topic_id(value if isinstance(value, str) else "")
    except ValueError as exc:
        raise MalformedZnode(f"{what}: {exc}") from None


def decode_topic_assignment(topic: str, raw: bytes) -> dict[int, list[int]]:
    what = topic_path(topic)
    return _replicas_by_partition(_field(_object(raw, what), "partitions", what), f"{what} partitions")


def _replicas_by_partition(entries, what: str) -> dict[int, list[int]]:
    """A topic znode's object of partition number -> broker ids, by partition."""
    if not isinstance(entries, dict):
        raise MalformedZnode(f"{what} is {entries!r}, not an object")
    by_partition = {}
    for key, replicas in entries.items():
        if not re.fullmatch(r"\d+", key):
            raise MalformedZnode(f"{what}: partition {key!r} is not a number")
        by_partition[int(key)] = _int_list(replicas, f"{what} {key}")
    return dict(sorted(by_partition.items()))


def encode_topic_config(config: dict[str, str]) -> bytes:
    return _encode({"version": 1, "config": dict(config)})


def decode_topic_config(topic: str, raw: bytes) -> dict[str, str]:
    return decode_config(topic_config_path(topic), raw)


def encode_config_change(entity_type: str, entity_name: str) -> bytes:
    """A ``/config/changes`` notification as Kafka 0.10.2's AdminUtils writes it."""
    return _encode({"version": 1, "entity_type": entity_type, "entity_name": entity_name})


def decode_config_change(raw: bytes) -> tuple[str, str]:
    """``(entity type, entity name)`` of a ``/config/changes`` notification: Kafka 0.10.2's
    version 1, or version 2 (``{"version":2,"entity_path":"topics/t"}``) of Kafka >= 0.11."""
    what = CONFIG_CHANGES_PATH
    node = _object(raw, what)
    if node.get("version") == 2:
        entity_type, _, entity_name = str(_field(node, "entity_path", what)).partition("/")
    else:
        entity_type, entity_name = _field(node, "entity_type", what), _field(node, "entity_name", what)
    if not isinstance(entity_type, str) or not isinstance(entity_name, str) or not entity_name:
        raise MalformedZnode(f"{what}: {node!r} names no entity")
    return entity_type, entity_name


def decode_config(what: str, raw: bytes) -> dict[str, str]:
    """Any entity's config node (topics, users): ``{"version":1,"config":{...}}``."""
    config = _field(_object(raw, what), "config", what)
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise MalformedZnode(f"{what}: config is {config!r}, not an object of strings")
    return dict(config)


def encode_leader_isr(state: LeaderIsr) -> bytes:
    # ZkUtils.leaderAndIsrZkData, in the order 0.10.2's Map writes it.
    return _encode({"controller_epoch": state.controller_epoch, "leader": state.leader,
                    "version": 1, "leader_epoch": state.leader_epoch, "isr": list(state.isr)})


def decode_leader_isr(topic: str, partition: int, raw: bytes) -> LeaderIsr:
    what = partition_state_path(topic, partition)
    obj = _object(raw, what)
    return LeaderIsr(
        leader=_int(_field(obj, "leader", what), f"{what} leader"),
        leader_epoch=_int(_field(obj, "leader_epoch", what), f"{what} leader_epoch"),
        isr=_int_list(_field(obj, "isr", what), f"{what} isr"),
        controller_epoch=_int(_field(obj, "controller_epoch", what), f"{what} controller_epoch"),
    )


def encode_isr_change(partitions: Iterable[tuple[str, int]]) -> bytes:
    unique = list(dict.fromkeys(partitions))
    return _encode({"version": 1, "partitions": [
        {"topic": topic, "partition": partition} for topic, partition in unique]})


def decode_isr_change(raw: bytes, what: str = ISR_CHANGE_NOTIFICATION_PATH) -> list[tuple[str, int]]:
    return [(entry["topic"], partition) for entry, partition in _partition_entries(raw, what)]


def _partition_entries(raw: bytes, what: str) -> list[tuple[dict, int]]:
    """The ``{"version":1,"partitions":[{"topic":t,"partition":p}, ...]}`` form: each entry
    (checked to have a topic name) with its partition number."""
    listed = _field(_object(raw, what), "partitions", what)
    if not isinstance(listed, list):
        raise MalformedZnode(f"{what}: partitions is {listed!r}, not a list")
    entries = []
    for entry in listed:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise MalformedZnode(f"{what}: bad partition entry {entry!r}")
        entries.append((entry, _int(entry.get("partition"), f"{what} partition")))
    return entries


def encode_preferred_replica_election(elections: Iterable[tuple[str, int, int | None]]) -> bytes:
    """``(topic, partition, leader)`` triples; ``leader`` None means the assignment's first
    replica (Kafka's meaning), an id is our extension (see the module docstring)."""
    entries = []
    for topic, partition, leader in elections:
        entry = {"topic": topic, "partition": partition}
        if leader is not None:
            entry[PREFERRED_LEADER_FIELD] = leader
        entries.append(entry)
    return _encode({"version": 1, "partitions": entries})


def decode_preferred_replica_election(raw: bytes) -> list[tuple[str, int, int | None]]:
    what = PREFERRED_REPLICA_ELECTION_PATH
    elections = []
    for entry, partition in _partition_entries(raw, what):
        leader = entry.get(PREFERRED_LEADER_FIELD)
        elections.append((entry["topic"], partition,
                          None if leader is None else _int(leader, f"{what} {PREFERRED_LEADER_FIELD}")))
    return elections


# -- on a live session ----------------------------------------------------------------------

class KafkaZk:
    """Kafka 0.10.2's reads and writes of cluster state, on one ZkClient session."""

    def __init__(self, zk: ZkClient):
        self.zk = zk
        #: ZooKeeper version of /controller_epoch after this broker's last increment
        self.controller_epoch_zk_version: int | None = None

    async def ensure_paths(self) -> None:
        """The persistent paths a 0.10.2 broker creates at start-up (ZkUtils.setupCommonPaths)."""
        for path in PERSISTENT_PATHS:
            await self.zk.ensure_path(path)

    # -- cluster id ---------------------------------------------------------------------------

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        """The cluster's id: ``proposed`` if this call created /cluster/id, else the stored one."""
        try:
            await self.zk.create(CLUSTER_ID_PATH, encode_cluster_id(proposed))
            return proposed
        except NodeExists:
            found = await self.zk.get(CLUSTER_ID_PATH)
            if found is None:
                raise ZooKeeperError(f"{CLUSTER_ID_PATH} was deleted while being read") from None
            return decode_cluster_id(found[0])

    # -- brokers ------------------------------------------------------------------------------

    async def register_broker(self, info: BrokerInfo, *, wait_ms: int) -> None:
        """Create this broker's ephemeral /brokers/ids/<id> (ZKCheckedEphemeral's rules).

        A node already there that this session owns is ours (a retried create): it is
        rewritten. One owned by another session that registered the same host(s) is taken as
        this broker's previous incarnation, killed before its session expired: wait up to
        ``wait_ms`` for ZooKeeper to expire it. Ports are not compared because a broker on
        port 0 comes back on another one; a wrong guess only costs the wait, since a live
        holder's node never goes. Any other holder: NodeExists at once.
        """
        path = broker_path(info.id)
        data = encode_broker(info)
        deadline = trio.current_time() + wait_ms / 1000
        while True:
            try:
                await self.zk.create(path, data, ephemeral=True)
                return
            except NodeExists:
                pass
            found = await self.zk.get_stat(path)
            if found is None:
                continue  # expired between our create and our read: create again
            raw, stat = found
            if stat.ephemeral_owner == self.zk.session_id:
                if raw != data:
                    await self.zk.set(path, data)
                return
            try:
                holder = decode_broker(info.id, raw)
            except MalformedZnode:
                holder = None
            holder_text = (f"{', '.join(_format_endpoint(n, h, p) for n, (h, p) in holder.endpoints.items())}"
                           if holder is not None else repr(raw[:80]))
            if holder is None or stat.ephemeral_owner == 0 or _hosts(holder) != _hosts(info):
                raise NodeExists(
                    f"broker id {info.id} is already registered at {path} by another broker "
                    f"({holder_text}): broker.id must be unique in the cluster")
            remaining = deadline - trio.current_time()
            if remaining <= 0 or not await self.zk.wait_deleted(path, remaining):
                raise NodeExists(
                    f"broker id {info.id} is still registered at {path} ({holder_text}) by session "
                    f"0x{stat.ephemeral_owner:x}, which did not expire within {wait_ms} ms; if that is "
                    f"this broker's previous run, wait for ZooKeeper's session timeout")

    async def live_brokers(self) -> dict[int, BrokerInfo]:
        return {broker_id: info for broker_id, (info, _) in (await self.broker_registrations()).items()}

    async def broker_registrations(self) -> dict[int, tuple[BrokerInfo, int]]:
        """Each registered broker with its registration's czxid (Kafka 2.x's broker epoch): a
        broker registered anew has another, one that rewrote its registration the same."""
        ids = sorted(int(child) for child in await self.zk.children(BROKER_IDS_PATH)
                     if re.fullmatch(r"-?\d+", child))
        registrations = await self.zk.get_stat_many([broker_path(broker_id) for broker_id in ids])
        # A node gone between listing and reading is a broker no longer live.
        return {broker_id: (decode_broker(broker_id, found[0]), found[1].czxid)
                for broker_id, found in zip(ids, registrations) if found is not None}

    # -- controller ---------------------------------------------------------------------------

    async def try_elect_controller(self, broker_id: int) -> bool:
        """Create the ephemeral /controller; True if this session holds it afterwards.

        A /controller left by this broker's earlier (dead) session does not count: the watch on
        /controller tells when it expires and the election can be tried again.
        """
        try:
            await self.zk.create(CONTROLLER_PATH, encode_controller(broker_id), ephemeral=True)
            return True
        except NodeExists:
            pass
        found = await self.zk.get_stat(CONTROLLER_PATH)
        if found is None:
            return await self.try_elect_controller(broker_id)
        raw, stat = found
        return stat.ephemeral_owner == self.zk.session_id and decode_controller(raw) == broker_id

    async def controller_id(self) -> int | None:
        found = await self.zk.get(CONTROLLER_PATH)
        return None if found is None else decode_controller(found[0])

    async def increment_controller_epoch(self) -> int:
        """Bump /controller_epoch by a conditional write (creating it at 1); returns the new
        epoch. Losing a race re-reads and tries again, so each caller gets its own epoch."""
        while True:
            current = await self.controller_epoch()
            if current is None:
                try:
                    await self.zk.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(INITIAL_CONTROLLER_EPOCH))
                except NodeExists:
                    continue
                self.controller_epoch_zk_version = 0
                return INITIAL_CONTROLLER_EPOCH
            epoch, version = current
            try:
                self.controller_epoch_zk_version = await self.zk.set(
                    CONTROLLER_EPOCH_PATH, encode_controller_epoch(epoch + 1), version)
            except (BadVersion, NoNode):
                continue
            return epoch + 1

    async def controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, ZooKeeper version of /controller_epoch), None before the first controller."""
        found = await self.zk.get(CONTROLLER_EPOCH_PATH)
        return None if found is None else (decode_controller_epoch(found[0]), found[1])

    # -- topics -------------------------------------------------------------------------------

    async def create_topic(self, topic: str, assignment: dict[int, list[int]], config: dict[str, str],
                           topic_id: str) -> None:
        """Write the topic's config, then its replica assignment and id (AdminUtils' order: brokers
        react to the assignment, and find the config already there). NodeExists if the topic
        exists; ValueError for an assignment Kafka would refuse. The topic name is the
        caller's to validate (Kafka's Topic.validate, and its '.'/'_' collision check)."""
        _check_assignment(topic, assignment)
        if await self.zk.exists(topic_path(topic)) is not None:
            raise NodeExists(f"topic {topic!r} already exists")
        config_path = topic_config_path(topic)
        config_data = encode_topic_config(config)
        # A config left by a deleted topic of the same name is overwritten, as Kafka does.
        try:
            await self.zk.set(config_path, config_data)
        except NoNode:
            try:
                await self.zk.create(config_path, config_data)
            except NodeExists:
                await self.zk.set(config_path, config_data)
        try:
            await self.zk.create(topic_path(topic), encode_topic_assignment(assignment, topic_id))
        except NodeExists:
            raise NodeExists(f"topic {topic!r} already exists") from None

    async def set_topic_assignment(self, topic: str, assignment: dict[int, list[int]]) -> None:
        """Replace an existing topic's replica assignment (AdminUtils.addPartitions writes the
        larger one), keeping its id; ValueError for an assignment Kafka would refuse, NoNode if
        no such topic."""
        _check_assignment(topic, assignment)
        await self.zk.set(topic_path(topic), encode_topic_assignment(assignment, await self.topic_id(topic)))

    async def topic_replicas(self, topic: str) -> tuple[dict[int, list[int]], dict[int, list[int]],
                                                        dict[int, list[int]]] | None:
        """(assignment, adding, removing) from one read of the topic znode; None: no such topic."""
        found = await self.zk.get(topic_path(topic))
        if found is None:
            return None
        return decode_topic_assignment(topic, found[0]), *decode_topic_reassignment(topic, found[0])

    async def topic_reassignment(self, topic: str) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """(adding, removing) replicas per partition of a reassignment in progress; empty for none."""
        found = await self.zk.get(topic_path(topic))
        return ({}, {}) if found is None else decode_topic_reassignment(topic, found[0])

    async def set_reassignment(self, topic: str, assignment: dict[int, list[int]],
                               adding: dict[int, list[int]], removing: dict[int, list[int]]) -> None:
        """The controller's write of a topic's replicas while it reassigns partitions (Kafka
        2.8's updateReplicaAssignmentForPartition): any replica counts (a reassignment may
        change a partition's replication factor), the topic's id kept."""
        await self.zk.set(topic_path(topic), encode_topic_assignment(assignment, await self.topic_id(topic),
                                                                     adding, removing))

    async def topic_id(self, topic: str) -> str | None:
        """The topic's id; None if it has none yet (or there is no such topic)."""
        found = await self.zk.get(topic_path(topic))
        return None if found is None else decode_topic_id(topic, found[0])

    async def give_topic_id(self, topic: str, topic_id: str) -> str | None:
        """Record ``topic_id`` in a topic znode that has none (Kafka 2.8's controller does it for
        topics created before ids, ``setTopicIds``), only if the node is unchanged since read.
        The id the topic has then (None: no such topic)."""
        found = await self.zk.get(topic_path(topic))
        if found is None:
            return None
        raw, version = found
        current = decode_topic_id(topic, raw)
        if current is not None:
            return current
        try:
            await self.zk.set(topic_path(topic), encode_topic_assignment(decode_topic_assignment(topic, raw), topic_id,
                                                                         *decode_topic_reassignment(topic, raw)),
                              version=version)
        except BadVersion:
            return await self.topic_id(topic)
        return topic_id

    async def topics(self) -> list[str]:
        return await self.zk.children(BROKER_TOPICS_PATH)

    async def topic_assignment(self, topic: str) -> dict[int, list[int]] | None:
        found = await self.zk.get(topic_path(topic))
        return None if found is None else decode_topic_assignment(topic, found[0])

    async def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's config overrides; {} when it has none (or no config node)."""
        found = await self.zk.get(topic_config_path(topic))
        return {} if found is None else decode_topic_config(topic, found[0])

    async def broker_config(self, entity: str) -> dict[str, str]:
        """The dynamic configs of a broker entity; {} when it has none."""
        path = broker_config_path(entity)
        found = await self.zk.get(path)
        return {} if found is None else decode_config(path, found[0])

    async def set_broker_config(self, entity: str, config: dict[str, str]) -> None:
        """Replace a broker entity's dynamic configs and notify every broker (Kafka's
        AdminZkClient.changeBrokerConfig, its notification in 0.10.2's form)."""
        await self._change_config("brokers", entity, broker_config_path(entity), config)

    async def set_topic_config(self, topic: str, config: dict[str, str]) -> None:
        """Replace the topic's overrides and notify every broker (AdminUtils.changeTopicConfig)."""
        await self._change_config("topics", topic, topic_config_path(topic), config)

    async def _change_config(self, entity_type: str, name: str, path: str, config: dict[str, str]) -> None:
        """The entity's config node first, then the sequential ``/config/changes`` notification
        (AdminUtils.changeEntityConfig's order: a broker notified finds the new config)."""
        data = encode_topic_config(config)
        try:
            await self.zk.set(path, data)
        except NoNode:
            await self.zk.ensure_path(path.rsplit("/", 1)[0])
            try:
                await self.zk.create(path, data)
            except NodeExists:
                await self.zk.set(path, data)
        await self.zk.create(f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}", encode_config_change(entity_type, name),
                             sequence=True)

    # -- users (SCRAM credentials, as kafka-configs --entity-type users writes them) ------------

    async def user_config(self, user: str) -> dict[str, str]:
        found = await self.zk.get(user_config_path(user))
        return {} if found is None else decode_config(user_config_path(user), found[0])

    async def set_user_config(self, user: str, config: dict[str, str]) -> None:
        """Write (or, with no entry left, delete) ``/config/users/<user>``."""
        path = user_config_path(user)
        if not config:
            if await self.zk.exists(path) is not None:
                await self.zk.delete(path)
            return
        await self.zk.ensure_path(USER_CONFIG_PATH)
        if await self.zk.exists(path) is None:
            await self.zk.create(path, encode_topic_config(config))
        else:
            await self.zk.set(path, encode_topic_config(config))

    async def users(self) -> dict[str, dict[str, str]]:
        if await self.zk.exists(USER_CONFIG_PATH) is None:
            return {}
        return {user: await self.user_config(user) for user in sorted(await self.zk.children(USER_CONFIG_PATH))}

    # -- ACLs (SimpleAclAuthorizer's nodes) ----------------------------------------------------

    async def acls(self) -> dict[tuple[bool, str, str], dict]:
        """Every resource pattern's ACL node, as ``{(prefixed, "<Type>", "<name>"): <its JSON>}``."""
        found: dict[tuple[bool, str, str], dict] = {}
        for root, prefixed in ((ACL_PATH, False), (PREFIXED_ACL_PATH, True)):
            if await self.zk.exists(root) is None:
                continue
            for resource_type in await self.zk.children(root):
                for name in await self.zk.children(f"{root}/{resource_type}"):
                    node = await self.zk.get_json(f"{root}/{resource_type}/{name}")
                    if node is not None:
                        found[prefixed, resource_type, name] = node[0]
        return found

    async def acl(self, resource_type: str, name: str, *, prefixed: bool = False) -> dict | None:
        """One resource pattern's ACL node; None when it has none."""
        node = await self.zk.get_json(_acl_path(resource_type, name, prefixed))
        return None if node is None else node[0]

    async def set_acls(self, resource_type: str, name: str, entry: dict | None, *, prefixed: bool = False) -> None:
        """Write (None: delete) one resource's ACL node and leave Kafka's change notification
        (a literal pattern's in ``/kafka-acl-changes``, a prefixed one's in
        ``/kafka-acl-extended-changes``)."""
        path = _acl_path(resource_type, name, prefixed)
        if entry is None:
            if await self.zk.exists(path) is not None:
                await self.zk.delete(path)
        else:
            await self.zk.ensure_path(path.rpartition("/")[0])
            if await self.zk.exists(path) is None:
                await self.zk.create(path, _encode(entry))
            else:
                await self.zk.set(path, _encode(entry))
        if prefixed:
            changes, change = EXTENDED_ACL_CHANGES_PATH, _encode({
                "version": 1, "resourceType": _RESOURCE_TYPE_ENUM.get(resource_type, resource_type), "name": name,
                "patternType": "PREFIXED"})
        else:
            changes, change = ACL_CHANGES_PATH, f"{resource_type}:{name}".encode()
        await self.zk.ensure_path(changes)
        await self.zk.create(f"{changes}/{ACL_CHANGE_PREFIX}", change, sequence=True)

    # -- partition leader and ISR -------------------------------------------------------------

    async def partition_state(self, topic: str, partition: int) -> tuple[LeaderIsr, int] | None:
        found = await self.zk.get(partition_state_path(topic, partition))
        return None if found is None else (decode_leader_isr(topic, partition, found[0]), found[1])

    async def create_partition_state(self, topic: str, partition: int, state: LeaderIsr) -> int:
        """The controller's first leader and ISR for a new partition; returns the ZooKeeper
        version (0). NodeExists if the partition already has a state."""
        path = partition_state_path(topic, partition)
        await self.zk.create(path, encode_leader_isr(state))
        return 0

    async def update_partition_state(self, topic: str, partition: int, state: LeaderIsr,
                                     expected_version: int) -> int:
        """Conditional write (ReplicationUtils.updateLeaderAndIsr); the new ZooKeeper version.
        BadVersion if someone wrote since ``expected_version``, NoNode if there is no state.

        A node that already holds exactly ``state`` is this writer's own earlier write, applied
        though its answer never came (the request timed out, or its caller was cancelled while
        ZooKeeper applied it): its current version is returned, as Kafka's
        checkLeaderAndIsrZkData does. Refused instead, a leader would keep a version that is no
        longer ZooKeeper's and fail every later ISR change (KAFKA-2729)."""
        path = partition_state_path(topic, partition)
        try:
            return await self.zk.set(path, encode_leader_isr(state), expected_version)
        except BadVersion:
            found = await self.zk.get(path)
            if found is not None and decode_leader_isr(topic, partition, found[0]) == state:
                return found[1]
            raise

    # -- topic deletion -----------------------------------------------------------------------

    async def request_topic_deletion(self, topic: str) -> None:
        """Mark the topic for the controller to delete (AdminUtils.deleteTopic). Marking it
        twice is not an error (AdminManager swallows TopicAlreadyMarkedForDeletion);
        NoNode if the topic does not exist."""
        if await self.zk.exists(topic_path(topic)) is None:
            raise NoNode(f"topic {topic!r} does not exist")
        try:
            await self.zk.create(delete_topic_path(topic))
        except NodeExists:
            pass

    async def topics_to_delete(self) -> list[str]:
        return await self.zk.children(DELETE_TOPICS_PATH)

    async def delete_topic_nodes(self, topic: str) -> None:
        """The controller's last step of a deletion (TopicDeletionManager.completeDeleteTopic):
        the deletion mark goes last, so a controller that dies half-way finds it and finishes."""
        for path, recursive in ((topic_path(topic), True), (topic_config_path(topic), False),
                                (delete_topic_path(topic), False)):
            try:
                await self.zk.delete(path, recursive=recursive)
            except NoNode:
                pass

    # -- ISR change notifications ---------------------------------------------------------------

    async def notify_isr_change(self, partitions: list[tuple[str, int]]) -> str:
        """A leader tells the controller these partitions' ISR changed
        (ReplicationUtils.propagateIsrChanges); returns the sequential node's path."""
        return await self.zk.create(f"{ISR_CHANGE_NOTIFICATION_PATH}/{_ISR_CHANGE_PREFIX}",
                                    encode_isr_change(partitions), sequence=True)

    async def take_isr_change_notifications(self) -> list[tuple[str, int]]:
        """The controller reads and deletes every pending notification; the partitions named,
        oldest first, each once. A malformed notification is deleted and skipped, as Kafka does."""
        changed: dict[tuple[str, int], None] = {}
        for child in await self.zk.children(ISR_CHANGE_NOTIFICATION_PATH):
            path = f"{ISR_CHANGE_NOTIFICATION_PATH}/{child}"
            found = await self.zk.get(path)
            if found is not None:
                try:
                    changed.update(dict.fromkeys(decode_isr_change(found[0], path)))
                except MalformedZnode:
                    pass
            try:
                await self.zk.delete(path)
            except NoNode:
                pass
        return list(changed)

    # -- preferred replica election -------------------------------------------------------------

    async def request_preferred_replica_election(self, elections: list[tuple[str, int, int | None]]) -> None:
        """What kafka-preferred-replica-election.sh writes; NodeExists while the controller
        has not finished the previous one (Kafka refuses a second election meanwhile too)."""
        await self.zk.create(PREFERRED_REPLICA_ELECTION_PATH, encode_preferred_replica_election(elections))

    async def preferred_replica_election(self) -> tuple[list[tuple[str, int, int | None]], int | None]:
        """The pending request and its znode's version: ([], None) when there is none; ([],
        version) when it is malformed, to be deleted and ignored as Kafka's controller does."""
        found = await self.zk.get(PREFERRED_REPLICA_ELECTION_PATH)
        if found is None:
            return [], None
        try:
            return decode_preferred_replica_election(found[0]), found[1]
        except MalformedZnode:
            return [], found[1]

    async def delete_preferred_replica_election(self, version: int) -> None:
        """Delete the request read at ``version``; one written since is left for its own event."""
        try:
            await self.zk.delete(PREFERRED_REPLICA_ELECTION_PATH, version=version)
        except (NoNode, BadVersion):
            pass


def _hosts(info: BrokerInfo) -> set[str]:
    return {host for host, _port in info.endpoints.values()} or {info.host}


def _check_assignment(topic: str, assignment: dict[int, list[int]]) -> None:
    """AdminUtils.validateCreateOrUpdateTopic's checks on a replica assignment (equal replica
    counts, no replica twice), and partitions numbered 0..n-1, without which a partition
    would have no leader and consumers would find a hole in the topic."""
    if not assignment:
        raise ValueError(f"topic {topic!r}: no partitions")
    if sorted(assignment) != list(range(len(assignment))):
        raise ValueError(f"topic {topic!r}: partitions must be numbered 0..{len(assignment) - 1}, "
                         f"got {sorted(assignment)}")
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"topic {topic!r}: every partition needs the same, non-zero number of replicas")
    for partition, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise ValueError(f"topic {topic!r}: partition {partition} lists a replica twice: {replicas}")
