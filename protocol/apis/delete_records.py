"""DeleteRecords (key 21), v0-v2 (v1 changes nothing on the wire, v2 is flexible): move partitions' log start
offsets up, making the records below them unreadable."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, INT64, STRING

DELETE_RECORDS = Api(
    ApiKey.DELETE_RECORDS,
    "DeleteRecords",
    versions=(0, 2),
    flexible="2+",
    request=(
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("offset", INT64),
            )),
        )),
        Field("timeout_ms", INT32),
    ),
    response=(
        Field("throttle_time_ms", INT32, default=0),
        Field("topics", Array(
            Field("name", STRING),
            Field("partitions", Array(
                Field("partition_index", INT32),
                Field("low_watermark", INT64),
                Field("error_code", INT16),
            )),
        )),
    ),
)
