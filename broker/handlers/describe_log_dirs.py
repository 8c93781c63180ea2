"""DescribeLogDirs (key 35), v0-v4: each of this broker's log dirs with the replicas it holds
(all of them, or the topics and partitions asked for), their sizes and how far each log end is
past the high watermark; v4 adds each dir's total and usable bytes.

As Kafka's KafkaApis: DESCRIBE on the cluster is needed; without it the answer lists no dir
(and, from v3, says CLUSTER_AUTHORIZATION_FAILED).

A replica being moved (AlterReplicaLogDirs) is listed twice, as Kafka lists it: in its dir,
and as ``is_future_key`` in the dir it is moving to, the future's offset lag being how far
its log end is behind the replica's. The replica's own lag is how far its log end is behind
its high watermark, max(high watermark - log end, 0): 0 but on a follower truncated below
it. Both as Kafka 2.8's ReplicaManager.getLogEndOffsetLag."""

from __future__ import annotations

import shutil

import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.DESCRIBE_LOG_DIRS


async def handle(broker, request) -> dict:
    if not broker.authorize(request, "Describe", "Cluster"):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    asked = request.body.topics
    wanted = None if asked is None else {(t.topic, p) for t in asked for p in t.partitions}
    by_dir: dict = {log_dir: {} for log_dir in broker.config.log_dirs}
    for log in broker.log_manager.logs():
        if wanted is not None and (log.topic, log.partition) not in wanted:
            continue
        entry = {"partition_index": log.partition, "partition_size": log.size_in_bytes,
                 "offset_lag": max(0, log.high_watermark - log.log_end_offset)}
        by_dir.setdefault(log.dir.parent, {}).setdefault(log.topic, []).append(entry)
        future = log.future
        if future is not None:
            entry = {"partition_index": log.partition, "partition_size": future.size_in_bytes,
                     "offset_lag": max(0, log.log_end_offset - future.log_end_offset), "is_future_key": True}
            by_dir.setdefault(future.dir.parent, {}).setdefault(log.topic, []).append(entry)
    results = []
    for log_dir, topics in by_dir.items():
        usage = await trio.to_thread.run_sync(shutil.disk_usage, log_dir)
        results.append({"error_code": ErrorCode.NONE, "log_dir": str(log_dir),
                        "topics": [{"name": name, "partitions": sorted(partitions, key=lambda p: (p["partition_index"], p.get("is_future_key", False)))}
                                   for name, partitions in sorted(topics.items())],
                        "total_bytes": usage.total, "usable_bytes": usage.free})
    return {"error_code": ErrorCode.NONE, "results": results}
