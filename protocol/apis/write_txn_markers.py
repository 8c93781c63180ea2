"""WriteTxnMarkers (key 27), v0-v1 (v1 is flexible): a transaction coordinator asks a partition
leader to write COMMIT or ABORT control batches (inter-broker; clients never send it)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, INT64, STRING

WRITE_TXN_MARKERS = Api(
    ApiKey.WRITE_TXN_MARKERS,
    "WriteTxnMarkers",
    versions=(0, 1),
    flexible="1+",
    request=(
        Field("markers", Array(
            Field("producer_id", INT64),
            Field("producer_epoch", INT16),
            Field("transaction_result", BOOLEAN),
            Field("topics", Array(
                Field("name", STRING),
                Field("partition_indexes", Array(INT32)),
            )),
            Field("coordinator_epoch", INT32),
        )),
    ),
    response=(
        Field("markers", Array(
            Field("producer_id", INT64),
            Field("topics", Array(
                Field("name", STRING),
                Field("partitions", Array(
                    Field("partition_index", INT32),
                    Field("error_code", INT16),
                )),
            )),
        )),
    ),
)
