"""AddOffsetsToTxn (key 25), v0-v3 (v1 and v2 change nothing on the wire, v3 is flexible): a
transactional producer is about to commit offsets of a consumer group in its transaction
(``send_offsets_to_transaction``); the group's ``__consumer_offsets`` partition joins it."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

ADD_OFFSETS_TO_TXN = Api(
    ApiKey.ADD_OFFSETS_TO_TXN,
    "AddOffsetsToTxn",
    versions=(0, 3),
    flexible="3+",
    request=(
        Field("transactional_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
        Field("group_id", STRING),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16),
    ),
)
