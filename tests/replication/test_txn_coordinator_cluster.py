"""The transaction coordinator on a real 3-broker cluster (issue 26): ``__transaction_state``
is created through ZooKeeper and the controller, as ``__consumer_offsets`` is, replicated with
``transaction.state.log.replication.factor`` and its ``min.insync.replicas`` from
``transaction.state.log.min.isr`` (Kafka 2.8's TransactionStateManager / AdminZkClient)."""

from __future__ import annotations

import time

import pytest

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.testing import kafka_request

from .test_admin_cluster import _described

pytestmark = pytest.mark.timeout(300)

TXN_TOPIC = "__transaction_state"
TXN_PARTITIONS = 3


def find_txn_coordinator(broker, transactional_id: str):
    return kafka_request(broker.bootstrap, ApiKey.FIND_COORDINATOR, 1, {"key": transactional_id, "key_type": 1})


def test_transaction_state_topic_is_created_replicated_through_the_controller(minikafka_cluster_factory):
    cluster = minikafka_cluster_factory(3, **{"transaction.state.log.num.partitions": str(TXN_PARTITIONS),
                                               "transaction.state.log.min.isr": "2"})
    # Any broker's first FindCoordinator for a transactional id creates the topic.
    find_txn_coordinator(cluster.broker(2), "tx")
    deadline = time.monotonic() + 60
    while True:
        topics = [t for t in cluster.metadata([TXN_TOPIC], via=cluster.broker(1)).topics if t.error_code == 0]
        if topics and len(topics[0].partitions) == TXN_PARTITIONS and all(
                p.leader_id > 0 and len(p.isr_nodes) == 3 for p in topics[0].partitions):
            break
        assert time.monotonic() < deadline, "no replicated __transaction_state"
        time.sleep(0.2)
    (topic,) = topics
    assert topic.is_internal
    assert all(sorted(p.replica_nodes) == [1, 2, 3] for p in topic.partitions)
    for broker_id in cluster.ids:
        broker = cluster.broker(broker_id)
        assert _described(broker, TXN_TOPIC, "min.insync.replicas") == "2"
        assert _described(broker, TXN_TOPIC, "cleanup.policy") == "compact"
        assert _described(broker, TXN_TOPIC, "unclean.leader.election.enable") == "false"
        # Not created a second time, nor locally: every broker's answer leaves it as it is.
        assert find_txn_coordinator(broker, "tx").error_code in (
            ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
