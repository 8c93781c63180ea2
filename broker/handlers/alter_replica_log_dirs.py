"""AlterReplicaLogDirs (key 34), v0-v2 (KIP-113): move replicas of this broker between its
log dirs (Partitions.alter_replica_log_dir, then Partitions.move_replicas in the background).

As Kafka 2.8's KafkaApis: ALTER on the cluster is needed, else every partition answers
CLUSTER_AUTHORIZATION_FAILED and nothing is done. A partition named twice goes where its last
mention says (Kafka reads the request into a map). The answer lists each topic once."""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.ALTER_REPLICA_LOG_DIRS


async def handle(broker, request) -> dict:
    wanted: dict[tuple[str, int], str] = {}
    for entry in request.body.dirs:
        for topic in entry.topics:
            for partition in topic.partitions:
                wanted[(topic.name, partition)] = entry.path
    if broker.authorize(request, "Alter", "Cluster"):
        errors = {key: await broker.partitions.alter_replica_log_dir(*key, path) for key, path in wanted.items()}
    else:
        errors = dict.fromkeys(wanted, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return {"results": [{"topic_name": topic, "partitions": partitions} for topic, partitions in by_topic.items()]}
