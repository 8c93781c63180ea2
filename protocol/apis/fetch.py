"""Fetch (key 1), v0-v6. v0/v1 consumers read magic 0 only (the broker down-converts); v1 adds
the throttle time; v2 may carry magic 1; v3 adds a response-wide ``max_bytes``; v4 (KIP-98)
the isolation level, and per partition the last stable offset and the aborted transactions
(from v4 on any magic, record batches included); v5 the log start offset (a follower's in the
request, the leader's in the response); v6 only new error semantics. v7 (fetch sessions) waits
for InitProducerId, as Produce v8 does (see protocol.apis.produce). A response's
``records`` may be a storage file slice, which the encoder emits as its own chunk."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT8, INT16, INT32, INT64, RECORDS, STRING

FETCH = Api(
    ApiKey.FETCH,
    "Fetch",
    versions=(0, 6),
    request=(
        Field("replica_id", INT32, default=-1),
        Field("max_wait_ms", INT32),
        Field("min_bytes", INT32),
        Field("max_bytes", INT32, "3+", default=0x7FFFFFFF),
        Field("isolation_level", INT8, "4+", default=0),
        Field("topics", Array(
            Field("topic", STRING),
            Field("partitions", Array(
                Field("partition", INT32),
                Field("fetch_offset", INT64),
                Field("log_start_offset", INT64, "5+", default=-1),
                Field("partition_max_bytes", INT32),
            )),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
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
                Field("records", RECORDS, nullable="0+", default=None),
            )),
        )),
    ),
)
