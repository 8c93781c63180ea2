"""Background duties in the broker's nursery: retention, time-based flushes, checkpoints."""

from __future__ import annotations

import time

import trio

from minikafka.protocol.apis import ApiKey


async def wait_until(condition, timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.02)


async def test_retention_pass_deletes_expired_segments(start_broker, connect, message_set):
    broker = await start_broker(log_retention_check_interval_ms=50)
    await broker.partitions.create_topic("expiring", 1, 1, {}, {"retention.ms": "60000", "segment.bytes": "200"})
    client = await connect(broker)
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    for i in range(3):  # one set per segment: two do not fit in 200 bytes
        old = await client.produce("expiring", 0, message_set(b"old-%d" % i + b"." * 100, timestamp=an_hour_ago))
        assert old.error_code == 0
    assert (await client.produce("expiring", 0, message_set(b"fresh" + b"." * 100))).error_code == 0
    log = broker.log_manager.get_log("expiring", 0)
    await wait_until(lambda: log.log_start_offset == 3)
    earliest = await client.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": "expiring", "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
    assert earliest.topics[0].partitions[0].offset == 3
    fetched = await client.fetch("expiring", 0, 3)
    assert fetched.error_code == 0 and b"fresh" in bytes(fetched.records)


async def test_time_based_flush_and_periodic_checkpoints(start_broker, connect, message_set):
    broker = await start_broker(log_flush_interval_ms=10, log_flush_scheduler_interval_ms=20,
                                log_flush_offset_checkpoint_interval_ms=50)
    client = await connect(broker)
    for i in range(5):
        await client.produce("flushed", 0, message_set(b"%d" % i))
    log = broker.log_manager.get_log("flushed", 0)
    await wait_until(lambda: log.recovery_point == 5)
    checkpoint = broker.config.log_dirs[0] / "recovery-point-offset-checkpoint"
    await wait_until(lambda: checkpoint.exists() and "flushed 0 5" in checkpoint.read_text())
    high_watermarks = broker.config.log_dirs[0] / "replication-offset-checkpoint"
    await wait_until(lambda: high_watermarks.exists() and "flushed 0 5" in high_watermarks.read_text())


async def test_without_flush_interval_the_page_cache_decides(broker, client, message_set):
    for i in range(3):
        await client.produce("unflushed", 0, message_set(b"%d" % i))
    await trio.sleep(0.3)
    assert broker.log_manager.get_log("unflushed", 0).recovery_point == 0  # Kafka's default: no fsync per message
