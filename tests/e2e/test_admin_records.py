"""DeleteRecords from kafka-python's KafkaAdminClient, confluent-kafka's AdminClient and
aiokafka's AIOKafkaAdminClient against a single broker: the log start offset moves, consumers
and ListOffsets see it at once, a fetch below it is OFFSET_OUT_OF_RANGE, whole segments below
it go, and it survives a restart; the refused cases move nothing."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import kafka_request

pytestmark = pytest.mark.timeout(120)


def _filled(broker, admin, topic, count=10, **configs):
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    for i in range(count):
        producer.send(topic, key=b"key %d" % i, value=b"record %d" % i).get(timeout=15)  # compacted topics need keys
    producer.close()


def _earliest(broker, topic):
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    partition = TopicPartition(topic, 0)
    earliest = consumer.beginning_offsets([partition])[partition]
    consumer.close()
    return earliest


def _fetch_error(broker, topic, offset):
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 100000}]}]}
    return kafka_request(broker.bootstrap, ApiKey.FETCH, 0, body).responses[0].partitions[0].error_code


def test_kafka_python_deletes_records_below_an_offset(broker, admin, new_topic):
    topic = new_topic("deleted")
    _filled(broker, admin, topic)
    answer = admin.delete_records({TopicPartition(topic, 0): 4})
    assert answer[TopicPartition(topic, 0)]["low_watermark"] == 4
    assert _earliest(broker, topic) == 4
    assert _fetch_error(broker, topic, 3) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert _fetch_error(broker, topic, 4) == ErrorCode.NONE
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    assert [m.offset for m in consumer] == list(range(4, 10))
    consumer.close()
    # A lower offset than the log start moves nothing back.
    assert admin.delete_records({TopicPartition(topic, 0): 2})[TopicPartition(topic, 0)]["low_watermark"] == 4


def test_confluent_deletes_to_the_end_and_refusals_move_nothing(broker, admin, new_topic):
    topic = new_topic("confluent")
    _filled(broker, admin, topic)
    client = AdminClient({"bootstrap.servers": broker.bootstrap})

    def delete(topic_name, offset):
        (future,) = client.delete_records([ConfluentTopicPartition(topic_name, 0, offset)]).values()
        return future.result(timeout=15)

    with pytest.raises(KafkaException) as caught:
        delete(topic, 11)
    assert caught.value.args[0].name() == "OFFSET_OUT_OF_RANGE"
    # Raw: the clients' metadata look-up would auto-create the topic first.
    body = {"timeout_ms": 1000, "topics": [{"name": "no-such-topic", "partitions": [
        {"partition_index": 0, "offset": 1}]}]}
    (answer,) = kafka_request(broker.bootstrap, ApiKey.DELETE_RECORDS, 1, body).topics[0].partitions
    assert (answer.error_code, answer.low_watermark) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert _earliest(broker, topic) == 0
    assert delete(topic, -1).low_watermark == 10  # -1: up to the high watermark
    assert _earliest(broker, topic) == 10

    compacted = new_topic("compacted")
    _filled(broker, admin, compacted, **{"cleanup.policy": "compact"})
    with pytest.raises(KafkaException) as caught:
        delete(compacted, 2)
    assert caught.value.args[0].name() == "POLICY_VIOLATION"


def test_aiokafka_deletes_records(broker, admin, new_topic):
    topic = new_topic("aiokafka")
    _filled(broker, admin, topic)

    async def delete():
        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            return await client.delete_records({AioTopicPartition(topic, 0): RecordsToDelete(7)})
        finally:
            await client.close()

    assert asyncio.run(delete()) == {AioTopicPartition(topic, 0): 7}
    assert _earliest(broker, topic) == 7


def test_deleted_segments_go_and_the_log_start_survives_a_restart(minikafka_broker_factory, new_topic):
    broker = minikafka_broker_factory()
    topic = new_topic("restarted")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    _filled(broker, admin, topic, count=30, **{"segment.bytes": "200"})
    directory = broker.log_dir / f"{topic}-0"
    segments = sorted(p.name for p in directory.glob("*.log"))
    assert len(segments) > 3
    # The base offset of the third segment, plus one: inside it.
    target = int(segments[2][:20]) + 1
    admin.delete_records({TopicPartition(topic, 0): target})
    admin.close()
    assert sorted(p.name for p in directory.glob("*.log")) == segments[2:]
    assert f"{topic} 0 {target}" in (broker.log_dir / "log-start-offset-checkpoint").read_text()
    broker.kill()
    broker.start()
    assert _earliest(broker, topic) == target
    assert _fetch_error(broker, topic, target - 1) == ErrorCode.OFFSET_OUT_OF_RANGE
