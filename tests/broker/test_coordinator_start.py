"""A single broker starts its group and transaction coordinators at the first request that
needs them (Broker.groups, Broker.transactions): one whose state topic the disk refused is
not started, its requests are answered COORDINATOR_NOT_AVAILABLE (clients retry), and the
next request starts it."""

from __future__ import annotations

import pytest

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

LIST_GROUPS = (ApiKey.LIST_GROUPS, 0, {})
INIT_TRANSACTIONAL_ID = (ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": "tx", "transaction_timeout_ms": 60000})


@pytest.mark.parametrize("state_topic, request_", [("__consumer_offsets", LIST_GROUPS),
                                                    ("__transaction_state", INIT_TRANSACTIONAL_ID)])
async def test_a_coordinator_the_disk_refused_starts_at_the_next_request(broker, client, state_topic, request_):
    # A file where the state topic's first partition directory goes: its creation fails.
    blocker = broker.config.log_dirs[0] / f"{state_topic}-0"
    blocker.write_bytes(b"")
    assert (await client.request(*request_)).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert state_topic not in broker.partitions.topics()
    blocker.unlink()
    assert (await client.request(*request_)).error_code == ErrorCode.NONE
    assert state_topic in broker.partitions.topics()
