"""CreatePartitions from kafka-python's KafkaAdminClient, confluent-kafka's AdminClient and
aiokafka's AIOKafkaAdminClient against a single broker: new partitions are served at once and
survive a restart; a decrease, a count equal to today's, assignments that do not fit and an
unknown topic are refused and add nothing."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewPartitions as ConfluentNewPartitions
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidPartitionsError

pytestmark = pytest.mark.timeout(120)


def _partitions(broker, topic):
    return sorted(int(d.name.rsplit("-", 1)[1]) for d in broker.log_dir.glob(f"{topic}-*"))


def test_kafka_python_adds_partitions_that_take_writes_at_once(broker, admin, new_topic):
    topic = new_topic("grown")
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "3600000"})])
    admin.create_partitions({topic: 3})
    assert _partitions(broker, topic) == [0, 1, 2]
    assert (broker.log_dir / f"{topic}-2" / "topic-config.properties").read_text() == "retention.ms=3600000\n"
    assert len({(broker.log_dir / f"{topic}-{p}" / "partition.metadata").read_text() for p in range(3)}) == 1
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    assert producer.send(topic, b"to the new one", partition=2).get(timeout=15).offset == 0
    producer.close()
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic: 2})
    assert _partitions(broker, topic) == [0, 1, 2]


def test_confluent_refusals_add_nothing(broker, admin, new_topic):
    topic = new_topic("refused")
    admin.create_topics([NewTopic(topic, 2, 1)])
    client = AdminClient({"bootstrap.servers": broker.bootstrap})

    def refused(*new):
        futures = client.create_partitions(list(new))
        with pytest.raises(KafkaException) as caught:
            for future in futures.values():
                future.result(timeout=15)
        return caught.value.args[0].name()

    assert refused(ConfluentNewPartitions(topic, 1)) == "INVALID_PARTITIONS"
    assert refused(ConfluentNewPartitions(topic, 2)) == "INVALID_PARTITIONS"
    assert refused(ConfluentNewPartitions(topic, 4, [[0]])) == "INVALID_REPLICA_ASSIGNMENT"
    assert refused(ConfluentNewPartitions(topic, 3, [[7]])) == "INVALID_REPLICA_ASSIGNMENT"
    assert refused(ConfluentNewPartitions("no-such-topic", 3)) == "UNKNOWN_TOPIC_OR_PART"
    client.create_partitions([ConfluentNewPartitions(topic, 4)], validate_only=True)[topic].result(timeout=15)
    assert _partitions(broker, topic) == [0, 1]
    client.create_partitions([ConfluentNewPartitions(topic, 4, [[0], [0]])])[topic].result(timeout=15)
    assert _partitions(broker, topic) == [0, 1, 2, 3]


def test_aiokafka_adds_partitions(broker, admin, new_topic):
    topic = new_topic("aiokafka")
    admin.create_topics([NewTopic(topic, 1, 1)])

    async def grow():
        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            return await client.create_partitions({topic: AioNewPartitions(2)})
        finally:
            await client.close()

    response = asyncio.run(grow())
    assert [(r[0], r[1]) for r in response.topic_errors] == [(topic, 0)]
    assert _partitions(broker, topic) == [0, 1]


def test_added_partitions_survive_a_restart(minikafka_broker_factory, new_topic):
    broker = minikafka_broker_factory()
    topic = new_topic("restarted")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.create_partitions({topic: 3})
    admin.close()
    broker.restart()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    assert len(admin.describe_topics([topic])[0]["partitions"]) == 3
    admin.close()


def test_a_single_brokers_leaders_need_no_election(broker, admin, new_topic):
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as ConfluentTopicPartition

    topic = new_topic("elected")
    admin.create_topics([NewTopic(topic, 1, 1)])
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    (answer,) = client.elect_leaders(ElectionType.PREFERRED, [ConfluentTopicPartition(topic, 0)]).result(
        timeout=15).values()
    assert answer.name() == "ELECTION_NOT_NEEDED"
    answer = admin.elect_leaders(1, {topic: [0, 3]}, raise_errors=False)
    assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in answer.replica_election_results] == [(topic, [(0, 84), (3, 3)])]
