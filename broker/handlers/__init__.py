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

``HANDLERS`` maps every API key to its handler; adding a module named after the API
(``ApiKey.LIST_OFFSETS`` is ``list_offsets.py``) is all it takes to serve it (ApiVersions
advertises exactly the APIs found here). A module is imported on its API's first request.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from minikafka.protocol.apis import ApiKey


class CloseConnection(Exception):
    """Raised by a handler to close the client's connection without a response (e.g. a
    failed ``acks=0`` Produce, where closing is the only way to tell the producer)."""


Handler = Callable[[Any, Any], Awaitable[dict | None]]


def _stand_in(api_key: ApiKey, module_name: str) -> Handler:
    """The handler of ``api_key`` until its first request: imports the module, puts its
    handler in HANDLERS in its own place and serves the request with it. A broker loads the
    modules of the APIs its clients use and no others (a single broker never sees a
    LeaderAndIsr, a producer never joins a group)."""

    async def load_and_handle(broker: Any, request: Any) -> dict | None:
        return await load(api_key)(broker, request)

    load_and_handle.module_name = module_name  # type: ignore[attr-defined]
    return load_and_handle


def load(api_key: ApiKey) -> Handler:
    """The handler of ``api_key``, its module imported if it was not yet."""
    handle = HANDLERS[api_key]
    module_name = getattr(handle, "module_name", None)
    if module_name is None:
        return handle
    module = importlib.import_module(f"{__name__}.{module_name}")
    if getattr(module, "API_KEY", None) != api_key or not callable(getattr(module, "handle", None)):
        raise ImportError(f"{module.__name__} must declare API_KEY = ApiKey.{api_key.name} and a handle()")
    HANDLERS[api_key] = module.handle
    return module.handle


def _module_names() -> Iterator[str]:
    """The modules in this package's directory (source, bytecode or extension files), as
    ``pkgutil.iter_modules`` lists them for a directory, without importing pkgutil and its
    walk (~0.8 ms of the broker's start)."""
    suffixes = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)
    for directory in __path__:
        for entry in os.scandir(directory):
            if entry.is_file():
                suffix = next((s for s in suffixes if entry.name.endswith(s)), None)
                name = entry.name[:-len(suffix)] if suffix else ""
                if name.isidentifier() and name != "__init__":
                    yield name


def _discover() -> dict[ApiKey, Handler]:
    # A module is named after its API (``metadata`` serves ApiKey.METADATA), so the APIs
    # served are known from the file names alone, without importing the modules.
    handlers: dict[ApiKey, Handler] = {}
    for name in sorted(set(_module_names())):  # a module may be there as source and bytecode
        if name.startswith("_"):
            continue
        try:
            api_key = ApiKey[name.upper()]
        except KeyError:
            raise ImportError(f"{__name__}.{name} is not named after an API key") from None
        handlers[api_key] = _stand_in(api_key, name)
    return handlers


HANDLERS: dict[ApiKey, Handler] = _discover()

__all__ = ["HANDLERS", "CloseConnection", "Handler", "load"]
