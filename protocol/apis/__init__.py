"""The APIs this broker speaks, one module per API, each a declaration of data: those clients
use, and the controller's inter-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown) that the cluster mode sends and serves.

How to declare a message: a module builds one :class:`protocol.schema.Api` holding the API key,
the served version range, the flexible versions (if any) and two tuples of
:func:`protocol.schema.Field` declarations, the request's and the response's, in wire order
(``produce.py`` is a complete example with nested arrays, a nullable field and fields added in
later versions; ``api_versions.py`` one with a flexible version and tagged fields).

``Field(name, type, versions="0+", nullable=None, default=..., tag=None)``: names are Kafka's
JSON schema names in snake_case; ``versions`` and ``nullable`` use Kafka's notation ("0+",
"1-3", "2"); ``default`` is what a field holds when it is absent (from an older version, from a
response dict that leaves it out); ``tag`` makes it a tagged field in flexible versions, written
only when it differs from its default. ``Array(INT32)`` is an array of scalars,
``Array(Field(...), ...)`` an array of structs, ``Nested(Field(...), ...)`` one struct; ``UUID``
fields hold Kafka's text form of an id (``types.ZERO_UUID`` for none). Add the new module's ``Api`` to ``APIS`` below;
the ApiVersions table is derived from ``APIS``, so registering a version is advertising it
wherever the broker has a handler for the key (``api_versions_response(served=...)``).

The table must stay coherent: clients pick features (idempotence, message format v2) from the
versions they see; kafka-python 3, for one, produces idempotently once Metadata v4 is offered.
"""

from __future__ import annotations

from typing import Container

from minikafka.protocol.apis.add_offsets_to_txn import ADD_OFFSETS_TO_TXN
from minikafka.protocol.apis.add_partitions_to_txn import ADD_PARTITIONS_TO_TXN
from minikafka.protocol.apis.alter_configs import ALTER_CONFIGS
from minikafka.protocol.apis.alter_partition_reassignments import ALTER_PARTITION_REASSIGNMENTS
from minikafka.protocol.apis.alter_replica_log_dirs import ALTER_REPLICA_LOG_DIRS
from minikafka.protocol.apis.alter_user_scram_credentials import ALTER_USER_SCRAM_CREDENTIALS
from minikafka.protocol.apis.api_versions import API_VERSIONS
from minikafka.protocol.apis.controlled_shutdown import CONTROLLED_SHUTDOWN
from minikafka.protocol.apis.create_acls import CREATE_ACLS
from minikafka.protocol.apis.create_partitions import CREATE_PARTITIONS
from minikafka.protocol.apis.create_topics import CREATE_TOPICS
from minikafka.protocol.apis.delete_acls import DELETE_ACLS
from minikafka.protocol.apis.delete_groups import DELETE_GROUPS
from minikafka.protocol.apis.delete_records import DELETE_RECORDS
from minikafka.protocol.apis.delete_topics import DELETE_TOPICS
from minikafka.protocol.apis.describe_acls import DESCRIBE_ACLS
from minikafka.protocol.apis.describe_cluster import DESCRIBE_CLUSTER
from minikafka.protocol.apis.describe_configs import DESCRIBE_CONFIGS
from minikafka.protocol.apis.describe_groups import DESCRIBE_GROUPS
from minikafka.protocol.apis.describe_log_dirs import DESCRIBE_LOG_DIRS
from minikafka.protocol.apis.describe_topic_partitions import DESCRIBE_TOPIC_PARTITIONS
from minikafka.protocol.apis.describe_transactions import DESCRIBE_TRANSACTIONS
from minikafka.protocol.apis.describe_user_scram_credentials import DESCRIBE_USER_SCRAM_CREDENTIALS
from minikafka.protocol.apis.elect_leaders import ELECT_LEADERS
from minikafka.protocol.apis.end_txn import END_TXN
from minikafka.protocol.apis.fetch import FETCH
from minikafka.protocol.apis.find_coordinator import FIND_COORDINATOR
from minikafka.protocol.apis.heartbeat import HEARTBEAT
from minikafka.protocol.apis.incremental_alter_configs import INCREMENTAL_ALTER_CONFIGS
from minikafka.protocol.apis.init_producer_id import INIT_PRODUCER_ID
from minikafka.protocol.apis.join_group import JOIN_GROUP
from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.apis.leader_and_isr import LEADER_AND_ISR
from minikafka.protocol.apis.leave_group import LEAVE_GROUP
from minikafka.protocol.apis.list_groups import LIST_GROUPS
from minikafka.protocol.apis.list_offsets import LIST_OFFSETS
from minikafka.protocol.apis.list_partition_reassignments import LIST_PARTITION_REASSIGNMENTS
from minikafka.protocol.apis.list_transactions import LIST_TRANSACTIONS
from minikafka.protocol.apis.metadata import METADATA
from minikafka.protocol.apis.offset_commit import OFFSET_COMMIT
from minikafka.protocol.apis.offset_delete import OFFSET_DELETE
from minikafka.protocol.apis.offset_fetch import OFFSET_FETCH
from minikafka.protocol.apis.offset_for_leader_epoch import OFFSET_FOR_LEADER_EPOCH
from minikafka.protocol.apis.produce import PRODUCE
from minikafka.protocol.apis.sasl_authenticate import SASL_AUTHENTICATE
from minikafka.protocol.apis.sasl_handshake import SASL_HANDSHAKE
from minikafka.protocol.apis.stop_replica import STOP_REPLICA
from minikafka.protocol.apis.sync_group import SYNC_GROUP
from minikafka.protocol.apis.txn_offset_commit import TXN_OFFSET_COMMIT
from minikafka.protocol.apis.update_metadata import UPDATE_METADATA
from minikafka.protocol.apis.write_txn_markers import WRITE_TXN_MARKERS
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.schema import Api

APIS: dict[int, Api] = {
    api.key: api
    for api in (
        PRODUCE,
        FETCH,
        LIST_OFFSETS,
        METADATA,
        LEADER_AND_ISR,
        STOP_REPLICA,
        UPDATE_METADATA,
        CONTROLLED_SHUTDOWN,
        OFFSET_COMMIT,
        OFFSET_FETCH,
        FIND_COORDINATOR,
        JOIN_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        SYNC_GROUP,
        DESCRIBE_GROUPS,
        LIST_GROUPS,
        SASL_HANDSHAKE,
        API_VERSIONS,
        CREATE_TOPICS,
        DELETE_TOPICS,
        INIT_PRODUCER_ID,
        OFFSET_FOR_LEADER_EPOCH,
        TXN_OFFSET_COMMIT,
        SASL_AUTHENTICATE,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        INCREMENTAL_ALTER_CONFIGS,
        CREATE_PARTITIONS,
        DELETE_RECORDS,
        DESCRIBE_ACLS,
        CREATE_ACLS,
        DELETE_ACLS,
        DELETE_GROUPS,
        OFFSET_DELETE,
        ALTER_REPLICA_LOG_DIRS,
        DESCRIBE_LOG_DIRS,
        ELECT_LEADERS,
        ALTER_PARTITION_REASSIGNMENTS,
        LIST_PARTITION_REASSIGNMENTS,
        DESCRIBE_USER_SCRAM_CREDENTIALS,
        ALTER_USER_SCRAM_CREDENTIALS,
        ADD_PARTITIONS_TO_TXN,
        ADD_OFFSETS_TO_TXN,
        END_TXN,
        WRITE_TXN_MARKERS,
        DESCRIBE_TRANSACTIONS,
        LIST_TRANSACTIONS,
        DESCRIBE_CLUSTER,
        DESCRIBE_TOPIC_PARTITIONS,
    )
}


def api_versions_table() -> list[tuple[int, int, int]]:
    """``(api_key, min_version, max_version)`` for every registered API, by key, as advertised."""
    return [(int(key), api.min_version, api.max_version) for key, api in sorted(APIS.items())]


def api_versions_response(error_code: int = ErrorCode.NONE, served: Container[int] | None = None) -> dict:
    """The body of an ApiVersions response advertising our table, restricted to the API keys
    in ``served`` when given (a broker advertises only what it has a handler for)."""
    return {
        "error_code": int(error_code),
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, low, high in api_versions_table()
            if served is None or key in served
        ],
    }


def api_versions_fallback_response(served: Container[int] | None = None) -> dict:
    """Kafka's answer to an ApiVersions request at a version it does not serve: error
    UNSUPPORTED_VERSION plus the table, encoded in the v0 layout (the client then retries at
    the highest version both sides know)."""
    return api_versions_response(ErrorCode.UNSUPPORTED_VERSION, served)


__all__ = [
    "APIS",
    "ApiKey",
    "api_versions_fallback_response",
    "api_versions_response",
    "api_versions_table",
]
