"""DeleteTopics (key 20), v0-v5. v1 adds throttle time; v4 is flexible; v5 per-topic error
messages; v6 names each topic by name or by topic id (KIP-516) and answers both."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING, UUID

DELETE_TOPICS = Api(
    ApiKey.DELETE_TOPICS,
    "DeleteTopics",
    versions=(0, 6),
    flexible="4+",
    request=(
        Field("topics", Array(
            Field("name", STRING, nullable="6+", default=None),
            Field("topic_id", UUID),
        ), "6+"),
        Field("topic_names", Array(STRING), "0-5"),
        Field("timeout_ms", INT32),
    ),
    response=(
        Field("throttle_time_ms", INT32, "1+"),
        Field("responses", Array(
            Field("name", STRING, nullable="6+"),
            Field("topic_id", UUID, "6+"),
            Field("error_code", INT16),
            Field("error_message", STRING, "5+", nullable="5+", default=None),
        )),
    ),
)
