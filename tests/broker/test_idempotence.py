"""The idempotent producer's broker side over real sockets: InitProducerId (ids, refusals,
ACLs) and the Metadata versions a 0.11+ client expects with it (v4-v8)."""

from __future__ import annotations

import time

import pytest

from minikafka.broker.producer_ids import BLOCK_FILE, ProducerIdBlock
from minikafka.broker.security.acl import Acl, AclStore, Authorizer
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.apis.metadata import AUTHORIZED_OPERATIONS_OMITTED
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.record_batch import build_record_batch

IDEMPOTENT = {"transactional_id": None, "transaction_timeout_ms": 60000}


@pytest.mark.parametrize("version", [0, 1])
async def test_init_producer_id_hands_out_new_ids_at_epoch_0(broker, client, connect, version):
    first = await client.request(ApiKey.INIT_PRODUCER_ID, version, IDEMPOTENT)
    other = await (await connect(broker)).request(ApiKey.INIT_PRODUCER_ID, version, IDEMPOTENT)
    assert (first.error_code, first.producer_id, first.producer_epoch) == (0, 0, 0)
    assert (other.error_code, other.producer_id, other.producer_epoch) == (0, 1, 0)
    # The block is durable before its first id is handed out: a restart claims the next one.
    block = ProducerIdBlock.decode((broker.config.log_dirs[0] / BLOCK_FILE).read_bytes())
    assert (block.first, block.broker) == (0, broker.node_id)


def test_idempotent_write_needs_the_cluster_acl_or_write_on_some_topic(tmp_path):
    """Kafka 2.8's authorizeByResourceType (KIP-679) for literal ACLs."""
    store = AclStore(tmp_path)
    authorizer = Authorizer(store)
    assert not authorizer.authorize_any("User:alice", "h", "Write", "Topic")
    store.add("Topic:orders", [Acl.make("User:alice", "Write"), Acl.make("User:bob", "Read")])
    assert authorizer.authorize_any("User:alice", "h", "Write", "Topic")
    assert not authorizer.authorize_any("User:bob", "h", "Write", "Topic")  # Read is not Write
    store.add("Topic:orders", [Acl.make("User:alice", "Write", "Deny")])
    assert not authorizer.authorize_any("User:alice", "h", "Write", "Topic")  # its one topic is denied
    store.add("Topic:*", [Acl.make("User:bob", "All")])
    assert authorizer.authorize_any("User:bob", "h", "Write", "Topic")
    store.add("Topic:*", [Acl.make("User:bob", "Write", "Deny")])
    assert not authorizer.authorize_any("User:bob", "h", "Write", "Topic")  # a DENY on * denies all
    store.add("Cluster:kafka-cluster", [Acl.make("User:carol", "IdempotentWrite")])
    assert authorizer.authorize("User:carol", "h", "IdempotentWrite", "Cluster", "kafka-cluster")
    assert Authorizer(store, allow_if_no_acls=True).authorize_any("User:dave", "h", "Write", "Topic")


async def test_init_producer_id_is_authorized_as_kafka_2_8_does(start_broker, connect):
    broker = await start_broker({"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer"})
    client = await connect(broker)
    store = AclStore(broker.config.log_dirs[0])
    denied = await client.request(ApiKey.INIT_PRODUCER_ID, 0, IDEMPOTENT)
    assert denied.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    store.add("Topic:somewhere", [Acl.make("User:ANONYMOUS", "Write")])
    assert (await client.request(ApiKey.INIT_PRODUCER_ID, 0, IDEMPOTENT)).error_code == ErrorCode.NONE
    store.remove("Topic:somewhere")
    store.add("Cluster:kafka-cluster", [Acl.make("User:ANONYMOUS", "IdempotentWrite")])
    assert (await client.request(ApiKey.INIT_PRODUCER_ID, 0, IDEMPOTENT)).error_code == ErrorCode.NONE


def metadata_body(*names: str, **flags) -> dict:
    return {"topics": [{"name": name} for name in names], **flags}


async def test_metadata_v4_creates_a_missing_topic_only_if_the_client_allows(broker, client):
    refused = await client.request(ApiKey.METADATA, 4, metadata_body("kept-out", allow_auto_topic_creation=False))
    assert [(t.name, t.error_code) for t in refused.topics] == [("kept-out", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert not broker.partitions.topic_exists("kept-out")
    created = await client.request(ApiKey.METADATA, 4, metadata_body("let-in", allow_auto_topic_creation=True))
    assert [(t.name, t.error_code) for t in created.topics] == [("let-in", ErrorCode.NONE)]


@pytest.mark.parametrize("version", [5, 6, 7, 8])
async def test_metadata_v5_to_v8_partition_fields(start_broker, connect, version):
    broker = await start_broker(num_partitions=2)
    client = await connect(broker)
    answer = await client.request(ApiKey.METADATA, version, metadata_body("t"))
    [topic] = answer.topics
    expected_epoch = 0 if version >= 7 else -1  # absent before v7: the field's default
    assert [(p.partition_index, p.leader_id, p.leader_epoch, list(p.offline_replicas)) for p in topic.partitions] == [
        (0, 0, expected_epoch, []), (1, 0, expected_epoch, [])]
    assert topic.topic_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
    assert answer.cluster_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED


async def test_metadata_v8_authorized_operations_when_asked(client):
    answer = await client.request(ApiKey.METADATA, 8, metadata_body(
        "t", include_cluster_authorized_operations=True, include_topic_authorized_operations=True))
    # No authorizer: every operation each resource type supports (Kafka's AclOperation codes).
    assert answer.topics[0].topic_authorized_operations == sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))
    assert answer.cluster_authorized_operations == sum(1 << code for code in (5, 7, 8, 9, 10, 11, 12))


def idempotent_batch(producer_id: int, sequence: int, count: int = 1, epoch: int = 0) -> bytes:
    now = int(time.time() * 1000)
    return bytes(build_record_batch([(None, b"r%d" % (sequence + i), now, ()) for i in range(count)],
                                    producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence))


async def test_sequence_numbers_are_checked_as_kafka_2_8_does(broker, client):
    producer_id = (await client.request(ApiKey.INIT_PRODUCER_ID, 0, IDEMPOTENT)).producer_id

    async def produce(sequence: int, count: int = 1, *, epoch: int = 0, pid: int = producer_id):
        answer = await client.produce("seq", 0, idempotent_batch(pid, sequence, count, epoch), acks=-1, version=3)
        return ErrorCode(answer.error_code), answer.base_offset

    assert await produce(0, 2) == (ErrorCode.NONE, 0)
    assert await produce(2, 3) == (ErrorCode.NONE, 2)
    # A retry of a batch among the producer's last five: its original offsets, nothing appended.
    assert await produce(0, 2) == (ErrorCode.NONE, 0)
    assert await produce(2, 3) == (ErrorCode.NONE, 2)
    assert await produce(6) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)  # 5 is missing
    assert await produce(3, 2) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)  # not a batch it sent
    assert await produce(0, epoch=1) == (ErrorCode.NONE, 5)  # a new epoch starts at 0
    assert await produce(5, epoch=0) == (ErrorCode.INVALID_PRODUCER_EPOCH, -1)
    assert await produce(3, epoch=2) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    # A producer the partition does not know may start anywhere (its state may have expired):
    # Kafka 2.8 accepts it (KIP-360) rather than answer UNKNOWN_PRODUCER_ID.
    assert await produce(7, pid=producer_id + 500) == (ErrorCode.NONE, 6)
    assert broker.partitions.leader_log("seq", 0).log_end_offset == 7
