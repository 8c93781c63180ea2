"""ListTransactions (key 66), v0 (flexible; KIP-664, Kafka 3.0): the transactional ids a
coordinator holds, by state and producer id."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

LIST_TRANSACTIONS = Api(
    ApiKey.LIST_TRANSACTIONS,
    "ListTransactions",
    versions=(0, 0),
    flexible="0+",
    request=(
        Field("state_filters", Array(STRING)),
        Field("producer_id_filters", Array(INT64)),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16),
        Field("unknown_state_filters", Array(STRING), default=()),
        Field("transaction_states", Array(
            Field("transactional_id", STRING),
            Field("producer_id", INT64),
            Field("transaction_state", STRING),
        ), default=()),
    ),
)
