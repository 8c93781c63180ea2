"""Static membership (KIP-345, JoinGroup v5+) with a real client: aiokafka, whose consumer
sends ``group_instance_id`` and, as a static member, no LeaveGroup when it stops.

A consumer restarted with the same ``group.instance.id`` takes over its former self's member:
it gets the same partitions, the generation does not move, and the other member sees no
rebalance (Kafka 2.8's updateStaticMemberAndRebalance in a Stable group).
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer
from aiokafka.abc import ConsumerRebalanceListener
from kafka.admin import KafkaAdminClient, NewTopic


GROUP = "static"
TOPIC = "static-topic"
SESSION_MS = 10000   # long enough that a restart never loses the member to its session


class Rebalances(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assigned: list[set[int]] = []

    async def on_partitions_revoked(self, revoked) -> None:
        pass

    async def on_partitions_assigned(self, assigned) -> None:
        self.assigned.append({tp.partition for tp in assigned})


async def _member(bootstrap: str, instance: str, listener: Rebalances) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, group_instance_id=instance,
                                session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500,
                                auto_offset_reset="earliest")
    await consumer.start()
    consumer.subscribe([TOPIC], listener=listener)
    return consumer


async def _until(condition, what: str, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def _poll(*consumers: AIOKafkaConsumer) -> None:
    await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))


def _described(admin: KafkaAdminClient) -> dict:
    return admin.describe_groups([GROUP])[GROUP]


def test_a_restarted_static_member_keeps_its_partitions_without_a_rebalance(minikafka_broker_factory):
    broker = minikafka_broker_factory(**{"group.min.session.timeout.ms": "1000"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 4, 1)])

    async def scenario():
        first, second = Rebalances(), Rebalances()
        a = await _member(broker.bootstrap, "instance-a", first)
        b = await _member(broker.bootstrap, "instance-b", second)

        async def stable():
            while not (first.assigned and second.assigned and first.assigned[-1] and second.assigned[-1]
                       and not first.assigned[-1] & second.assigned[-1]
                       and len(first.assigned[-1] | second.assigned[-1]) == 4):
                await _poll(a, b)
        await asyncio.wait_for(stable(), 30)
        described = _described(admin)
        assert described["group_state"] == "Stable"
        before = {m["group_instance_id"]: m["member_id"] for m in described["members"]}
        assert set(before) == {"instance-a", "instance-b"}
        a_partitions, b_rebalances = first.assigned[-1], len(second.assigned)

        await a.stop()    # a static member leaves no LeaveGroup behind
        restarted = Rebalances()
        a2 = await _member(broker.bootstrap, "instance-a", restarted)
        await _until(lambda: restarted.assigned, "the restarted member's assignment")
        for _ in range(20):   # time for a rebalance, had there been one, to reach b
            await _poll(a2, b)
        assert restarted.assigned == [a_partitions]
        assert len(second.assigned) == b_rebalances
        after = {m["group_instance_id"]: m["member_id"] for m in _described(admin)["members"]}
        assert after["instance-b"] == before["instance-b"]
        assert after["instance-a"] != before["instance-a"] and after["instance-a"].startswith("instance-a-")
        await a2.stop()
        await b.stop()

    try:
        asyncio.run(scenario())
    finally:
        admin.close()


def test_librdkafka_static_member_restart_keeps_its_partitions(minikafka_broker_factory):
    """The same with confluent-kafka (librdkafka, JoinGroup v5): its static consumer, closed,
    leaves no LeaveGroup either, and a new one with the same group.instance.id is handed the
    same partitions while the other member sees no new assignment."""
    from confluent_kafka import Consumer

    broker = minikafka_broker_factory(**{"group.min.session.timeout.ms": "1000"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 4, 1)])
    assigned: dict[str, list[set[int]]] = {}

    def member(instance: str, name: str) -> Consumer:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                             "group.instance.id": instance, "session.timeout.ms": SESSION_MS,
                             "heartbeat.interval.ms": 500})
        consumer.subscribe([TOPIC], on_assign=lambda c, partitions: assigned.setdefault(name, []).append(
            {p.partition for p in partitions}))
        return consumer

    def poll_until(condition, *consumers, what: str) -> None:
        for _ in range(300):
            for consumer in consumers:
                consumer.poll(0.05)
            if condition():
                return
        raise AssertionError(f"timed out waiting for {what}")

    try:
        a, b = member("instance-a", "a"), member("instance-b", "b")
        poll_until(lambda: len(assigned.get("a", [set()])[-1] | assigned.get("b", [set()])[-1]) == 4
                   and assigned.get("a", [set()])[-1] and assigned.get("b", [set()])[-1], a, b,
                   what="both members assigned")
        a_partitions, b_assignments = assigned["a"][-1], len(assigned["b"])
        a.close()
        a2 = member("instance-a", "a2")
        poll_until(lambda: "a2" in assigned, a2, b, what="the restarted member's assignment")
        for _ in range(40):   # time for a rebalance, had there been one, to reach b
            a2.poll(0.05)
            b.poll(0.05)
        assert assigned["a2"] == [a_partitions]
        assert len(assigned["b"]) == b_assignments
        a2.close()
        b.close()
    finally:
        admin.close()
