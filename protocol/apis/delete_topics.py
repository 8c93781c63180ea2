"""DeleteTopics (key 20), v0-v5. v1 adds throttle time; v4 is flexible; v5 per-topic error
messages. v6 (topics by name or topic id, KIP-516) is not served: topic ids are not yet one per
topic across a cluster."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

DELETE_TOPICS = Api(
    ApiKey.DELETE_TOPICS,
    "DeleteTopics",
    versions=(0, 5),
    flexible="4+",
    request=(
        Field("topic_names", Array(STRING)),
        Field("timeout_ms", INT32),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
        Field("responses", Array(
            Field("name", STRING),
            Field("error_code", INT16),
            Field("error_message", STRING, "5+", nullable="5+", default=None),
        )),
    ),
)
