"""EndTxn (key 26), v0-v3 (v1 and v2 change nothing on the wire, v3 is flexible): commit or abort
a producer's transaction."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, INT64, STRING

END_TXN = Api(
    ApiKey.END_TXN,
    "EndTxn",
    versions=(0, 3),
    flexible="3+",
    request=(
        Field("transactional_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
        Field("committed", BOOLEAN),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("error_code", INT16),
    ),
)
