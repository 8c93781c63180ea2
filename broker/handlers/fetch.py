"""Fetch (key 1), v0-v11: read message sets, long-polling until enough bytes are there.

The request waits up to ``max_wait_ms`` until at least ``min_bytes`` can be returned; it is
woken by appends to the partitions it reads (``Broker.append_waiters``), never by a timer
loop, and returns at once when any partition has an error. Each partition returns at most
``partition_max_bytes``; v3 also caps the whole response at ``max_bytes`` (KIP-74: partitions
in request order, the first message of the first non-empty partition is returned whole even
if it is larger, so a consumer can always progress). A partition's records end after the last
whole entry within its limit (Kafka's end at the limit, inside an entry the consumer drops);
only where no whole entry fits (before v3, or past the first partition) do they end inside one,
as in Kafka 0.10.

Responses carry the stored bytes as file slices that the connection sends with sendfile,
unparsed, but for consumers that cannot read them: v0/v1 understand magic 0 only, v2/v3 magic
0 and 1, so their records are down-converted lazily, as the response is written
(``broker.down_conversion``): always for v0/v1, and for v2/v3 when the topic writes record
batches, or, after its format went back to magic 1, when the slice starts with one. (Kafka
decides by the topic's format alone and sends the batches of a format downgraded since as
they are; a 0.10 consumer cannot read them.) A partition whose first batch cannot be
converted (zstd) answers UNSUPPORTED_COMPRESSION_TYPE, and so does any fetch below v10 of a
topic whose ``compression.type`` is zstd (Kafka 2.8). Errors: UNKNOWN_TOPIC_OR_PARTITION,
OFFSET_OUT_OF_RANGE (high watermark -1, as Kafka answers).

v4 (KIP-98) adds the isolation level. Every partition answers its last stable offset (the first
offset of a transaction not yet decided, or whose marker is not yet below the high watermark;
the high watermark without one). READ_UNCOMMITTED reads up to the high watermark, aborted
transactions null; READ_COMMITTED up to the last stable offset, with the aborted transactions
whose records the answer may hold (producer id and first offset, from the segments'
``.txnindex``), so the client drops their records and the markers; a long poll waiting at the
last stable offset is woken when it moves, as a marker's append and the high watermark's moves
wake it. An isolation level other than 0 and 1 is a malformed request. Consumers before v4
(down-converted records) see no control batches, and read to the high watermark as Kafka's.

v4 and later serve any magic as stored, record batches included. v5 answers the log start
offset. v7 fetch sessions (KIP-227) are not kept, as a Kafka broker with no session cache
slots: every answer is a full one with session id 0, and a request that continues a session
(an epoch above 0) is answered FETCH_SESSION_ID_NOT_FOUND, after which clients fetch in full. v9's ``current_leader_epoch`` (KIP-320) is checked against the
partition's epoch at each read (``Partitions.leader_log``), so a long poll that outlives a
leader change answers FENCED_LEADER_EPOCH, not data read at a later epoch; a fenced follower's
fetch offset is not taken as its position. v11's rack is not used: the leader is the preferred
read replica (-1).

In a cluster only the partition's leader answers (NOT_LEADER_FOR_PARTITION elsewhere):
consumers read below the high watermark; a follower's fetch (``replica_id`` = its broker id)
reads up to the log end, and its fetch offset tells the leader how far it has caught up.
"""

from __future__ import annotations

import trio

from minikafka.broker.down_conversion import DownConvertedRecords
from minikafka.broker.handlers import CloseConnection
from minikafka.broker.partitions import TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode, RecordError
from minikafka.protocol.entries import BATCH_MAGIC, MAGIC_POSITION
from minikafka.storage.types import FileSlice, OffsetOutOfRange

API_KEY = ApiKey.FETCH
NO_RESPONSE_LIMIT = 0x7FFFFFFF
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
ZSTD_VERSION = 10  # the first a consumer of a zstd topic may fetch with (KIP-110)
TRANSACTIONS_VERSION = 4  # KIP-98: the isolation level, last stable offset and aborted transactions
# Fetch session epochs that start or end a session, the rest continue one (KIP-227).
INITIAL_SESSION_EPOCH, FINAL_SESSION_EPOCH = 0, -1


def _read_partitions(broker, body, version: int, unreadable: set[str],
                     held_back: set[tuple[str, int]]) -> tuple[list[dict], int, bool]:
    """One pass over the requested partitions: (response topics, bytes found, any error).
    From v4 each answers its last stable offset and, READ_COMMITTED, reads up to it with the
    aborted transactions among what it returns (a follower reads to the log end whatever it
    asks). The ``held_back`` ones answer no records (a follower's replication throttle)."""
    response_limit = body.max_bytes if version >= 3 else NO_RESPONSE_LIMIT
    remaining = max(response_limit, 0)
    # KIP-74 (v3): only until the first partition returns data may a message exceed the limits;
    # after that a partition whose first message does not fit answers none (Kafka's
    # readFromLocalLog without hardMaxBytesLimit), while v0-v2 get it cut, to learn it is too large.
    min_one_message = version >= 3
    cut_first_entry = version < 3
    total = 0
    any_error = False
    topics = []
    from_follower = body.replica_id >= 0
    read_committed = version >= TRANSACTIONS_VERSION and body.isolation_level == READ_COMMITTED and not from_follower
    source = broker.partitions
    for topic in body.topics:
        partitions = []
        allowed = topic.topic not in unreadable
        for request in topic.partitions:
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if allowed:
                try:
                    log = source.leader_log(topic.topic, request.partition, request.current_leader_epoch)
                    error = None
                except TopicError as exc:
                    error = exc.code
                else:
                    if version < ZSTD_VERSION and log.config.compression_type == "zstd":
                        # Kafka 2.8 refuses the whole partition, whatever its data, as its
                        # consumers could not read what is appended next
                        error = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            if error is not None:
                any_error = True
                partitions.append({"partition_index": request.partition, "error_code": error,
                                   "high_watermark": -1, "records": b""})
                continue
            high_watermark = source.high_watermark(log)
            limit = max(min(request.partition_max_bytes, remaining), 0)
            stable = source.last_stable_offset(log) if version >= TRANSACTIONS_VERSION else None
            try:
                if (topic.topic, request.partition) in held_back:
                    records, aborted = b"", None
                elif read_committed:
                    records, aborted = log.read_committed(request.fetch_offset, limit, stable, min_one_message,
                                                          cut_first_entry)
                    aborted = [{"producer_id": txn.producer_id, "first_offset": txn.first_offset} for txn in aborted]
                else:
                    records = log.read(request.fetch_offset, limit,
                                       max_offset=None if from_follower else high_watermark,
                                       min_one_message=min_one_message, cut_first_entry=cut_first_entry)
                    aborted = None
            except OffsetOutOfRange:
                any_error = True
                partitions.append({"partition_index": request.partition,
                                   "error_code": ErrorCode.OFFSET_OUT_OF_RANGE,
                                   "high_watermark": -1, "records": b""})
                continue
            if records and records.length:
                min_one_message = False
                total += records.length
                remaining -= records.length
            else:
                records = b""
            partitions.append({"partition_index": request.partition, "error_code": ErrorCode.NONE,
                               "high_watermark": high_watermark, "log_start_offset": log.log_start_offset,
                               "records": records})
            if stable is not None:
                partitions[-1].update(last_stable_offset=stable, aborted_transactions=aborted)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return topics, total, any_error


async def _record_follower_positions(broker, body, unreadable: set[str]) -> None:
    """A follower's fetch offsets are its log ends: the leader's high watermark and ISR move.
    Only for the topics it may read: a refused fetch says nothing about any replica."""
    for topic in body.topics:
        if topic.topic in unreadable:
            continue
        for request in topic.partitions:
            await broker.partitions.follower_fetched(topic.topic, request.partition, body.replica_id,
                                                     request.fetch_offset, request.current_leader_epoch)


def _down_convert(broker, topics: list[dict], body, magic: int) -> None:
    """Each partition's records that a consumer of ``magic`` cannot read to be converted as
    the response is written; a first batch that cannot be (zstd) answers the partition with
    its error, as Kafka's ``KafkaApis`` does, high watermark -1. Called right after the read,
    with no await in between: each log is the one read."""
    for topic, requested in zip(topics, body.topics):
        for partition, request in zip(topic["partitions"], requested.partitions):
            records = partition["records"]
            if isinstance(records, bytes):
                continue
            if magic == 1 and not _may_hold_batches(broker.partitions.leader_log(topic["topic"], request.partition),
                                                    records):
                continue
            try:
                converted = DownConvertedRecords(records, magic, request.fetch_offset)
            except RecordError as error:
                partition.update(error_code=error.code, high_watermark=-1, records=b"")
                continue
            partition["records"] = converted if converted.length else b""


def _may_hold_batches(log, records: FileSlice) -> bool:
    """Whether a slice of ``log`` may hold record batches (magic 2)."""
    if log.config.record_magic == BATCH_MAGIC:
        return True
    head = next(records.chunks(MAGIC_POSITION + 1), b"")
    return len(head) > MAGIC_POSITION and head[MAGIC_POSITION] == BATCH_MAGIC


async def handle(broker, request) -> dict:
    body = request.body
    version = request.api_version
    if version >= 4 and body.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise CloseConnection(f"Fetch with unknown isolation level {body.isolation_level}")
    if version >= 7 and body.session_epoch not in (INITIAL_SESSION_EPOCH, FINAL_SESSION_EPOCH):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "responses": []}
    # Checked once, not at each wake-up of a long poll, and before anything is recorded, as
    # Kafka passes only authorized partitions to its replica manager. A follower's fetch needs
    # ClusterAction (Kafka since 1.1; 0.10.2 asked it only for Read on the topic, which let
    # any consumer claim a follower's position and move the high watermark).
    if body.replica_id >= 0:
        unreadable = set() if broker.authorize(request, "ClusterAction", "Cluster") else \
            {topic.topic for topic in body.topics}
    else:
        unreadable = {topic.topic for topic in body.topics
                      if not broker.authorize(request, "Read", "Topic", topic.topic)}
    if body.replica_id >= 0:
        await _record_follower_positions(broker, body, unreadable)
    watched = {(topic.topic, p.partition) for topic in body.topics for p in topic.partitions}
    # KIP-73: the partitions whose replicas here the leader's replication throttle covers
    throttled = broker.partitions.leader_throttled(
        key for key in watched if key[0] not in unreadable) if body.replica_id >= 0 else set()
    deadline = trio.current_time() + max(body.max_wait_ms, 0) / 1000
    while True:
        with broker.append_waiters.watch(watched) as appended:
            held_back = broker.partitions.held_back_from(body.replica_id, throttled) if throttled else set()
            topics, total, any_error = _read_partitions(broker, body, version, unreadable, held_back)
            if total >= body.min_bytes or any_error or trio.current_time() >= deadline:
                break
            with trio.move_on_at(deadline):
                await appended.wait()
    if throttled:
        broker.partitions.record_leader_throttled(sum(
            partition["records"].length for topic in topics for partition in topic["partitions"]
            if (topic["topic"], partition["partition_index"]) in throttled and partition["records"]))
    if version < TRANSACTIONS_VERSION:
        _down_convert(broker, topics, body, 0 if version < 2 else 1)
    return {"throttle_time_ms": 0, "responses": topics}
