"""Consumers of Fetch v0-v3 (kafka-python pinned to an old broker version) reading topics of
every message format from a real broker: record batches are down-converted as the response is
written (broker.down_conversion), headers dropped, zstd refused."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

CODECS = [None, "gzip", "snappy", "lz4"]
# kafka-python's api_version -> the Fetch version it sends -> the magic it reads: (0, 9)
# Fetch v1, magic 0; (0, 10, 0) v2 and (0, 10, 1) v3, magic 1. (kafka-python 3.0 pinned to
# (0, 10, 2) takes the broker's own versions when ApiVersions identifies it as 0.10.2 too,
# and fetches with v6.)
OLD_CONSUMERS = {"0.9": (0, 9), "0.10.0": (0, 10, 0), "0.10.1": (0, 10, 1)}


def create(bootstrap: str, topic: str, **configs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs)])
    finally:
        admin.close()


def produce_v2(bootstrap: str, topic: str, records, *, codec: str = "none") -> None:
    """``(key, value, headers)`` records as record batches (confluent-kafka, librdkafka)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers or None, partition=0)
    assert producer.flush(30) == 0


def produce_magic_1(bootstrap: str, topic: str, records, *, codec: str | None = None) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=(0, 10), compression_type=codec)
    for key, value, _ in records:
        producer.send(topic, key=key, value=value, partition=0)
    producer.flush(timeout=30)
    producer.close(timeout=10)


def consume_old(bootstrap: str, topic: str, count: int, api_version, *, timeout: float = 30.0, **config):
    if api_version is not None:
        config["api_version"] = api_version
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **config)
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        records = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            records.extend(consumer.poll(timeout_ms=500).get(tp, []))
        return records
    finally:
        consumer.close()


def records_with_headers(count: int, value_size: int = 40):
    return [(b"k%d" % i if i % 4 else None, (b"value %d " % i).ljust(value_size, b"."),
             [("traceparent", b"00-%032x-%016x-01" % (i, i))] if i % 2 else [])
            for i in range(count)]


@pytest.mark.parametrize("consumer", OLD_CONSUMERS)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_old_consumers_read_a_v2_topic_with_headers_dropped(broker, topic, consumer, codec):
    records = records_with_headers(300)
    produce_v2(broker.bootstrap, topic, records, codec=codec or "none")
    got = consume_old(broker.bootstrap, topic, len(records), OLD_CONSUMERS[consumer])
    assert [(r.offset, r.key, r.value) for r in got] == [(i, k, v) for i, (k, v, _) in enumerate(records)]
    assert all(not r.headers for r in got)
    if consumer == "0.9":  # magic 0: no timestamps
        assert {r.timestamp for r in got} == {None}
    else:
        assert all(r.timestamp > 1_600_000_000_000 and r.timestamp_type == 0 for r in got)


@pytest.mark.parametrize("consumer", OLD_CONSUMERS)
def test_partitions_larger_than_a_fetch_go_through_in_order(broker, topic, consumer):
    """3 MiB of small records: each 1 MiB fetch is converted in 128 KiB chunks, cut or filled
    up to the size its response promised, and the consumer goes on from where it ended."""
    records = records_with_headers(12_000, value_size=240)
    produce_v2(broker.bootstrap, topic, records, codec="lz4")
    got = consume_old(broker.bootstrap, topic, len(records), OLD_CONSUMERS[consumer], timeout=120)
    assert [r.offset for r in got] == list(range(len(records)))
    assert [r.value for r in got] == [v for _, v, _ in records]


def produce_zstd_batch(bootstrap: str, topic: str, count: int) -> None:
    """One zstd batch built by kafka-python's producer code, sent as Produce v7 over a plain
    socket (librdkafka and kafka-python offer zstd only to brokers with Fetch v10)."""
    import socket
    import struct

    from kafka.record.default_records import DefaultRecordBatchBuilder

    from minikafka.protocol import ApiKey
    from minikafka.protocol.framing import decode_response, encode_request

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=4, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=int(time.time() * 1000), key=None, value=b"zstd record %d " % i * 20, headers=[])
    batch = bytes(builder.build())
    assert batch[22] & 7 == 4
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock, sock.makefile("rb") as replies:
        sock.sendall(encode_request(ApiKey.PRODUCE, 7, 1, "zstd-test", body))
        size = replies.read(4)
        response = decode_response(ApiKey.PRODUCE, 7, size + replies.read(struct.unpack(">i", size)[0]))
    assert response.responses[0].partition_responses[0].error_code == 0


@pytest.mark.parametrize("consumer", OLD_CONSUMERS)
def test_zstd_is_refused_with_unsupported_compression_type(broker, topic, consumer):
    from kafka.errors import UnsupportedCompressionTypeError

    create(broker.bootstrap, topic)
    produce_zstd_batch(broker.bootstrap, topic, 10)
    with pytest.raises(UnsupportedCompressionTypeError):
        consume_old(broker.bootstrap, topic, 10, OLD_CONSUMERS[consumer], timeout=10)


def change_format(broker, topic: str, version: str) -> None:
    """Set ``topic``'s message.format.version with the broker stopped: its overrides live in
    each partition directory (storage.log_manager), as Kafka's live in ZooKeeper."""
    broker.stop()
    for properties in broker.log_dir.glob(f"{topic}-*/topic-config.properties"):
        lines = [line for line in properties.read_text().splitlines() if not line.startswith("message.format.version=")]
        properties.write_text("".join(f"{line}\n" for line in lines + [f"message.format.version={version}"]))
    broker.start()


def test_a_topic_whose_format_changed_reads_whole(minikafka_broker_factory, new_topic):
    """magic 1 segments written under message.format.version 0.10.2, then record batches once
    the topic says 2.8: one log, both formats, read by old consumers and a new one as one."""
    broker = minikafka_broker_factory()
    topic = new_topic("mixed")
    create(broker.bootstrap, topic, **{"message.format.version": "0.10.2"})
    first = records_with_headers(50)
    produce_magic_1(broker.bootstrap, topic, first, codec="gzip")
    change_format(broker, topic, "2.8")
    second = records_with_headers(50)
    produce_v2(broker.bootstrap, topic, second, codec="snappy")
    for api_version in OLD_CONSUMERS.values():
        got = consume_old(broker.bootstrap, topic, 100, api_version)
        assert [(r.offset, r.value) for r in got] == [(i, v) for i, (_, v, _) in enumerate(first + second)]
    got = consume_old(broker.bootstrap, topic, 100, None)  # today's kafka-python: Fetch v4+, no conversion
    assert [(r.offset, r.value, r.headers) for r in got] == [
        (i, v, h if i >= 50 else []) for i, (_, v, h) in enumerate(first + second)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_old_consumers_read_a_magic_1_topic_as_before(broker, new_topic, codec):
    topic = new_topic("magic1")
    create(broker.bootstrap, topic, **{"message.format.version": "0.10.2"})
    records = records_with_headers(2000, value_size=200)
    produce_magic_1(broker.bootstrap, topic, records, codec=codec)
    for api_version in OLD_CONSUMERS.values():
        got = consume_old(broker.bootstrap, topic, len(records), api_version)
        assert [(r.offset, r.key, r.value) for r in got] == [(i, k, v) for i, (k, v, _) in enumerate(records)]


def test_converted_records_go_out_over_tls(minikafka_broker_factory, topic):
    """TLS rules out sendfile; converted chunks are encrypted and sent like any response."""
    from confluent_kafka import Producer

    broker = minikafka_broker_factory(security_protocol="SSL")
    records = records_with_headers(3000, value_size=200)
    producer = Producer({**broker.client_config("confluent-kafka"), "compression.type": "gzip"})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers or None, partition=0)
    assert producer.flush(30) == 0
    config = broker.client_config()
    config.pop("bootstrap_servers")
    for api_version in OLD_CONSUMERS.values():
        got = consume_old(broker.bootstrap, topic, len(records), api_version, **config)
        assert [(r.offset, r.value) for r in got] == [(i, v) for i, (_, v, _) in enumerate(records)]
