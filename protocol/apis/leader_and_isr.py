"""LeaderAndIsr (key 4), v0: the controller tells a broker, for each partition it hosts, who
leads, at which leader epoch, and which replicas are in sync; the broker becomes leader or
follower accordingly. ``live_leaders`` are the addresses of the leaders named, so a new
follower can connect to them without waiting for UpdateMetadata.

Field names are Kafka's JSON schema names (v0/v1 carry ``ungrouped_partition_states``, each
naming its topic; 0.10.2's guide calls the same fields ``partition_states`` [topic, partition,
..] and ``live_leaders`` [id, host, port]). ``zk_version`` is the version of the partition's
state znode, which the leader must quote when it changes the ISR."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import INT16, INT32, STRING

# One partition's state as the controller sends it, in LeaderAndIsr v0 and UpdateMetadata v0-v3
# alike (later versions add different fields to each: is_new here, offline_replicas there).
PARTITION_STATE = (
    Field("topic_name", STRING),
    Field("partition_index", INT32),
    Field("controller_epoch", INT32),
    Field("leader", INT32),
    Field("leader_epoch", INT32),
    Field("isr", Array(INT32)),
    Field("zk_version", INT32),
    Field("replicas", Array(INT32)),
)

LEADER_AND_ISR = Api(
    ApiKey.LEADER_AND_ISR,
    "LeaderAndIsr",
    versions=(0, 0),
    request=(
        Field("controller_id", INT32),
        Field("controller_epoch", INT32),
        Field("ungrouped_partition_states", Array(*PARTITION_STATE)),
        Field("live_leaders", Array(
            Field("broker_id", INT32),
            Field("host_name", STRING),
            Field("port", INT32),
        )),
    ),
    response=(
        Field("error_code", INT16),
        Field("partition_errors", Array(
            Field("topic_name", STRING),
            Field("partition_index", INT32),
            Field("error_code", INT16),
        )),
    ),
)
