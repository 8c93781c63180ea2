"""DescribeTopicPartitions (key 75), v0 (KIP-966), flexible: Metadata's description of topics
(leaders, replicas, ISR, ids, authorized operations) without auto-creation, paged by a cursor
(the topic and partition to go on from) and a limit on the partitions of one answer. The
eligible leader replicas (ELR) are KRaft's: always null here."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.apis.metadata import AUTHORIZED_OPERATIONS_OMITTED
from minikafka.protocol.schema import Api, Array, Field, Nested
from minikafka.protocol.types import BOOLEAN, INT16, INT32, STRING, UUID

_CURSOR = Nested(
    Field("topic_name", STRING),
    Field("partition_index", INT32),
)

DESCRIBE_TOPIC_PARTITIONS = Api(
    ApiKey.DESCRIBE_TOPIC_PARTITIONS,
    "DescribeTopicPartitions",
    versions=(0, 0),
    flexible="0+",
    request=(
        Field("topics", Array(
            Field("name", STRING),
        )),
        Field("response_partition_limit", INT32, default=2000),
        Field("cursor", _CURSOR, nullable="0+", default=None),
    ),
    response=(
        Field("throttle_time_ms", INT32),
        Field("topics", Array(
            Field("error_code", INT16),
            Field("name", STRING, nullable="0+"),
            Field("topic_id", UUID),
            Field("is_internal", BOOLEAN, default=False),
            Field("partitions", Array(
                Field("error_code", INT16),
                Field("partition_index", INT32),
                Field("leader_id", INT32),
                Field("leader_epoch", INT32, default=-1),
                Field("replica_nodes", Array(INT32)),
                Field("isr_nodes", Array(INT32)),
                Field("eligible_leader_replicas", Array(INT32), nullable="0+", default=None),
                Field("last_known_elr", Array(INT32), nullable="0+", default=None),
                Field("offline_replicas", Array(INT32)),
            )),
            Field("topic_authorized_operations", INT32, default=AUTHORIZED_OPERATIONS_OMITTED),
        )),
        Field("next_cursor", _CURSOR, nullable="0+", default=None),
    ),
)
