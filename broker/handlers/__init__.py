"""Request handlers, one module per API, found by discovery.

Each module in this package declares::

    API_KEY = ApiKey.SOMETHING

    async def handle(broker, request) -> dict | None:
        ...

``request`` is a ``protocol.framing.Request`` (``request.body`` is the decoded ``Struct``,
``request.api_version`` the version to answer in). The handler returns the response body as
a dict (fields left out take their schema defaults), ``None`` when the request gets no
response (Produce with ``acks=0``), or raises :class:`CloseConnection` to drop the client.
Handlers shape requests and responses only; the work lives in the ``Broker`` and below.

``HANDLERS`` maps every API key to its handler; adding a module is all it takes to serve an
API (ApiVersions advertises exactly the APIs found here).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from typing import Any

from minikafka.protocol.apis import ApiKey


class CloseConnection(Exception):
    """Raised by a handler to close the client's connection without a response (e.g. a
    failed ``acks=0`` Produce, where closing is the only way to tell the producer)."""


Handler = Callable[[Any, Any], Awaitable[dict | None]]


def _discover() -> dict[ApiKey, Handler]:
    handlers: dict[ApiKey, Handler] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        api_key = getattr(module, "API_KEY", None)
        handle = getattr(module, "handle", None)
        if api_key is None or handle is None:
            continue
        api_key = ApiKey(api_key)
        if api_key in handlers:
            raise ImportError(f"two handler modules for {api_key.name}: {module.__name__} and "
                              f"{handlers[api_key].__module__}")
        handlers[api_key] = handle
    return handlers


HANDLERS: dict[ApiKey, Handler] = _discover()

__all__ = ["HANDLERS", "CloseConnection", "Handler"]
