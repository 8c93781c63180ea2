"""Kafka's wire protocol, sans-I/O: framing, message schemas, message sets, codecs, errors.

Nothing here touches sockets, trio or files. The broker feeds bytes into a
:class:`ServerConnection`, gets :class:`Request` objects back, and turns response bodies
(dicts or :class:`Struct`) into wire chunks with :meth:`ServerConnection.encode_response`.
"""

from __future__ import annotations

import importlib

# Each public name and the module that defines it, imported on first access (PEP 562): a
# broker that needs one submodule (storage needs message sets, not the request schemas)
# does not pay at start-up for the package's others.
_WHERE = {
    "APIS": "minikafka.protocol.apis",
    "ApiKey": "minikafka.protocol.apis",
    "api_versions_fallback_response": "minikafka.protocol.apis",
    "api_versions_response": "minikafka.protocol.apis",
    "api_versions_table": "minikafka.protocol.apis",
    "DEFAULT_MAX_FRAME_SIZE": "minikafka.protocol.framing",
    "ClientConnection": "minikafka.protocol.framing",
    "Request": "minikafka.protocol.framing",
    "Response": "minikafka.protocol.framing",
    "ServerConnection": "minikafka.protocol.framing",
    "decode_response": "minikafka.protocol.framing",
    "encode_request": "minikafka.protocol.framing",
    "encode_response": "minikafka.protocol.framing",
    "parse_request": "minikafka.protocol.framing",
    "EncodeError": "minikafka.protocol.schema",
    "Struct": "minikafka.protocol.schema",
    "ErrorCode": "minikafka.protocol.errors",
    "ProtocolError": "minikafka.protocol.errors",
    "RecordError": "minikafka.protocol.errors",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
