"""InitProducerId (key 22), v0-v4 (v1 is v0, v2+ flexible, v3 adds the producer id and epoch
a producer asks to bump (KIP-360), v4 answers PRODUCER_FENCED where older versions answer
INVALID_PRODUCER_EPOCH): a producer id and epoch for an idempotent producer (null
``transactional_id``) or a transactional one (KIP-98)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

INIT_PRODUCER_ID = Api(
    ApiKey.INIT_PRODUCER_ID,
    "InitProducerId",
    versions=(0, 4),
    flexible="2+",
    request=(
        Field("transactional_id", STRING, nullable="0+"),
        Field("transaction_timeout_ms", INT32),
        Field("producer_id", INT64, "3+", default=-1),
        Field("producer_epoch", INT16, "3+", default=-1),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16),
        Field("producer_id", INT64, default=-1),
        Field("producer_epoch", INT16, default=-1),
    ),
)
