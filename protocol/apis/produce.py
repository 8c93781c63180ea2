"""Produce (key 0), v0-v9: message sets of magic 0 (v0, v1) or magic 0/1 (v2); v3 carries
magic 2 record batches and adds the transactional id. v1 adds the throttle time, v2 the
per-partition log append time (-1 under CreateTime), v5 the log start offset, v8 the records
that made a set be refused and a message saying why (KIP-467). v4 (KAFKA_STORAGE_ERROR), v6
(throttling after the response), v7 (zstd allowed, KIP-110) change semantics only; v9 is v8
made flexible (KIP-482; Kafka 2.8, which is what kafka-python 3 infers from it).
``records`` is carried as opaque bytes (see ``protocol.records``, which takes every magic in
every version: see the handler)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, RECORDS, STRING

PRODUCE = Api(
    ApiKey.PRODUCE,
    "Produce",
    versions=(0, 9),
    flexible="9+",
    request=(
        Field("transactional_id", STRING, "3+", nullable="3+", default=None),
        Field("acks", INT16),
        Field("timeout_ms", INT32),
        Field("topic_data", Array(
            Field("name", STRING),
            Field("partition_data", Array(
                Field("index", INT32),
                Field("records", RECORDS, nullable="0+", default=None),
            )),
        )),
    ),
    response=(
        Field("responses", Array(
            Field("name", STRING),
            Field("partition_responses", Array(
                Field("index", INT32),
                Field("error_code", INT16),
                Field("base_offset", INT64),
                Field("log_append_time_ms", INT64, "2+", default=-1),
                Field("log_start_offset", INT64, "5+", default=-1),
                Field("record_errors", Array(
                    Field("batch_index", INT32),
                    Field("batch_index_error_message", STRING, nullable="8+", default=None),
                ), "8+", default=()),
                Field("error_message", STRING, "8+", nullable="8+", default=None),
            )),
        )),
        Field("throttle_time_ms", INT32, "1+"),
    ),
)
