"""Kafka's wire protocol, sans-I/O: framing, message schemas, message sets, codecs, errors.

Nothing here touches sockets, trio or files. The broker feeds bytes into a
:class:`ServerConnection`, gets :class:`Request` objects back, and turns response bodies
(dicts or :class:`Struct`) into wire chunks with :meth:`ServerConnection.encode_response`.
"""

from minikafka.protocol.apis import (
    APIS,
    ApiKey,
    api_versions_fallback_response,
    api_versions_response,
    api_versions_table,
)
from minikafka.protocol.errors import ErrorCode, ProtocolError, RecordError
from minikafka.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    ClientConnection,
    Request,
    Response,
    ServerConnection,
    decode_response,
    encode_request,
    encode_response,
    parse_request,
)
from minikafka.protocol.schema import EncodeError, Struct

__all__ = [
    "APIS",
    "DEFAULT_MAX_FRAME_SIZE",
    "ApiKey",
    "ClientConnection",
    "EncodeError",
    "ErrorCode",
    "ProtocolError",
    "RecordError",
    "Request",
    "Response",
    "ServerConnection",
    "Struct",
    "api_versions_fallback_response",
    "api_versions_response",
    "api_versions_table",
    "decode_response",
    "encode_request",
    "encode_response",
    "parse_request",
]
