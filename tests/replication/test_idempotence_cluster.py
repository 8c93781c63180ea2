"""Idempotent producers of two clients through a leader's death in a 3-broker cluster
(acks=all): every acknowledged record is kept, none is stored twice, none is skipped; the
followers built the producer state from the batches they copied, so the new leader catches
the retries of batches the old one had appended; Metadata v8 reports the new leader epoch and
the dead replica offline; and the replicas' producer snapshots are byte-identical."""

from __future__ import annotations

import os
import threading
import time

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer

from minikafka.protocol.apis import ApiKey
from minikafka.testing import kafka_request

from .test_cluster_faults import read_all
from .test_leader_changes import wait_for

pytestmark = pytest.mark.timeout(300)

TOPIC = "idem"


class Stream(threading.Thread):
    """Produces ``<prefix>-0``, ``<prefix>-1``, ... until stopped, noting what was acknowledged."""

    def __init__(self, prefix: str, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.prefix, self.bootstrap = prefix, bootstrap
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.stop = threading.Event()

    def value(self, i: int) -> bytes:
        return f"{self.prefix}-{i}".encode()


class KafkaPythonStream(Stream):
    def run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, enable_idempotence=True, acks="all",
                                 request_timeout_ms=10000, delivery_timeout_ms=120000, linger_ms=2)
        i = 0
        try:
            while not self.stop.is_set():
                future = producer.send(TOPIC, self.value(i), partition=0)
                future.add_callback(lambda metadata, value=self.value(i): self.acked.append(value))
                future.add_errback(lambda error: self.failed.append(repr(error)))
                i += 1
                time.sleep(0.002)
            producer.flush(120)
        finally:
            producer.close(10)


class ConfluentStream(Stream):
    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                             "delivery.timeout.ms": 120000})

        def delivered(error, message) -> None:
            if error is None:
                self.acked.append(message.value())
            else:
                self.failed.append(str(error))

        i = 0
        while not self.stop.is_set():
            producer.produce(TOPIC, self.value(i), partition=0, on_delivery=delivered)
            producer.poll(0)
            i += 1
            time.sleep(0.002)
        assert producer.flush(120) == 0


def partition_metadata(cluster, via: int):
    answer = kafka_request(cluster.broker(via).bootstrap, ApiKey.METADATA, 8,
                           {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
    return answer.topics[0].partitions[0]


def snapshots(cluster, broker_id: int) -> dict[str, bytes]:
    directory = cluster.broker(broker_id).log_dir / f"{TOPIC}-0"
    return {name: (directory / name).read_bytes() for name in os.listdir(directory) if name.endswith(".snapshot")}


def test_idempotent_producers_lose_and_duplicate_nothing_when_the_leader_dies(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(**{"min.insync.replicas": "2"})
    cluster.create_topic(TOPIC)
    leader = cluster.leader(TOPIC, 0)
    streams = [KafkaPythonStream("kafka-python", cluster.bootstrap), ConfluentStream("confluent", cluster.bootstrap)]
    for stream in streams:
        stream.start()
    wait_for(lambda: all(len(s.acked) >= 100 for s in streams), "100 records of each producer acknowledged", 60)
    cluster.kill(leader)
    before = [len(s.acked) for s in streams]
    # Metadata v7 tells the new leader's epoch, v5 the dead broker's replica as offline.
    new_leader = cluster.leader(TOPIC, 0)
    wait_for(lambda: list(partition_metadata(cluster, new_leader).offline_replicas) == [leader],
             "the killed leader's replica reported offline")
    assert partition_metadata(cluster, new_leader).leader_epoch >= 1
    wait_for(lambda: all(len(s.acked) >= count + 100 for s, count in zip(streams, before)),
             "100 more of each acknowledged by the new leader", 90)
    for stream in streams:
        stream.stop.set()
    for stream in streams:
        stream.join(150)
    assert [s.failed for s in streams] == [[], []]
    cluster.restart(leader)
    cluster.wait_for_full_isr([TOPIC])
    stored = read_all(cluster.bootstrap, TOPIC)
    for stream in streams:
        mine = [value for value in stored if value.startswith(stream.prefix.encode() + b"-")]
        # In order, each once, none skipped: exactly the first len(mine) values.
        assert mine == [stream.value(i) for i in range(len(mine))], stream.prefix
        assert set(stream.acked) <= set(mine)
    for broker_id in cluster.ids:  # each writes a snapshot at its log end as it stops
        cluster.stop(broker_id)
    found = [snapshots(cluster, broker_id) for broker_id in cluster.ids]
    end = f"{len(stored):020d}.snapshot"
    assert all(end in files for files in found)
    for name in set(found[0]) & set(found[1]) & set(found[2]):
        assert found[0][name] == found[1][name] == found[2][name], name
