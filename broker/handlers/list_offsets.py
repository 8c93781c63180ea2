"""ListOffsets (key 2), v0-v7: offsets for times, the earliest and the latest offset.

Timestamp -1 means the latest offset and -2 the earliest (the log start offset). As in Kafka
0.10.2, a consumer (replica id -1) is bounded by the high watermark: its latest offset is the
high watermark and no answer names an offset above it (v0's list is capped, v1's time lookup
answers -1/-1); a follower or a debugging client (replica id -2) sees up to the log end offset,
the next offset to be written.

v1 (KIP-79) answers one ``(timestamp, offset)`` per partition: for a real timestamp, the
first message whose timestamp is at or after it, found through the time index (-1/-1 when
there is none); for -1/-2 the offset with timestamp -1.

v0 answers Kafka 0.10.2's "old style" list of up to ``max_num_offsets`` offsets, newest
first, taken from segment boundaries: the base offset of every segment plus the log end
offset when the active segment holds data. -1 starts the list at the log end offset, -2
returns the first segment's base offset only; a timestamp returns the bases of the segments
last written at or before it (a segment's time is its largest timestamp, which storage keeps
as the append time for magic 0 messages; a segment with no time yet, the empty active one,
counts as now, like the log end offset).

v2 adds the isolation level: a READ_COMMITTED consumer is bounded by the last stable offset
instead (its latest offset, what a time lookup may find), as Kafka 2.8's lastFetchableOffset;
another level is a malformed request, as in Fetch.
v4 (KIP-320) checks the requester's ``current_leader_epoch`` (``Partitions.leader_log``:
FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH) and answers the leader epoch of the offset found:
the current one for the latest, the first epoch for the earliest when it starts there, and for
a time the epoch the cache says covers the offset. Kafka reads the latter from the batch
header, so it answers -1 on magic 0/1 logs; this broker's epoch cache is exact for every format
(the truncation relies on it), so its answer is the same as a v2 batch's would be.

v6 is v5, flexible. v7 (KIP-734, Kafka 3.0) asks for timestamp -3, MAX_TIMESTAMP: the first
record with the largest timestamp and its epoch, as Kafka 3.8 answers it (3.0 answered the last
offset of the batch holding it, and the current epoch); a consumer gets it only below what it
may read, Kafka 3.0's strict bound (it is a record, not a position to start at), -1/-1 otherwise.
As any time lookup, older versions asking for -3 get the same answer (so does Kafka 3.x;
librdkafka asks at v5 when v7 is not offered).

As Kafka since KIP-207, a consumer's latest offset, or a time lookup that finds nothing below
the high watermark, is refused while a new leader's high watermark is still below the start of
its epoch (the offsets in between were committed under the old leader, and it cannot say
yet): OFFSET_NOT_AVAILABLE from v5, LEADER_NOT_AVAILABLE before; both are retried.
"""

from __future__ import annotations

import itertools

from minikafka.broker.handlers import CloseConnection
from minikafka.broker.partitions import NO_EPOCH, TopicError
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.storage import MAX_TIMESTAMP

API_KEY = ApiKey.LIST_OFFSETS
LATEST = -1
EARLIEST = -2
CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def old_style_offsets(broker, log, timestamp: int, max_num_offsets: int) -> list[int]:
    """Kafka 0.10.2's ``fetchOffsetsBefore`` over this log's segments."""
    now = broker.clock.time_ms()
    infos = log.segments()
    segments = [(info.base_offset, info.max_timestamp if info.max_timestamp >= 0 else now)
                for info in infos]
    if infos[-1].size > 0:
        segments.append((log.log_end_offset, now))
    if timestamp == LATEST:
        start = len(segments) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(segments) - 1
        while start >= 0 and segments[start][1] > timestamp:
            start -= 1
    count = max(min(max_num_offsets, start + 1), 0)
    return [segments[start - i][0] for i in range(count)]


def capped_at(offsets: list[int], high_watermark: int) -> list[int]:
    """Kafka 0.10.2's cap of a consumer's old-style offsets (newest first): those above the
    high watermark give way to the high watermark itself, ``hw +: offsets.dropWhile(_ > hw)``
    (so the segment base equal to it may follow it a second time)."""
    if not any(offset > high_watermark for offset in offsets):
        return offsets
    return [high_watermark] + list(itertools.dropwhile(lambda offset: offset > high_watermark, offsets))


def _partition_answer(broker, topic: str, request, version: int, replica_id: int, isolation_level: int) -> dict:
    partitions = broker.partitions
    try:
        log = partitions.leader_log(topic, request.partition_index, request.current_leader_epoch)
    except TopicError as exc:
        return {"partition_index": request.partition_index, "error_code": exc.code,
                "old_style_offsets": []}
    # A consumer sees offsets up to the high watermark (what it can read); a follower or a
    # debugging client (replica id -2) sees the log up to its end.
    from_consumer = replica_id == CONSUMER_REPLICA_ID
    if version == 0:
        offsets = old_style_offsets(broker, log, request.timestamp, request.max_num_offsets)
        if from_consumer:
            offsets = capped_at(offsets, partitions.high_watermark(log))
        return {"partition_index": request.partition_index, "error_code": ErrorCode.NONE,
                "old_style_offsets": offsets}
    high_watermark = partitions.high_watermark(log)
    # What a consumer may read (Kafka 2.8's lastFetchableOffset): below the last stable offset
    # for READ_COMMITTED, the high watermark otherwise.
    fetchable = partitions.last_stable_offset(log) if isolation_level == READ_COMMITTED else high_watermark
    current_epoch = partitions.leader_epoch(topic, request.partition_index)
    entries = log.leader_epoch_cache.entries
    # Kafka's Partition.fetchOffsetForTimestamp: a new leader whose high watermark has not
    # reached the start of its epoch yet.
    lagging = from_consumer and dict(entries).get(current_epoch, 0) > high_watermark
    not_available = ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE
    if request.timestamp == LATEST:
        if lagging:
            return {"partition_index": request.partition_index, "error_code": not_available}
        timestamp, offset, epoch = -1, fetchable if from_consumer else log.log_end_offset, current_epoch
    elif request.timestamp == EARLIEST:
        timestamp, offset = -1, log.log_start_offset
        epoch = entries[0][0] if entries and entries[0][1] <= offset else NO_EPOCH
    else:
        found = log.offset_for_timestamp(request.timestamp)
        # Kafka 0.10.2 lets a consumer find the offset at the high watermark too (``<=``);
        # MAX_TIMESTAMP (Kafka 3.0) names a record, one the consumer can read (``<``).
        last_found = fetchable - 1 if request.timestamp == MAX_TIMESTAMP else fetchable
        if found is None or (from_consumer and found[0] > last_found):
            if lagging:
                return {"partition_index": request.partition_index, "error_code": not_available}
            found = (-1, -1)
        offset, timestamp = found
        epoch = log.leader_epoch_cache.epoch_at(offset) if offset >= 0 else NO_EPOCH
    return {"partition_index": request.partition_index, "error_code": ErrorCode.NONE,
            "timestamp": timestamp, "offset": offset, "leader_epoch": epoch}


async def handle(broker, request) -> dict:
    version = request.api_version
    if version >= 2 and request.body.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise CloseConnection(f"ListOffsets with unknown isolation level {request.body.isolation_level}")
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic.name,
         "partitions": [_partition_answer(broker, topic.name, partition, version, request.body.replica_id,
                                          request.body.isolation_level)
                        if broker.authorize(request, "Describe", "Topic", topic.name)
                        else {"partition_index": partition.partition_index,
                              "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "old_style_offsets": []}
                        for partition in topic.partitions]}
        for topic in request.body.topics
    ]}
