"""Request and response framing, sans-I/O: bytes in, requests out; responses in, chunks out.

Every Kafka message travels as a size-prefixed frame::

    frame           = size:int32  payload:size bytes
    request payload = header body
    request header  v0: api_key:int16 api_version:int16 correlation_id:int32
                    v1: v0 + client_id:string
                    v2: v1 + tagged fields            (flexible request versions, KIP-482)
    response payload = header body
    response header v0: correlation_id:int32
                    v1: v0 + tagged fields            (flexible response versions)

``client_id`` is a classic nullable int16-length string even in header v2. The ApiVersions
response header is always v0, whatever the version, so that a client can read the answer
before it knows what the broker speaks. Header v0, without client_id, is only used by
ControlledShutdown v0 requests: :func:`parse_request` reads it without a client_id (the body is
not mistaken for one) and :func:`encode_request` writes none.

:class:`ServerConnection` is the broker side (h11 style): feed it bytes with ``receive_data``,
pull complete requests with ``next_request``, turn a response body into wire chunks with
``encode_response``. :class:`ClientConnection` is the mirror image for tests, benchmarks and
the replay tool. Bad bytes from the peer raise :class:`~protocol.errors.ProtocolError`, and
nothing else, after which the connection is unusable and should be closed.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, NamedTuple

from minikafka.protocol.apis import APIS, ApiKey, api_versions_table
from minikafka.protocol.errors import ProtocolError
from minikafka.protocol.schema import Struct
from minikafka.protocol.types import INT16_S, INT32_S, Writer, chunk_length, skip_tagged_fields

DEFAULT_MAX_FRAME_SIZE = 104857600  # socket.request.max.bytes
# Frames of this many bytes and more are received in place (``_FrameBuffer``): as large as
# one read of the broker's, so smaller ones, which mostly arrive whole, cost no extra read.
RECEIVE_IN_PLACE_SIZE = 65536

_REQUEST_HEADER = struct.Struct(">hhi")
# The one request with header v0 (Kafka's ApiMessageType.requestHeaderVersion).
_CONTROLLED_SHUTDOWN_V0 = (7, 0)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "ClientConnection",
    "Request",
    "ServerConnection",
    "api_versions_table",
    "decode_response",
    "encode_frame",
    "encode_request",
    "encode_response",
    "parse_request",
]


class Request:
    """A decoded request: its header fields and its body.

    ``unsupported_version`` is True only for an ApiVersions request at a version we do not
    serve; its body is then ``None`` and the answer is
    ``protocol.api_versions_fallback_response()``, which :func:`encode_response` lays out as v0.

    Written out rather than a dataclass, whose creation costs start-up ~0.5 ms (issue 17):
    the server's I/O layer fills in the last three fields after decoding, so it cannot be a
    NamedTuple like the module's other records.
    """

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "body", "unsupported_version",
                 "client_host", "listener", "principal")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 body: Struct | None, unsupported_version: bool = False, client_host: str = "",
                 listener: str = "", principal: str = "User:ANONYMOUS") -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body = body
        self.unsupported_version = unsupported_version
        # The peer's address, filled in by the server side's I/O layer (the sans-I/O decoder
        # never sees a socket); the group coordinator shows it as each member's client host.
        self.client_host = client_host
        # The name of the listener it came in on (Metadata answers with that listener's addresses).
        self.listener = listener
        # Who sent it (Kafka's principal string), as TLS or SASL established; for the authorizer.
        self.principal = principal

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def replace(self, **changes: Any) -> "Request":
        """A copy with ``changes`` applied."""
        values = dict(zip(self.__slots__, self._values()))
        values.update(changes)
        return Request(**values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Request) and self._values() == other._values()

    __hash__ = None  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self.__slots__, self._values()))
        return f"Request({fields})"


class _FrameBuffer:
    """Reassembles size-prefixed frames from arbitrary byte chunks.

    The size is checked as soon as its four bytes are in: a negative size or one above
    ``max_frame_size`` is refused before any of the body is kept, and once refused the buffer
    stops accepting data.

    Frames come out as views, not copies, wherever that is safe: a ``bytes`` chunk fed into an
    empty buffer is kept as it is (immutable, so views of it stay valid), and most requests
    arrive whole in one chunk; only a frame split across chunks is gathered in a bytearray,
    which is then given up, not reused, by the frame that ends it.

    A reader that asks (``receive_buffer``) receives the rest of a large frame
    (``RECEIVE_IN_PLACE_SIZE`` and over) in place instead, once its prefix is in: the frame is
    allocated whole, once, and the reader's bytes land straight there (then
    ``buffer_updated``), as Kafka's NetworkReceive reads into a buffer of the frame's size.
    Gathered from chunks, a 300 kB produce request was copied out of each chunk, moved as the
    bytearray grew, and copied out again when the next frame's first bytes came with its last
    ones. It comes out as a view of its own bytearray, which nothing else holds.
    """

    __slots__ = ("_buf", "_start", "_max", "_error", "_frame", "_filled")

    def __init__(self, max_frame_size: int) -> None:
        self._buf: bytes | bytearray = b""
        self._start = 0
        self._max = max_frame_size
        self._error: ProtocolError | None = None
        # The frame being received in place, and how much of it is in.
        self._frame: bytearray | None = None
        self._filled = 0

    def receive_buffer(self) -> memoryview | None:
        """Where to receive the rest of the frame being assembled, when it is received in
        place (see the class docstring); None when the next bytes should be ``feed``-ed."""
        if self._frame is None:
            if self._error is not None:
                return None
            buf, start = self._buf, self._start
            available = len(buf) - start
            if available < 4:
                return None
            (size,) = INT32_S.unpack_from(buf, start)
            if size < RECEIVE_IN_PLACE_SIZE or available >= 4 + size:
                return None
            self._frame = bytearray(size)
            self._filled = available - 4
            self._frame[:self._filled] = memoryview(buf)[start + 4:]
            self._buf = b""
            self._start = 0
        if self._filled == len(self._frame):  # whole: bytes after it are fed
            return None
        return memoryview(self._frame)[self._filled:]

    def buffer_updated(self, received: int) -> None:
        """``received`` bytes were written at the start of ``receive_buffer()``."""
        self._filled += received

    def feed(self, data: bytes) -> None:
        if self._error is not None or not data:
            return
        if self._frame is not None:  # the rest of the frame first
            taken = min(len(data), len(self._frame) - self._filled)
            self._frame[self._filled:self._filled + taken] = memoryview(data)[:taken]
            self._filled += taken
            data = data[taken:]
            if not data:
                return
        if self._start == len(self._buf) and type(data) is bytes:
            self._buf = data
            self._start = 0
        elif type(self._buf) is bytearray:
            self._buf += data
        else:  # a kept chunk with bytes left over, or a mutable chunk: gather from here on
            buf = bytearray(memoryview(self._buf)[self._start:])
            buf += data
            self._buf = buf
            self._start = 0
        self._check_head()

    def _check_head(self) -> None:
        if len(self._buf) - self._start < 4:
            return
        (size,) = INT32_S.unpack_from(self._buf, self._start)
        if size < 0:
            self._fail(ProtocolError(f"negative frame size {size}"))
        elif size > self._max:
            self._fail(ProtocolError(
                f"frame of {size} bytes exceeds the maximum of {self._max} (socket.request.max.bytes)"))

    def _fail(self, error: ProtocolError) -> None:
        self._error = error
        self._buf = b""
        self._start = 0

    def next_frame(self) -> bytes | memoryview | None:
        """The next complete payload (without its size prefix), or None if more is needed.

        A view of the received bytes when they are immutable or when the frame ends the
        buffered bytes (the bytearray is then given up rather than copied; a 1 MB produce
        request was copied twice here); a copy only for a frame followed by more bytes in a
        gathering bytearray, which goes on being appended to."""
        if self._error is not None:
            raise self._error
        if self._frame is not None:
            if self._filled < len(self._frame):
                return None
            frame, self._frame = self._frame, None
            return memoryview(frame)
        buf = self._buf
        start = self._start
        available = len(buf) - start
        if available < 4:
            return None
        (size,) = INT32_S.unpack_from(buf, start)
        if available < 4 + size:
            return None
        begin = start + 4
        end = self._start = begin + size
        if end == len(buf):
            self._buf = b""
            self._start = 0
            return memoryview(buf)[begin:]
        if type(buf) is bytes:
            frame = memoryview(buf)[begin:end]
        else:
            with memoryview(buf) as view:
                frame = view[begin:end].tobytes()
            if end > 65536 and end * 2 > len(buf):
                del buf[:end]
                self._start = 0
        self._check_head()
        return frame

    @property
    def buffered(self) -> int:
        in_place = 0 if self._frame is None else 4 + self._filled
        return in_place + len(self._buf) - self._start

    @property
    def frame_length(self) -> int | None:
        """Length (size prefix included) of the frame being assembled, once its prefix is in."""
        if self._frame is not None:
            return 4 + len(self._frame)
        if self._error is not None or len(self._buf) - self._start < 4:
            return None
        return 4 + INT32_S.unpack_from(self._buf, self._start)[0]


def _read_header_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    (n,) = INT16_S.unpack_from(buf, pos)
    pos += 2
    if n == -1:
        return None, pos
    if n < 0 or pos + n > len(buf):
        raise ProtocolError(f"invalid client_id length {n}")
    try:
        return str(buf[pos:pos + n], "utf-8"), pos + n
    except UnicodeDecodeError:
        raise ProtocolError("client_id is not valid UTF-8") from None


def parse_request(frame: bytes) -> Request:
    """Decode one request payload (the bytes after the size prefix).

    The header is read first, so every error names the API key and correlation id. Unknown
    API keys and unsupported versions (other than ApiVersions) raise ``ProtocolError``.
    """
    buf = memoryview(frame)
    if len(buf) < _REQUEST_HEADER.size:
        raise ProtocolError(f"request of {len(buf)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _REQUEST_HEADER.unpack_from(buf, 0)
    if (api_key, api_version) == _CONTROLLED_SHUTDOWN_V0:
        client_id, pos = None, _REQUEST_HEADER.size
    else:
        try:
            client_id, pos = _read_header_string(buf, _REQUEST_HEADER.size)
        except struct.error:
            raise ProtocolError("truncated request header") from None
    where = f"(api key {api_key}, correlation id {correlation_id}, client {client_id!r})"
    api = APIS.get(api_key)
    if api is None:
        raise ProtocolError(f"unknown api key {api_key} {where}")
    if not api.supports(api_version):
        if api_key == ApiKey.API_VERSIONS and api_version > api.max_version:
            return Request(api_key, api_version, correlation_id, client_id, None, True)
        raise ProtocolError(
            f"{api.name} v{api_version} is not supported, we serve "
            f"v{api.min_version}-v{api.max_version} {where}")
    if api.is_flexible(api_version):
        try:
            pos = skip_tagged_fields(buf, pos)
        except (IndexError, struct.error):
            raise ProtocolError(f"truncated request header tagged fields {where}") from None
    try:
        # Bytes after the body are left unread, as Kafka's RequestContext.parseRequest leaves
        # them: librdkafka 2.x sends some (four bytes reserved for Metadata v9+'s null topic
        # array where one is written; an AlterUserScramCredentials tagged-fields byte too many).
        body = api.request(api_version).decode(buf, pos, to_the_end=False)
    except ProtocolError as exc:
        raise ProtocolError(f"{exc} {where}") from None
    return Request(api_key, api_version, correlation_id, client_id, body, False)


def encode_response(request: Request, body: Any) -> list[Any]:
    """Encode a complete response frame to the given request, as chunks.

    Chunks are bytes-like (``bytearray`` for what was encoded here, handed over rather than
    copied) except for file slices found in ``records`` fields, which are passed through
    untouched; the first chunk starts with the size prefix and the lengths of all chunks add
    up to the bytes on the wire. Most responses are one chunk.
    """
    api = APIS[request.api_key]
    version = request.api_version
    if request.api_key == ApiKey.API_VERSIONS and (
            request.unsupported_version or _field(body, "error_code", 0) != 0):
        # Clients read any ApiVersions error in the v0 layout (that is how they learn which
        # versions to retry with), so Kafka sends every ApiVersions error that way.
        version = 0
    w = Writer()
    w.buf += INT32_S.pack(0)
    w.buf += INT32_S.pack(request.correlation_id)
    if api.is_flexible(version) and request.api_key != ApiKey.API_VERSIONS:
        w.buf.append(0)  # response header v1: no tagged fields
    api.response(version).encode(w, body)
    chunks = w.finish()
    size = len(chunks[0]) if len(chunks) == 1 else sum(map(chunk_length, chunks))
    INT32_S.pack_into(chunks[0], 0, size - 4)
    return chunks


def _field(body: Any, name: str, default: Any) -> Any:
    if isinstance(body, dict):
        return body.get(name, default)
    return getattr(body, name, default)


class _FramedInput:
    """Bytes in, whole frames out (``self._frames``): what both ends of a connection receive."""

    _frames: _FrameBuffer

    def receive_data(self, data: bytes) -> None:
        self._frames.feed(data)

    def receive_buffer(self) -> memoryview | None:
        """A writable view to receive the next bytes into directly, then call
        ``buffer_updated`` with how many were written; None when they should be passed to
        ``receive_data`` instead (as asyncio's ``BufferedProtocol.get_buffer``; only the rest
        of a large frame is received this way, see ``_FrameBuffer``)."""
        return self._frames.receive_buffer()

    def buffer_updated(self, received: int) -> None:
        self._frames.buffer_updated(received)


class ServerConnection(_FramedInput):
    """The broker side of one connection: bytes in, :class:`Request` objects out.

    ``next_request`` returns ``None`` when it needs more bytes and raises ``ProtocolError``
    for a frame it refuses (oversized, negative size, unknown API, unsupported version,
    malformed body); the connection must then be closed.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._frames = _FrameBuffer(max_frame_size)

    def next_request(self) -> Request | None:
        frame = self._frames.next_frame()
        if frame is None:
            return None
        return parse_request(frame)

    def next_frame(self) -> bytes | None:
        """The next frame's payload as it is, for the bare SASL tokens that follow a
        SaslHandshake v0 (they carry no request header)."""
        frame = self._frames.next_frame()
        return None if frame is None else bytes(frame)

    @property
    def max_frame_size(self) -> int:
        return self._frames._max

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        """A smaller bound before authentication (Kafka's 512 KiB SASL receive limit), so an
        unauthenticated client cannot make the broker hold socket.request.max.bytes."""
        self._frames._max = value
        self._frames._check_head()

    def encode_response(self, request: Request, body: Any) -> list[Any]:
        return encode_response(request, body)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as requests."""
        return self._frames.buffered

    @property
    def pending_frame_length(self) -> int | None:
        """Length (size prefix included) of the next frame not yet returned as a request,
        once its size prefix is in; an I/O layer reserves that much memory before reading
        on (KIP-72's memory pool)."""
        return self._frames.frame_length


def encode_frame(payload: bytes) -> bytes:
    """A bare size-prefixed frame (a SASL token answered after SaslHandshake v0)."""
    return INT32_S.pack(len(payload)) + payload


# ---------------------------------------------------------------------------------------------
# client side


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """A complete request frame (size prefix included) at a version we serve. ApiVersions may
    also be sent above our range, with an empty v3-layout body, as newer clients open with."""
    api = APIS[api_key]
    w = Writer()
    w.buf += INT32_S.pack(0)
    w.buf += _REQUEST_HEADER.pack(api_key, version, correlation_id)
    if (api_key, version) == _CONTROLLED_SHUTDOWN_V0:
        pass  # header v0
    elif client_id is None:
        w.buf += INT16_S.pack(-1)
    else:
        data = client_id.encode("utf-8")
        w.buf += INT16_S.pack(len(data)) + data
    if api.supports(version):
        if api.is_flexible(version):
            w.buf.append(0)
        api.request(version).encode(w, body)
    elif api_key == ApiKey.API_VERSIONS and version > api.max_version:
        # v3+ layout: header tags, empty software name and version, body tags
        w.buf += b"\x00\x01\x01\x00"
    else:
        raise ValueError(f"{api.name} v{version} has no schema")
    frame = bytearray().join(_as_bytes(c) for c in w.finish())
    INT32_S.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def _as_bytes(chunk: Any) -> Any:
    if isinstance(chunk, (bytes, bytearray, memoryview)):
        return chunk
    return chunk.read_bytes()


def decode_response(api_key: int, version: int, frame: bytes) -> Struct:
    """Decode a complete response frame (size prefix included) to a request sent at
    ``version``. An ApiVersions error response is decoded in the v0 layout, as Kafka sends it."""
    buf = memoryview(frame)
    if len(buf) < 8:
        raise ProtocolError(f"response frame of {len(buf)} bytes is too short")
    (size,) = INT32_S.unpack_from(buf, 0)
    if size != len(buf) - 4:
        raise ProtocolError(f"size prefix says {size} bytes but the frame holds {len(buf) - 4}")
    return _decode_response_payload(api_key, version, buf[4:])[1]


def _decode_response_payload(api_key: int, version: int, buf: memoryview) -> tuple[int, Struct]:
    api = APIS[api_key]
    if len(buf) < 4:
        raise ProtocolError("response shorter than its header")
    (correlation_id,) = INT32_S.unpack_from(buf, 0)
    pos = 4
    if api_key == ApiKey.API_VERSIONS:
        if len(buf) >= 6 and INT16_S.unpack_from(buf, 4)[0] != 0:
            version = 0
        version = min(version, api.max_version)
    elif api.is_flexible(version):
        try:
            pos = skip_tagged_fields(buf, pos)
        except (IndexError, struct.error):
            raise ProtocolError("truncated response header") from None
    if not api.supports(version):
        raise ValueError(f"{api.name} v{version} has no schema")
    return correlation_id, api.response(version).decode(buf, pos)


class Response(NamedTuple):
    """A decoded response, matched to the request it answers."""

    correlation_id: int
    api_key: int
    api_version: int
    body: Struct


class ClientConnection(_FramedInput):
    """The client side of one connection: requests out, :class:`Response` objects in.

    Correlation ids are assigned in order; responses must arrive in request order (Kafka
    guarantees this per connection). Requests that expect no response (Produce with
    ``acks=0``) are not tracked.
    """

    def __init__(self, client_id: str | None = "minikafka",
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.client_id = client_id
        self._frames = _FrameBuffer(max_frame_size)
        self._next_correlation_id = 0
        self._pending: deque[tuple[int, int, int]] = deque()

    def send_request(self, api_key: int, version: int, body: Any,
                     expect_response: bool = True) -> tuple[int, bytes]:
        """Encode a request; returns ``(correlation_id, frame bytes)``."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        if expect_response:
            self._pending.append((correlation_id, api_key, version))
        return correlation_id, frame

    def next_response(self) -> Response | None:
        frame = self._frames.next_frame()
        if frame is None:
            return None
        if not self._pending:
            raise ProtocolError("response received while no request is outstanding")
        correlation_id, api_key, version = self._pending.popleft()
        got_id, body = _decode_response_payload(api_key, version, memoryview(frame))
        if got_id != correlation_id:
            raise ProtocolError(f"response correlation id {got_id}, expected {correlation_id}")
        return Response(correlation_id, api_key, version, body)

    def next_raw_frame(self) -> bytes | None:
        """The next frame's payload as it came, or None if more is needed: Kafka 0.10.2's SASL
        tokens after a SaslHandshake travel as bare size-prefixed frames, not responses."""
        frame = self._frames.next_frame()
        return None if frame is None else bytes(frame)

    @property
    def pending(self) -> int:
        return len(self._pending)
