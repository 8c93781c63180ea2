"""Metadata (key 3), v0-v8. v0 asks for all topics with an empty list, v1+ with null; v1 adds
racks, the controller and ``is_internal``; v2 adds the cluster id; v3 the throttle time; v4
``allow_auto_topic_creation`` (KIP-204's predecessor: the client says whether a missing topic
may be created); v5 each partition's offline replicas; v6 is v5; v7 each partition's leader
epoch (KIP-320); v8 the authorized operations of each topic and of the cluster (KIP-430), asked
for by two flags; v9 is flexible; v10 each topic's id (KIP-516); v11 drops the cluster's
authorized operations (DescribeCluster has them); v12 may name topics by id alone (null name)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, STRING, UUID

# KIP-430's "not asked for" value of the authorized-operations bitfields.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

METADATA = Api(
    ApiKey.METADATA,
    "Metadata",
    versions=(0, 12),
    flexible="9+",
    request=(
        Field("topics", Array(
            Field("topic_id", UUID, "10+"),
            Field("name", STRING, nullable="10+"),
        ), nullable="1+"),
        Field("allow_auto_topic_creation", BOOLEAN, "4+", default=True),
        Field("include_cluster_authorized_operations", BOOLEAN, "8-10", default=False),
        Field("include_topic_authorized_operations", BOOLEAN, "8+", default=False),
    ),
    response=(
        Field("throttle_time_ms", INT32, "3+", default=0),
        Field("brokers", Array(
            Field("node_id", INT32),
            Field("host", STRING),
            Field("port", INT32),
            Field("rack", STRING, "1+", nullable="1+", default=None),
        )),
        Field("cluster_id", STRING, "2+", nullable="2+", default=None),
        Field("controller_id", INT32, "1+", default=-1),
        Field("topics", Array(
            Field("error_code", INT16),
            Field("name", STRING, nullable="12+"),
            Field("topic_id", UUID, "10+"),
            Field("is_internal", BOOLEAN, "1+", default=False),
            Field("partitions", Array(
                Field("error_code", INT16),
                Field("partition_index", INT32),
                Field("leader_id", INT32),
                Field("leader_epoch", INT32, "7+", default=-1),
                Field("replica_nodes", Array(INT32)),
                Field("isr_nodes", Array(INT32)),
                Field("offline_replicas", Array(INT32), "5+"),
            )),
            Field("topic_authorized_operations", INT32, "8+", default=AUTHORIZED_OPERATIONS_OMITTED),
        )),
        Field("cluster_authorized_operations", INT32, "8-10", default=AUTHORIZED_OPERATIONS_OMITTED),
    ),
)
