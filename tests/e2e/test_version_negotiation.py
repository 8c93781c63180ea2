"""Version negotiation as real clients do it, against the real broker in default configuration.

kafka-python 3 opens with ApiVersions v4 and librdkafka with v3; the broker answers what it does
not serve with Kafka's v0-layout UNSUPPORTED_VERSION and its table, from which kafka-python
infers a broker that serves its default idempotent producer.
The byte-level side of this (the v0 layout, no default tagged fields) is tested in
tests/protocol/test_framing.py; here the clients have the last word.
"""

from __future__ import annotations

import json
import shutil
import subprocess


def test_kafka_python_sees_idempotence_served_and_keeps_it_on(broker, topic):
    """kafka-python 3 infers a broker of 0.11 or later from Metadata v4+ and InitProducerId,
    and then produces idempotently by default."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        assert producer.config["api_version"] >= (0, 11)
        assert producer.config["enable_idempotence"] is True
        assert producer.send(topic, b"negotiated").get(timeout=30).offset == 0
    finally:
        producer.close(timeout=5)


def test_kafka_python_infers_kafka_3_0_and_produces_with_flexible_produce(broker, topic):
    """kafka-python 3 takes the broker's Kafka version from the highest API version in its table
    the broker serves; ListOffsets v7 (KIP-734) marks 3.0, Produce v9 (flexible, KIP-482) 2.8.
    Its producer then sends v9 requests (compact strings and records, tagged fields) and reads
    v9 answers."""
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=None)
    try:
        assert producer.config["api_version"] == (3, 0)
        assert producer.send(topic, key=b"k", value=b"flexible").get(timeout=30).offset == 0
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=20000)
    try:
        message = next(consumer)
        assert (message.key, message.value) == (b"k", b"flexible")
    finally:
        consumer.close()


def test_kcat_on_librdkafka_2_0_reads_our_api_versions_and_metadata(broker, topic):
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed by tests/run.sh"
    subprocess.run([kcat, "-P", "-b", broker.bootstrap, "-t", topic], input=b"one\n",
                   check=True, timeout=60)
    result = subprocess.run([kcat, "-L", "-J", "-b", broker.bootstrap, "-t", topic],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    assert [b["name"] for b in listing["brokers"]] == [broker.bootstrap]
    assert [(t["topic"], len(t["partitions"])) for t in listing["topics"]] == [(topic, 1)]


def test_confluent_kafka_admin_lists_topics(broker, topic):
    from confluent_kafka.admin import AdminClient

    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(topic, b"x").get(timeout=30)
    producer.close(timeout=5)
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=20)
    assert metadata.controller_id == 0 and metadata.cluster_id
    assert sorted(metadata.topics[topic].partitions) == [0]
