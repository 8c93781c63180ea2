"""DescribeCluster (key 60), v0-v1 (KIP-700), flexible at every version: the cluster's id, its
controller and live brokers (what Metadata v10 and before gave with no topics), and the
cluster's authorized operations, which Metadata v11 dropped. v1 names the kind of endpoint
asked (1 broker, 2 controller: KRaft's); v2 (fenced brokers, KRaft's) is not served."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.apis.metadata import AUTHORIZED_OPERATIONS_OMITTED
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT8, INT16, INT32, STRING

# KIP-919's endpoint types.
BROKER_ENDPOINT = 1

DESCRIBE_CLUSTER = Api(
    ApiKey.DESCRIBE_CLUSTER,
    "DescribeCluster",
    versions=(0, 1),
    flexible="0+",
    request=(
        Field("include_cluster_authorized_operations", BOOLEAN),
        Field("endpoint_type", INT8, "1+", default=BROKER_ENDPOINT),
    ),
    response=(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+", default=None),
        Field("endpoint_type", INT8, "1+", default=BROKER_ENDPOINT),
        Field("cluster_id", STRING),
        Field("controller_id", INT32, default=-1),
        Field("brokers", Array(
            Field("broker_id", INT32),
            Field("host", STRING),
            Field("port", INT32),
            Field("rack", STRING, nullable="0+", default=None),
        )),
        Field("cluster_authorized_operations", INT32, default=AUTHORIZED_OPERATIONS_OMITTED),
    ),
)
