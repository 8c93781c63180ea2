"""AddPartitionsToTxn (key 24), v0-v3 (v1 and v2 change nothing on the wire, v3 is flexible): a
transactional producer names the partitions it is about to write to in its transaction.

Field names are those of Kafka's current schema, which calls the fields of these versions
``v3_and_below_*`` (v4, KIP-890, batches transactions)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

ADD_PARTITIONS_TO_TXN = Api(
    ApiKey.ADD_PARTITIONS_TO_TXN,
    "AddPartitionsToTxn",
    versions=(0, 3),
    flexible="3+",
    request=(
        Field("v3_and_below_transactional_id", STRING),
        Field("v3_and_below_producer_id", INT64),
        Field("v3_and_below_producer_epoch", INT16),
        Field("v3_and_below_topics", Array(
            Field("name", STRING),
            Field("partitions", Array(INT32)),
        )),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("results_by_topic_v3_and_below", Array(
            Field("name", STRING),
            Field("results_by_partition", Array(
                Field("partition_index", INT32),
                Field("partition_error_code", INT16),
            )),
        )),
    ),
)
