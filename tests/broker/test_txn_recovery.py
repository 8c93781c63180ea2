"""Transactions across kill -9: a broker process writes committed, aborted, committing (its COMMIT
marker on one partition of two) and open transactions through the partition interface a
coordinator uses, and is killed; the broker that recovers its log dir answers READ_COMMITTED
fetches with the same last stable offsets and aborted transactions as the killed one did."""

from __future__ import annotations

import json
import subprocess
import sys

import trio

from minikafka.protocol.apis import ApiKey

from .conftest import fetch_body

WRITER = r"""
import json, sys, time
import trio
from minikafka.broker.config import BrokerConfig
from minikafka.broker.server import Broker
from minikafka.protocol.record_batch import build_record_batch

async def main(log_dir):
    broker = Broker(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": log_dir,
                                  "log.segment.bytes": "700", "num.partitions": "2"}))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        partitions = broker.partitions
        await partitions.ensure_topic("tx")
        sequences = {}

        def data(producer, partition, count, transactional=True):
            sequence = sequences.get((producer, partition), 0)
            sequences[(producer, partition)] = sequence + count
            now = int(time.time() * 1000)
            batch = build_record_batch([(None, b"%d-%d" % (producer, sequence + i), now, ()) for i in range(count)],
                                       producer_id=producer, producer_epoch=0, base_sequence=sequence,
                                       transactional=transactional)
            partitions.append("tx", partition, bytes(batch), -1)

        async def end(producer, partition, commit):
            code = await partitions.append_txn_marker("tx", partition, producer_id=producer, producer_epoch=0,
                                                      coordinator_epoch=0, commit=commit)
            assert code == 0, code

        for round in range(4):  # several segments, aborts in more than one
            data(1, 0, 3); data(2, 0, 2); data(1, 1, 2)
            await end(1, 0, True); await end(1, 1, True)   # committed
            data(3, 1, 1, transactional=False)
            await end(2, 0, False)                         # aborted
        data(4, 0, 2); data(4, 1, 2)
        await end(4, 0, True)                              # committing: p1's marker not written yet
        data(5, 0, 1); data(1, 1, 1)                       # open
        data(2, 0, 1); await end(2, 0, False)              # aborted after the open one began
        seen = {}
        for partition in (0, 1):
            log = partitions.leader_log("tx", partition)
            stable = partitions.last_stable_offset(log)
            _, aborted = log.read_committed(0, 1 << 30, stable)
            seen[partition] = [stable, log.log_end_offset, [[t.producer_id, t.first_offset] for t in aborted],
                               [list(t) for t in log.aborted_transactions()]]
        print(json.dumps(seen), flush=True)
        await trio.sleep_forever()

trio.run(main, sys.argv[1])
"""


async def test_last_stable_offsets_and_aborted_transactions_survive_kill_9(tmp_path, start_broker, connect):
    log_dir = tmp_path / "data"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log_dir)], stdout=subprocess.PIPE, text=True)
    try:
        line = await trio.to_thread.run_sync(writer.stdout.readline)
    finally:
        writer.kill()  # SIGKILL: no clean shutdown, the next start recovers
        writer.wait()
    before = {int(partition): answer for partition, answer in json.loads(line).items()}
    assert before[1][0] < before[1][1]  # the committing and the open transactions hold p1's LSO back

    broker = await start_broker({"log.dirs": str(log_dir)})
    client = await connect(broker)
    response = await client.request(ApiKey.FETCH, 4, {
        **fetch_body([("tx", 0, 0, 1 << 30), ("tx", 1, 0, 1 << 30)]), "isolation_level": 1})
    after = {p.partition_index: [p.last_stable_offset, p.high_watermark,
                                 [[t.producer_id, t.first_offset] for t in p.aborted_transactions],
                                 [list(t) for t in broker.partitions.leader_log("tx", p.partition_index)
                                  .aborted_transactions()]]
             for p in response.responses[0].partitions}
    assert after == before
    assert len(before[0][3]) == 5  # each in its segment's .txnindex, rebuilt by recovery
