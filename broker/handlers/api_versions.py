"""ApiVersions (key 18): the APIs this broker serves and their version ranges.

The table is the protocol layer's registry restricted to the APIs that have a handler here,
so the broker never advertises something it would refuse. A request above our highest
version (``request.unsupported_version``, no body) is answered with UNSUPPORTED_VERSION and
the same table, which the protocol layer lays out as v0 so that any client can read it and
retry at a version both sides know.
"""

from __future__ import annotations

from minikafka.protocol.apis import ApiKey, api_versions_fallback_response, api_versions_response

API_KEY = ApiKey.API_VERSIONS


async def handle(broker, request) -> dict:
    from minikafka.broker.handlers import HANDLERS

    if request.unsupported_version:
        body = api_versions_fallback_response(served=HANDLERS)
    else:
        body = api_versions_response(served=HANDLERS)
    return {**body, "throttle_time_ms": 0}
