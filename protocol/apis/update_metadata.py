"""UpdateMetadata (key 6), v0-v3: the controller pushes the cluster's live brokers and every
partition's leader and ISR to each broker, which answers Metadata requests from that cache.

v0 gives each broker one plaintext host and port; v1 replaces them with a list of endpoints,
each with its security protocol (an int16 id: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT,
3 SASL_SSL); v2 adds the broker's rack; v3 adds each endpoint's listener name. Field names
are Kafka's JSON schema names (0.10.2's guide: ``partition_states`` [topic, partition, ..],
``live_brokers`` [id, host, port | end_points [port, host, listener_name,
security_protocol_type], rack])."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.apis.leader_and_isr import PARTITION_STATE
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

UPDATE_METADATA = Api(
    ApiKey.UPDATE_METADATA,
    "UpdateMetadata",
    versions=(0, 3),
    request=(
        Field("controller_id", INT32),
        Field("controller_epoch", INT32),
        Field("ungrouped_partition_states", Array(*PARTITION_STATE)),
        Field("live_brokers", Array(
            Field("id", INT32),
            Field("v0_host", STRING, "0", default=""),
            Field("v0_port", INT32, "0"),
            Field("endpoints", Array(
                Field("port", INT32),
                Field("host", STRING),
                Field("listener", STRING, "3+", default=""),
                Field("security_protocol", INT16),
            ), "1+"),
            Field("rack", STRING, "2+", nullable="2+", default=None),
        )),
    ),
    response=(
        Field("error_code", INT16),
    ),
)
