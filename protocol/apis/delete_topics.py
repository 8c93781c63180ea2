"""DeleteTopics (key 20), v0."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

DELETE_TOPICS = Api(
    ApiKey.DELETE_TOPICS,
    "DeleteTopics",
    versions=(0, 0),
    request=(
        Field("topic_names", Array(STRING)),
        Field("timeout_ms", INT32),
    ),
    response=(
        Field("responses", Array(
            Field("name", STRING),
            Field("error_code", INT16),
        )),
    ),
)
