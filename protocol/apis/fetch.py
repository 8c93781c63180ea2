"""Fetch (key 1), v0-v3. v0/v1 consumers read magic 0 only (the broker down-converts); v1 adds
the throttle time; v2 may carry magic 1; v3 adds a response-wide ``max_bytes``. A response's
``records`` may be a storage file slice, which the encoder emits as its own chunk."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, RECORDS, STRING

FETCH = Api(
    ApiKey.FETCH,
    "Fetch",
    versions=(0, 3),
    request=(
        Field("replica_id", INT32, default=-1),
        Field("max_wait_ms", INT32),
        Field("min_bytes", INT32),
        Field("max_bytes", INT32, "3+", default=0x7FFFFFFF),
        Field("topics", Array(
            Field("topic", STRING),
            Field("partitions", Array(
                Field("partition", INT32),
                Field("fetch_offset", INT64),
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
                Field("records", RECORDS, nullable="0+", default=None),
            )),
        )),
    ),
)
