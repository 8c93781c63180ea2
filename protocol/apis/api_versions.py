"""ApiVersions (key 18), v0-v3. v3 is flexible (KIP-482) and carries the client's software name
and version; its response header stays v0 (no tagged fields) so that clients can always parse
it, and an error response is always laid out as v0 (see ``protocol.framing``)."""

from minikafka.protocol.apis.keys import ApiKey
from minikafka.protocol.schema import Api, Array, Field
from minikafka.protocol.types import BOOLEAN, INT16, INT32, INT64, STRING

API_VERSIONS = Api(
    ApiKey.API_VERSIONS,
    "ApiVersions",
    versions=(0, 3),
    flexible="3+",
    request=(
        Field("client_software_name", STRING, "3+"),
        Field("client_software_version", STRING, "3+"),
    ),
    response=(
        Field("error_code", INT16),
        Field("api_keys", Array(
            Field("api_key", INT16),
            Field("min_version", INT16),
            Field("max_version", INT16),
        )),
        Field("throttle_time_ms", INT32, "1+"),
        Field("supported_features", Array(
            Field("name", STRING),
            Field("min_version", INT16),
            Field("max_version", INT16),
        ), "3+", tag=0),
        Field("finalized_features_epoch", INT64, "3+", default=-1, tag=1),
        Field("finalized_features", Array(
            Field("name", STRING),
            Field("max_version_level", INT16),
            Field("min_version_level", INT16),
        ), "3+", tag=2),
        Field("zk_migration_ready", BOOLEAN, "3+", default=False, tag=3),
    ),
)
