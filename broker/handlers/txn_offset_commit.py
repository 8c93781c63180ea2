"""TxnOffsetCommit (key 28), v0-v3: offsets a transactional producer commits for a group
(``send_offsets_to_transaction``), pending until its transaction ends.

As Kafka 2.8's handleTxnOffsetCommitRequest: the transactional id needs Write
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and the group Read (GROUP_AUTHORIZATION_FAILED), each
on every partition; a topic without Read fails with TOPIC_AUTHORIZATION_FAILED and one the
broker does not have with UNKNOWN_TOPIC_OR_PARTITION; the rest go to the group coordinator
in one transactional append, answered once it is committed. Before v2, COORDINATOR_LOAD_IN_PROGRESS
is answered as COORDINATOR_NOT_AVAILABLE (KAFKA-7296: 0.11-2.0 producers took it as fatal).
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode

API_KEY = ApiKey.TXN_OFFSET_COMMIT


async def handle(broker, request) -> dict:
    # Imported with the coordinator, when a client first uses a group (Broker.groups).
    from minikafka.broker.groups.coordinator import PartitionCommit

    body = request.body
    errors: dict[tuple[str, int], ErrorCode] = {}
    commits: list[PartitionCommit] = []
    refused = ErrorCode.NONE
    if not broker.authorize(request, "Write", "TransactionalId", body.transactional_id):
        refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not broker.authorize(request, "Read", "Group", body.group_id):
        refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
    topics = broker.partitions.topics()
    for topic in body.topics:
        count = topics.get(topic.name)
        topic_allowed = not refused and broker.authorize(request, "Read", "Topic", topic.name)
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if refused:
                errors[key] = refused
            elif not topic_allowed:
                errors[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif count is None or not 0 <= partition.partition_index < count:
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                commits.append(PartitionCommit(topic.name, partition.partition_index, partition.committed_offset,
                                               partition.committed_metadata,
                                               leader_epoch=partition.committed_leader_epoch))
    if commits:
        results = await (await broker.groups()).txn_commit(
            body.group_id, body.producer_id, body.producer_epoch, body.member_id, body.group_instance_id,
            body.generation_id, commits)
        for commit, error in zip(commits, results):
            if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and request.api_version < 2:
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            errors[(commit.topic, commit.partition)] = error
    return {"topics": [
        {"name": topic.name,
         "partitions": [{"partition_index": p.partition_index, "error_code": errors[(topic.name, p.partition_index)]}
                        for p in topic.partitions]}
        for topic in body.topics]}
