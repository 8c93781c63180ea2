"""Metadata (key 3), v0-v2. v0 asks for all topics with an empty list, v1+ with null; v1 adds
racks, the controller and ``is_internal``; v2 adds the cluster id."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, STRING

METADATA = Api(
    ApiKey.METADATA,
    "Metadata",
    versions=(0, 2),
    request=(
        Field("topics", Array(
            Field("name", STRING),
        ), nullable="1+"),
    ),
    response=(
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
            Field("name", STRING),
            Field("is_internal", BOOLEAN, "1+", default=False),
            Field("partitions", Array(
                Field("error_code", INT16),
                Field("partition_index", INT32),
                Field("leader_id", INT32),
                Field("replica_nodes", Array(INT32)),
                Field("isr_nodes", Array(INT32)),
            )),
        )),
    ),
)
