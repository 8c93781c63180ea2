"""Kafka 0.10.2's ZooKeeper layout: the pure JSON codecs against Kafka's documented forms, and
every KafkaZk method against a real ZooKeeper, its bytes read back raw (and once by zkCli)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from minikafka.replication.kafka_zk import (
    PERSISTENT_PATHS, BrokerInfo, KafkaZk, LeaderIsr, MalformedZnode, decode_broker,
    decode_cluster_id, decode_controller, decode_controller_epoch, decode_isr_change,
    decode_leader_isr, decode_topic_assignment, decode_topic_config, encode_broker,
    encode_cluster_id, encode_controller, encode_isr_change, encode_leader_isr,
    encode_topic_assignment, encode_topic_config, new_cluster_id, decode_preferred_replica_election,
    encode_preferred_replica_election,
)
from minikafka.replication.zookeeper import BadVersion, NodeExists, NoNode, ZkClient

pytestmark = pytest.mark.timeout(120)

BROKER_V4_KEYS = {"listener_security_protocol_map", "endpoints", "jmx_port", "host", "timestamp",
                  "port", "version"}


def plaintext_broker(broker_id: int, host: str = "127.0.0.1", port: int = 9092, rack=None) -> BrokerInfo:
    return BrokerInfo(broker_id, host, port, {"PLAINTEXT": (host, port)}, rack)


# -- pure codecs ----------------------------------------------------------------------------------

def test_preferred_replica_election_is_kafkas_form_with_our_optional_leader():
    # What kafka-preferred-replica-election.sh writes, read as "the assignment's first replica".
    kafkas = b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"u","partition":2}]}'
    assert decode_preferred_replica_election(kafkas) == [("t", 0, None), ("u", 2, None)]
    assert encode_preferred_replica_election([("t", 0, None), ("u", 2, None)]) == kafkas
    ours = encode_preferred_replica_election([("t", 1, 3)])
    assert ours == b'{"version":1,"partitions":[{"topic":"t","partition":1,"minikafka.leader":3}]}'
    assert decode_preferred_replica_election(ours) == [("t", 1, 3)]
    for bad in (b'{"version":1}', b'{"version":1,"partitions":[{"partition":0}]}',
                b'{"version":1,"partitions":[{"topic":"t","partition":0,"minikafka.leader":"x"}]}'):
        with pytest.raises(MalformedZnode):
            decode_preferred_replica_election(bad)


def test_broker_registration_is_kafkas_version_4():
    raw = encode_broker(plaintext_broker(3, "h1", 9092), timestamp_ms=1495200000000)
    assert raw == (b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                   b'"endpoints":["PLAINTEXT://h1:9092"],"jmx_port":-1,"host":"h1",'
                   b'"timestamp":"1495200000000","port":9092,"version":4}')
    assert decode_broker(3, raw) == plaintext_broker(3, "h1", 9092)

    racked = encode_broker(BrokerInfo(4, "h", 1, {"PLAINTEXT": ("h", 1), "INTERNAL": ("::1", 2)}, "dc1"), 1)
    obj = json.loads(racked)
    assert set(obj) == BROKER_V4_KEYS | {"rack"}
    assert obj["endpoints"] == ["PLAINTEXT://h:1", "INTERNAL://[::1]:2"]
    assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "PLAINTEXT"}
    assert decode_broker(4, racked) == BrokerInfo(4, "h", 1, {"PLAINTEXT": ("h", 1), "INTERNAL": ("::1", 2)}, "dc1")
    # Listener names mapped to security protocols travel in listener_security_protocol_map.
    secured = encode_broker(BrokerInfo(5, "", -1, {"CLIENTS": ("h", 9094), "REPLICATION": ("h", 9095)},
                                       protocols={"CLIENTS": "SASL_SSL", "REPLICATION": "PLAINTEXT"}), 1)
    assert json.loads(secured)["listener_security_protocol_map"] == {"CLIENTS": "SASL_SSL", "REPLICATION": "PLAINTEXT"}
    decoded = decode_broker(5, secured)
    assert decoded.protocol("CLIENTS") == "SASL_SSL" and decoded.address("REPLICATION") == ("h", 9095)


def test_broker_registrations_kafka_wrote_in_every_version_decode():
    # The examples in kafka.cluster.Broker's documentation (0.10.2), made valid JSON.
    v1 = b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
    assert decode_broker(1, v1) == BrokerInfo(1, "localhost", 9092, {"PLAINTEXT": ("localhost", 9092)})
    v2 = (b'{"version":2,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
          b'"endpoints":["PLAINTEXT://host1:9092", "SSL://host1:9093"]}')
    assert decode_broker(1, v2).endpoints == {"PLAINTEXT": ("host1", 9092), "SSL": ("host1", 9093)}
    v3 = v2.replace(b'"version":2', b'"version":3').replace(b"]}", b'],"rack":"dc1"}')
    assert decode_broker(1, v3).rack == "dc1"
    # A broker without a PLAINTEXT listener writes host null and port -1.
    v4 = (b'{"version":4,"host":null,"port":-1,"jmx_port":9999,"timestamp":"2233345666",'
          b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],'
          b'"listener_security_protocol_map":{"CLIENT":"SSL","REPLICATION":"PLAINTEXT"},"rack":null}')
    assert decode_broker(7, v4) == BrokerInfo(7, "host1", 9092,
                                              {"CLIENT": ("host1", 9092), "REPLICATION": ("host1", 9093)})
    for bad in (b"", b"{}", b'{"version":0}', b'{"version":2,"endpoints":["nonsense"]}', b"[4]",
                b'{"version":"4","endpoints":[]}'):
        with pytest.raises(MalformedZnode):
            decode_broker(1, bad)


def test_controller_cluster_id_and_epoch_forms():
    assert encode_controller(2, timestamp_ms=1234) == b'{"version":1,"brokerid":2,"timestamp":"1234"}'
    assert decode_controller(b'{"version":1,"brokerid":2,"timestamp":"1234"}') == 2
    assert decode_controller(b"5") == 5  # what 0.8.1 brokers wrote
    with pytest.raises(MalformedZnode):
        decode_controller(b'{"version":1}')
    assert encode_cluster_id("abc") == b'{"version":"1","id":"abc"}'
    assert decode_cluster_id(b'{"version":"1","id":"abc"}') == "abc"
    cluster_id = new_cluster_id()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
    assert decode_controller_epoch(b"17") == 17
    with pytest.raises(MalformedZnode):
        decode_controller_epoch(b"{}")


ORDERS_ID, OTHER_ID = "hemIwWkIwwngSh8vSdhH-g", "QoLFDgcmBt9G-9eOfQe0tA"


def test_topic_partition_and_isr_change_forms():
    assert encode_topic_assignment({1: [2, 1], 0: [1, 2]}) == b'{"version":1,"partitions":{"0":[1,2],"1":[2,1]}}'
    assert decode_topic_assignment("t", b'{"version":1,"partitions":{"1":[2,1],"0":[1,2]}}') == {0: [1, 2], 1: [2, 1]}
    assert encode_topic_config({"cleanup.policy": "compact"}) == b'{"version":1,"config":{"cleanup.policy":"compact"}}'
    assert decode_topic_config("t", b'{"version":1,"config":{}}') == {}
    state = LeaderIsr(leader=1, leader_epoch=4, isr=[1, 2], controller_epoch=3)
    assert encode_leader_isr(state) == b'{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2]}'
    assert decode_leader_isr("t", 0, encode_leader_isr(state)) == state
    assert encode_isr_change([("t", 0), ("t", 0), ("u", 1)]) == (
        b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"u","partition":1}]}')
    assert decode_isr_change(encode_isr_change([("t", 0)])) == [("t", 0)]
    for decode, raw in ((lambda r: decode_topic_assignment("t", r), b'{"partitions":{"x":[1]}}'),
                        (lambda r: decode_topic_assignment("t", r), b'{"partitions":{"0":[1.5]}}'),
                        (lambda r: decode_topic_config("t", r), b'{"config":{"a":1}}'),
                        (lambda r: decode_leader_isr("t", 0, r), b'{"leader":1}'),
                        (lambda r: decode_leader_isr("t", 0, r),
                         b'{"controller_epoch":1,"leader":true,"leader_epoch":0,"isr":[]}'),
                        (decode_isr_change, b'{"partitions":[{"topic":1,"partition":0}]}')):
        with pytest.raises(MalformedZnode):
            decode(raw)


# -- against ZooKeeper ----------------------------------------------------------------------------

async def test_paths_and_cluster_id(zk_chroot):
    async with ZkClient(zk_chroot) as zk:
        kafka = KafkaZk(zk)
        await kafka.ensure_paths()
        await kafka.ensure_paths()  # again: nothing to do, no error
        for path in PERSISTENT_PATHS:
            assert await zk.exists(path) is not None, path
        assert await kafka.get_or_create_cluster_id("first") == "first"
        assert await kafka.get_or_create_cluster_id("second") == "first"
        assert await zk.get("/cluster/id") == (b'{"version":"1","id":"first"}', 0)


async def test_register_broker_and_read_live_brokers(zk_chroot):
    async with ZkClient(zk_chroot) as one, ZkClient(zk_chroot) as two:
        first = plaintext_broker(1, "127.0.0.1", 9001, rack="r1")
        second = plaintext_broker(2, "127.0.0.1", 9002)
        await KafkaZk(one).register_broker(first, wait_ms=0)
        await KafkaZk(two).register_broker(second, wait_ms=0)
        raw, stat = await one.get_stat("/brokers/ids/1")
        assert stat.ephemeral_owner == one.session_id
        obj = json.loads(raw)
        assert set(obj) == BROKER_V4_KEYS | {"rack"}
        assert obj["version"] == 4 and obj["jmx_port"] == -1 and obj["rack"] == "r1"
        assert obj["host"] == "127.0.0.1" and obj["port"] == 9001
        assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9001"]
        assert re.fullmatch(r"\d{13}", obj["timestamp"])
        assert set(json.loads((await one.get("/brokers/ids/2"))[0])) == BROKER_V4_KEYS
        assert await KafkaZk(two).live_brokers() == {1: first, 2: second}

        # Registering again in the same session (a retry after a lost answer) is fine.
        await KafkaZk(one).register_broker(first, wait_ms=0)
        # Another live broker on another host holding the id: refused at once.
        with trio.fail_after(5):
            with pytest.raises(NodeExists, match="broker id 1 is already registered .* by another broker"):
                await KafkaZk(two).register_broker(plaintext_broker(1, "10.9.9.9", 9001), wait_ms=60_000)
        # Same host: could be our previous run, so it waits, but a live holder never goes.
        with pytest.raises(NodeExists, match="did not expire within 300 ms"):
            await KafkaZk(two).register_broker(plaintext_broker(1, "127.0.0.1", 9005), wait_ms=300)

        await one.close()
        assert await KafkaZk(two).live_brokers() == {2: second}


async def test_a_broker_registration_keeps_its_epoch_when_rewritten_and_gets_another_when_made_anew(zk_chroot):
    """The controller tells a restarted broker from one that rewrote its endpoints by the
    registration's czxid (Kafka 2.x's broker epoch)."""
    async with ZkClient(zk_chroot) as zk:
        kafka = KafkaZk(zk)
        first = plaintext_broker(1, "127.0.0.1", 9001)
        await kafka.register_broker(first, wait_ms=0)
        ((info, epoch),) = (await kafka.broker_registrations()).values()
        assert info == first
        moved = plaintext_broker(1, "127.0.0.1", 9011)
        await kafka.register_broker(moved, wait_ms=0)
        assert await kafka.broker_registrations() == {1: (moved, epoch)}
        await zk.delete("/brokers/ids/1")
        await kafka.register_broker(first, wait_ms=0)
        ((info, again),) = (await kafka.broker_registrations()).values()
        assert info == first and again > epoch


_REGISTER_THEN_HANG = """
import sys, trio
from minikafka.replication.kafka_zk import BrokerInfo, KafkaZk
from minikafka.replication.zookeeper import ZkClient

async def main(connect):
    zk = ZkClient(connect, session_timeout_ms=2000)
    await zk.start()
    info = BrokerInfo(1, "127.0.0.1", 9001, {"PLAINTEXT": ("127.0.0.1", 9001)})
    await KafkaZk(zk).register_broker(info, wait_ms=0)
    print(zk.session_id, flush=True)
    await trio.sleep_forever()

trio.run(main, sys.argv[1])
"""


async def test_register_broker_waits_out_its_own_stale_node(zk_chroot):
    """A broker killed with -9 and restarted before ZooKeeper expired its session."""
    process = subprocess.Popen([sys.executable, "-c", _REGISTER_THEN_HANG, zk_chroot],
                               stdout=subprocess.PIPE, text=True)
    try:
        with trio.fail_after(30):
            old_session = int(await trio.to_thread.run_sync(process.stdout.readline))
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()
    async with ZkClient(zk_chroot) as zk:
        _, stat = await zk.get_stat("/brokers/ids/1")
        assert stat.ephemeral_owner == old_session  # still there: the session outlives the process
        restarted = plaintext_broker(1, "127.0.0.1", 9101)  # port 0 gave it a new port
        with trio.fail_after(30):
            await KafkaZk(zk).register_broker(restarted, wait_ms=20_000)
        raw, stat = await zk.get_stat("/brokers/ids/1")
        assert stat.ephemeral_owner == zk.session_id
        assert decode_broker(1, raw) == restarted


async def test_controller_election(zk_chroot):
    async with ZkClient(zk_chroot) as one, ZkClient(zk_chroot) as two:
        results = {}

        async def run(broker_id, zk):
            results[broker_id] = await KafkaZk(zk).try_elect_controller(broker_id)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, 1, one)
            nursery.start_soon(run, 2, two)
        assert sorted(results.values()) == [False, True]
        winner = 1 if results[1] else 2
        loser, loser_zk, winner_zk = (2, two, one) if winner == 1 else (1, one, two)

        assert await KafkaZk(loser_zk).controller_id() == winner
        assert await KafkaZk(loser_zk).try_elect_controller(loser) is False
        assert await KafkaZk(winner_zk).try_elect_controller(winner) is True  # still ours
        raw, stat = await loser_zk.get_stat("/controller")
        obj = json.loads(raw)
        assert set(obj) == {"version", "brokerid", "timestamp"}
        assert (obj["version"], obj["brokerid"]) == (1, winner)
        assert stat.ephemeral_owner == winner_zk.session_id

        await loser_zk.watch_data("/controller")
        await winner_zk.close()
        with trio.fail_after(10):
            async for event in loser_zk.events:
                if event.kind == "data" and event.path == "/controller" and event.data is None:
                    break
        assert await KafkaZk(loser_zk).try_elect_controller(loser) is True
        assert await KafkaZk(loser_zk).controller_id() == loser


async def test_controller_epoch(zk_chroot):
    async with ZkClient(zk_chroot) as one, ZkClient(zk_chroot) as two:
        kafka_one, kafka_two = KafkaZk(one), KafkaZk(two)
        assert await kafka_one.controller_epoch() is None
        assert await kafka_one.increment_controller_epoch() == 1
        assert await one.get("/controller_epoch") == (b"1", 0)  # plain text, as Kafka writes it
        assert kafka_one.controller_epoch_zk_version == 0
        assert await kafka_two.increment_controller_epoch() == 2
        assert await kafka_one.controller_epoch() == (2, 1)

        epochs = []

        async def bump(kafka):
            for _ in range(5):
                epochs.append(await kafka.increment_controller_epoch())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(bump, kafka_one)
            nursery.start_soon(bump, kafka_two)
        # Conditional writes retried on BadVersion: every caller got an epoch of its own.
        assert sorted(epochs) == list(range(3, 13))
        assert await kafka_two.controller_epoch() == (12, 11)


async def test_topics_partition_state_and_deletion(zk_chroot):
    async with ZkClient(zk_chroot) as zk:
        kafka = KafkaZk(zk)
        await kafka.ensure_paths()
        await kafka.create_topic("orders", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"}, ORDERS_ID)
        assert await zk.get("/brokers/topics/orders") == (
            b'{"version":3,"partitions":{"0":[1,2],"1":[2,1]},"adding_replicas":{},"removing_replicas":{},'
            b'"topic_id":"' + ORDERS_ID.encode() + b'"}', 0)
        assert await kafka.topic_id("orders") == ORDERS_ID
        # CreatePartitions' larger assignment keeps the id; a topic that has one keeps it.
        await kafka.set_topic_assignment("orders", {0: [1, 2], 1: [2, 1]})
        assert await kafka.give_topic_id("orders", OTHER_ID) == ORDERS_ID
        assert await kafka.topic_id("orders") == ORDERS_ID
        assert await zk.get("/config/topics/orders") == (b'{"version":1,"config":{"retention.ms":"1000"}}', 0)
        assert await kafka.topics() == ["orders"]
        assert await kafka.topic_assignment("orders") == {0: [1, 2], 1: [2, 1]}
        assert await kafka.topic_config("orders") == {"retention.ms": "1000"}
        assert await kafka.topic_assignment("missing") is None
        assert await kafka.topic_config("missing") == {}
        with pytest.raises(NodeExists, match="topic 'orders' already exists"):
            await kafka.create_topic("orders", {0: [1]}, {}, OTHER_ID)
        assert await kafka.topic_config("orders") == {"retention.ms": "1000"}  # untouched
        for bad in ({}, {1: [1]}, {0: [1, 2], 1: [1]}, {0: [1, 1]}, {0: []}):
            with pytest.raises(ValueError):
                await kafka.create_topic("bad", bad, {}, OTHER_ID)
        assert await kafka.topics() == ["orders"]

        state = LeaderIsr(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=1)
        assert await kafka.partition_state("orders", 0) is None
        assert await kafka.create_partition_state("orders", 0, state) == 0
        raw, _ = await zk.get("/brokers/topics/orders/partitions/0/state")
        assert set(json.loads(raw)) == {"controller_epoch", "leader", "version", "leader_epoch", "isr"}
        assert raw == b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'
        assert await kafka.partition_state("orders", 0) == (state, 0)
        with pytest.raises(NodeExists):
            await kafka.create_partition_state("orders", 0, state)
        shrunk = LeaderIsr(leader=1, leader_epoch=0, isr=[1], controller_epoch=1)
        assert await kafka.update_partition_state("orders", 0, shrunk, expected_version=0) == 1
        # A leader that read version 0 and writes after the controller did: loses.
        with pytest.raises(BadVersion):
            await kafka.update_partition_state("orders", 0, state, expected_version=0)
        assert await kafka.partition_state("orders", 0) == (shrunk, 1)
        # A writer whose own write was applied though it never heard so (its caller cancelled,
        # or the answer was lost) writes the same state again with the version it knew: that is
        # its write, at the node's version (Kafka's checkLeaderAndIsrZkData), not a conflict.
        assert await kafka.update_partition_state("orders", 0, shrunk, expected_version=0) == 1
        with pytest.raises(NoNode):
            await kafka.update_partition_state("orders", 1, state, expected_version=0)

        with pytest.raises(NoNode, match="topic 'missing' does not exist"):
            await kafka.request_topic_deletion("missing")
        await kafka.request_topic_deletion("orders")
        await kafka.request_topic_deletion("orders")  # asked twice: still one request
        assert await zk.get("/admin/delete_topics/orders") == (b"", 0)
        assert await kafka.topics_to_delete() == ["orders"]
        await kafka.delete_topic_nodes("orders")
        await kafka.delete_topic_nodes("orders")  # a controller finishing a half-done deletion
        assert await kafka.topics() == [] and await kafka.topics_to_delete() == []
        for path in ("/brokers/topics/orders", "/config/topics/orders", "/admin/delete_topics/orders"):
            assert await zk.exists(path) is None, path

        # The name is free again; a leftover config would have been overwritten.
        await zk.create("/config/topics/orders", b'{"version":1,"config":{"stale":"1"}}')
        await kafka.create_topic("orders", {0: [3]}, {}, OTHER_ID)
        assert await kafka.topic_config("orders") == {}


async def test_a_topic_from_before_ids_is_given_one_once(zk_chroot):
    async with ZkClient(zk_chroot) as zk:
        kafka = KafkaZk(zk)
        await kafka.ensure_paths()
        await zk.create("/brokers/topics/old", b'{"version":1,"partitions":{"0":[1]}}')
        assert await kafka.topic_id("old") is None
        assert await kafka.give_topic_id("old", ORDERS_ID) == ORDERS_ID
        assert await kafka.give_topic_id("old", OTHER_ID) == ORDERS_ID
        assert await kafka.topic_assignment("old") == {0: [1]}
        assert await kafka.give_topic_id("missing", OTHER_ID) is None


async def test_isr_change_notifications(zk_chroot):
    async with ZkClient(zk_chroot) as leader, ZkClient(zk_chroot) as controller:
        await KafkaZk(controller).ensure_paths()
        first = await KafkaZk(leader).notify_isr_change([("t", 0), ("t", 1), ("t", 0)])
        second = await KafkaZk(leader).notify_isr_change([("u", 0), ("t", 1)])
        assert (first, second) == ("/isr_change_notification/isr_change_0000000000",
                                   "/isr_change_notification/isr_change_0000000001")
        raw, _ = await controller.get(first)
        assert raw == b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"t","partition":1}]}'
        await controller.create("/isr_change_notification/isr_change_", b"not json", sequence=True)
        taken = await KafkaZk(controller).take_isr_change_notifications()
        assert taken == [("t", 0), ("t", 1), ("u", 0)]
        assert await controller.children("/isr_change_notification") == []
        assert await KafkaZk(controller).take_isr_change_notifications() == []


async def test_zkcli_reads_what_kafka_would(zookeeper, zk_chroot):
    """ZooKeeper's own shell prints our registration exactly as a 0.10.2 broker's."""
    zkcli = Path("/usr/share/zookeeper/bin/zkCli.sh")
    assert zkcli.exists(), "Debian's zookeeper package provides zkCli.sh"
    async with ZkClient(zk_chroot) as zk:
        await KafkaZk(zk).register_broker(plaintext_broker(5, "127.0.0.1", 9005), wait_ms=0)
        chroot = zk_chroot[len(zookeeper.connect_string):]
        result = await trio.to_thread.run_sync(lambda: subprocess.run(
            [str(zkcli), "-server", zookeeper.connect_string, "get", f"{chroot}/brokers/ids/5"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "ZOO_LOG_DIR": "/tmp"}))
    printed = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(printed) == 1, result.stdout + result.stderr
    obj = json.loads(printed[0])
    assert set(obj) == BROKER_V4_KEYS
    assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9005"] and obj["version"] == 4


def test_acl_change_notifications_name_a_pattern_as_kafka_writes_them():
    from minikafka.replication.kafka_zk import extended_acl_change, literal_acl_change

    assert literal_acl_change(b"Topic:orders:eu") == ("Topic", "orders:eu")
    event = b'{"version":1,"resourceType":"TRANSACTIONAL_ID","name":"app-","patternType":"PREFIXED"}'
    assert extended_acl_change(event) == ("TransactionalId", "app-")
    for malformed in (b"Topic:orders", b'{"version":1,"resourceType":"TOPIC","name":"x","patternType":"LITERAL"}',
                      b'{"version":1,"name":"x"}'):
        with pytest.raises(MalformedZnode):
            extended_acl_change(malformed)
