"""DescribeTransactions (key 65), v0 (flexible; KIP-664, Kafka 3.0): the state of transactional ids
as their coordinator holds it."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

DESCRIBE_TRANSACTIONS = Api(
    ApiKey.DESCRIBE_TRANSACTIONS,
    "DescribeTransactions",
    versions=(0, 0),
    flexible="0+",
    request=(
        Field("transactional_ids", Array(STRING)),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("transaction_states", Array(
            Field("error_code", INT16),
            Field("transactional_id", STRING),
            Field("transaction_state", STRING, default=""),
            Field("transaction_timeout_ms", INT32, default=0),
            Field("transaction_start_time_ms", INT64, default=-1),
            Field("producer_id", INT64, default=-1),
            Field("producer_epoch", INT16, default=-1),
            Field("topics", Array(
                Field("topic", STRING),
                Field("partitions", Array(INT32)),
            ), default=()),
        )),
    ),
)
