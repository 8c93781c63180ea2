"""Fetch (key 1), v0-v11. v0/v1 consumers read magic 0 only (the broker down-converts); v1 adds
the throttle time; v2 may carry magic 1; v3 adds a response-wide ``max_bytes``; v4 (KIP-98)
the isolation level, and per partition the last stable offset and the aborted transactions
(from v4 on any magic, record batches included); v5 the log start offset both ways; v6 is v5; v7 (KIP-227) fetch sessions and a response-wide error;
v8 is v7; v9 (KIP-320) the requester's ``current_leader_epoch`` per partition; v10 (KIP-110)
may carry zstd; v11 (KIP-392) the requester's rack and the preferred read replica. A response's
``records`` may be a storage file slice, which the encoder emits as its own chunk."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT8, INT16, INT32, INT64, RECORDS, STRING

FETCH = Api(
    ApiKey.FETCH,
    "Fetch",
    versions=(0, 11),
    request=(
        Field("replica_id", INT32, default=-1),
        Field("max_wait_ms", INT32),
        Field("min_bytes", INT32),
        Field("max_bytes", INT32, "3+", default=0x7FFFFFFF),
        Field("isolation_level", INT8, "4+", default=0),
        Field("session_id", INT32, "7+", default=0),
        Field("session_epoch", INT32, "7+", default=-1),
        Field("topics", Array(
            Field("topic", STRING),
            Field("partitions", Array(
                Field("partition", INT32),
                Field("current_leader_epoch", INT32, "9+", default=-1),
                Field("fetch_offset", INT64),
                Field("log_start_offset", INT64, "5+", default=-1),
                Field("partition_max_bytes", INT32),
            )),
        )),
        Field("forgotten_topics_data", Array(
            Field("topic", STRING),
            Field("partitions", Array(INT32)),
        ), "7+"),
        Field("rack_id", STRING, "11+", default=""),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16, "7+", default=0),
        Field("session_id", INT32, "7+", default=0),
        Field("responses", Array(
            Field("topic", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("high_watermark", INT64),
                Field("last_stable_offset", INT64, "4+", default=-1),
                Field("log_start_offset", INT64, "5+", default=-1),
                Field("aborted_transactions", Array(
                    Field("producer_id", INT64),
                    Field("first_offset", INT64),
                ), "4+", nullable="4+", default=None),
                Field("preferred_read_replica", INT32, "11+", default=-1),
                Field("records", RECORDS, nullable="0+", default=None),
            )),
        )),
    ),
)
