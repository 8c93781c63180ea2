"""What a leader tells others about a partition while its high watermark lags the log end (its
followers cut off from it): a consumer's ListOffsets never names an offset above the high
watermark, and only a broker may say how far it has replicated."""

from __future__ import annotations

import concurrent.futures

import pytest

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.records import build_message_set
from minikafka.testing import kafka_request

CONSUMER, DEBUGGING = -1, -2  # ListOffsets' replica ids that are no broker


def _lagging_leader(cluster, topic: str) -> tuple[int, list[int]]:
    """``topic`` (one partition, three replicas) with both followers cut off from its leader,
    still in the ISR (replica.lag.time.max.ms is long): (leader id, follower ids)."""
    cluster.create_topic(topic, 1, 3)
    leader = cluster.leader(topic, 0)
    followers = [b for b in cluster.ids if b != leader]
    cluster.partition(followers, [leader])
    return leader, followers


def _produce(leader, topic: str, value: bytes, acks: int, timestamp: int = 1) -> object:
    body = {"acks": acks, "timeout_ms": 3000, "topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": build_message_set([(None, value, timestamp)])}]}]}
    return kafka_request(leader.bootstrap, ApiKey.PRODUCE, 2, body, timeout=30).responses[0].partition_responses[0]


def _list_offsets(leader, topic: str, version: int, replica_id: int, timestamp: int = -1):
    partition = {"partition_index": 0, "timestamp": timestamp, "max_num_offsets": 10}
    answer = kafka_request(leader.bootstrap, ApiKey.LIST_OFFSETS, version,
                           {"replica_id": replica_id, "topics": [{"name": topic, "partitions": [partition]}]})
    found = answer.topics[0].partitions[0]
    assert found.error_code == ErrorCode.NONE
    return found.old_style_offsets if version == 0 else found.offset


@pytest.mark.zookeeper
@pytest.mark.timeout(240)
def test_list_offsets_v0_latest_stops_at_the_high_watermark_for_consumers(minikafka_cluster_factory):
    """Kafka 0.10.2's handleOffsetRequestV0: for a consumer every offset above the high
    watermark is replaced by the high watermark; any other replica id gets the segment list."""
    cluster = minikafka_cluster_factory(3, **{"replica.lag.time.max.ms": "120000"})
    leader_id, _ = _lagging_leader(cluster, "lagging")
    leader = cluster.broker(leader_id)
    for i, value in enumerate((b"a", b"b", b"c")):
        assert _produce(leader, "lagging", value, acks=1, timestamp=1000 * (i + 1)).error_code == ErrorCode.NONE
    assert _list_offsets(leader, "lagging", 1, CONSUMER) == 0  # the high watermark
    # A time lookup finds offset 1, above it (Kafka lets a consumer find the one at it).
    assert _list_offsets(leader, "lagging", 1, CONSUMER, timestamp=2000) == -1
    assert _list_offsets(leader, "lagging", 1, DEBUGGING, timestamp=2000) == 1
    assert _list_offsets(leader, "lagging", 1, CONSUMER, timestamp=1000) == 0
    # The largest timestamp (KIP-734) is offset 2's, above it: a consumer is told of none.
    assert _list_offsets(leader, "lagging", 7, CONSUMER, timestamp=-3) == -1
    assert _list_offsets(leader, "lagging", 7, DEBUGGING, timestamp=-3) == 2
    # The log end 3 and the segment base 0, capped: Kafka's `hw +: offsets.dropWhile(_ > hw)`.
    assert _list_offsets(leader, "lagging", 0, CONSUMER) == [0, 0]
    assert _list_offsets(leader, "lagging", 0, DEBUGGING) == [3, 0]
    assert _list_offsets(leader, "lagging", 0, CONSUMER, timestamp=-2) == [0]


@pytest.mark.zookeeper
@pytest.mark.timeout(240)
def test_a_replica_fetch_without_cluster_action_moves_no_high_watermark(minikafka_cluster_factory, until):
    """A client that claims a follower's id in Fetch is refused (no ClusterAction) before the
    leader records a follower position: the high watermark stays, and an acks=all produce
    times out while the real followers are cut off."""
    cluster = minikafka_cluster_factory(
        3, security_protocol="SASL_PLAINTEXT", users={"mallory": "mallory-pw"},
        **{"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
           "super.users": "User:broker;User:ANONYMOUS", "replica.lag.time.max.ms": "120000"})
    leader_id, followers = _lagging_leader(cluster, "guarded")
    leader = cluster.broker(leader_id)
    mallory_at_leader = f"127.0.0.1:{leader.listener_ports['SASL_PLAINTEXT']}"

    def claim_followers_reached(offset: int) -> None:
        for follower in followers:
            body = {"replica_id": follower, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                    "topics": [{"topic": "guarded", "partitions": [
                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}
            answer = kafka_request(mallory_at_leader, ApiKey.FETCH, 3, body, plain_login=("mallory", "mallory-pw"))
            assert answer.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    assert _produce(leader, "guarded", b"one", acks=1).base_offset == 0
    claim_followers_reached(1)
    assert _list_offsets(leader, "guarded", 1, CONSUMER) == 0

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_produce, leader, "guarded", b"two", -1)
        until(lambda: _list_offsets(leader, "guarded", 1, followers[0]) == 2, "the acks=all set appended")
        claim_followers_reached(2)
        assert waiting.result().error_code == ErrorCode.REQUEST_TIMED_OUT
    assert _list_offsets(leader, "guarded", 1, CONSUMER) == 0
