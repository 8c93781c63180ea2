"""Replica assignment: Kafka's own example and test case, then properties of the algorithm."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.protocol.errors import ErrorCode
from minikafka.replication.assignment import InvalidPartitions, InvalidReplicationFactor, assign_replicas

# AdminUtils' scaladoc, brokers 0-4, ten partitions, three replicas, start index and shift 0:
#   broker-0  broker-1  broker-2  broker-3  broker-4
#   p0        p1        p2        p3        p4       (1st replica)
#   p5        p6        p7        p8        p9       (1st replica)
#   p4        p0        p1        p2        p3       (2nd replica)
#   p8        p9        p5        p6        p7       (2nd replica)
#   p3        p4        p0        p1        p2       (3nd replica)
#   p7        p8        p9        p5        p6       (3nd replica)
SCALADOC_TABLE = [
    ("1st", [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]),
    ("2nd", [[4, 0, 1, 2, 3], [8, 9, 5, 6, 7]]),
    ("3rd", [[3, 4, 0, 1, 2], [7, 8, 9, 5, 6]]),
]


def test_reproduces_the_scaladoc_example_table():
    assignment = assign_replicas(10, 3, [0, 1, 2, 3, 4], fixed_start_index=0)
    for position, (_, rows) in enumerate(SCALADOC_TABLE):
        for row in rows:
            for broker, partition in enumerate(row):
                assert assignment[partition][position] == broker, (partition, position)


def test_matches_kafkas_admin_test_expectation():
    # AdminTest.testReplicaAssignment in Kafka 0.10.2.
    assert assign_replicas(10, 3, [0, 1, 2, 3, 4], fixed_start_index=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_start_partition_id_numbers_added_partitions_round_robin():
    # As Kafka: the leaders continue the round-robin from the partition id; the shift starts
    # afresh (it grows only when the id wraps round the broker list within this call).
    assert assign_replicas(3, 3, [0, 1, 2, 3, 4], fixed_start_index=0, start_partition_id=7) == {
        7: [2, 3, 4], 8: [3, 4, 0], 9: [4, 0, 1],
    }


def test_uses_broker_ids_not_positions():
    assert assign_replicas(3, 2, [10, 20, 30], fixed_start_index=0) == {0: [10, 20], 1: [20, 30], 2: [30, 10]}


def test_too_high_replication_factor_is_refused_with_kafkas_message():
    with pytest.raises(InvalidReplicationFactor, match="replication factor: 3 larger than available brokers: 2") as info:
        assign_replicas(4, 3, [1, 2])
    assert info.value.error_code == ErrorCode.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize("rf", [0, -1])
def test_non_positive_replication_factor_is_refused(rf):
    with pytest.raises(InvalidReplicationFactor, match="larger than 0"):
        assign_replicas(1, rf, [1, 2])


@pytest.mark.parametrize("partitions", [0, -3])
def test_non_positive_partition_count_is_refused(partitions):
    with pytest.raises(InvalidPartitions, match="larger than 0") as info:
        assign_replicas(partitions, 1, [1])
    assert info.value.error_code == ErrorCode.INVALID_PARTITIONS


def test_duplicate_broker_ids_are_refused():
    with pytest.raises(ValueError, match="distinct"):
        assign_replicas(2, 2, [1, 1, 2])


def test_random_start_comes_from_rng():
    brokers = list(range(6))
    one = assign_replicas(12, 3, brokers, rng=random.Random(7))
    assert one == assign_replicas(12, 3, brokers, rng=random.Random(7))
    starts = {assign_replicas(1, 1, brokers, rng=random.Random(seed))[0][0] for seed in range(50)}
    assert len(starts) > 1  # the start index really is drawn


cases = st.integers(min_value=1, max_value=9).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.integers(min_value=1, max_value=n),                      # replication factor
        st.integers(min_value=1, max_value=60),                     # partitions
        st.lists(st.integers(0, 1000), min_size=n, max_size=n, unique=True),
        st.integers(min_value=-1, max_value=n - 1),                 # fixed start index
        st.integers(min_value=-1, max_value=40),                    # start partition id
        st.integers(min_value=0, max_value=2**32),                  # rng seed
    )
)


@settings(max_examples=200, deadline=None)
@given(cases)
def test_properties(case):
    n, rf, partitions, brokers, fixed, start_id, seed = case
    assignment = assign_replicas(partitions, rf, brokers, fixed_start_index=fixed,
                                 start_partition_id=start_id, rng=random.Random(seed))
    first_id = max(0, start_id)
    assert sorted(assignment) == list(range(first_id, first_id + partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(brokers)
    # Leaders go round-robin: no broker leads more than one partition above any other.
    leaders = Counter(replicas[0] for replicas in assignment.values())
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    if fixed >= 0:
        assert assignment == assign_replicas(partitions, rf, brokers, fixed_start_index=fixed,
                                             start_partition_id=start_id, rng=random.Random(seed + 1))
