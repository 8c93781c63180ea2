"""Kafka's primitive wire types and the byte-level readers and writers behind them.

Every multi-byte integer is big-endian. The layouts, as Kafka's protocol guide defines them:

=================  ==========================================================================
int8/16/32/64      fixed width, two's complement
boolean            one byte, 0 = false, anything else = true
string             int16 length N, then N bytes of UTF-8; N = -1 means null (nullable only)
compact string     unsigned varint N+1, then N bytes of UTF-8; 0 means null
bytes              int32 length N, then N bytes; N = -1 means null
compact bytes      unsigned varint N+1, then N bytes; 0 means null
records            like bytes: a message set, carried opaquely
uuid               16 bytes (a topic id, KIP-516); all zero means "no id"
array              int32 count N (-1 = null), then N elements
compact array      unsigned varint N+1 (0 = null), then N elements
unsigned varint    7 bits per byte, least significant group first, high bit = "more follows"
tagged fields      unsigned varint count, then per field: varint tag, varint size, size bytes
=================  ==========================================================================

Compact forms and tagged fields are used only by "flexible" versions (KIP-482).

A :class:`PrimitiveType` knows how to build a reader ``(buf, pos) -> (value, pos)`` and a
writer ``(writer, value) -> None`` for a given (flexible, nullable) pair; the schema compiler
builds these once per message version so decoding never re-inspects a declaration.
Readers raise :class:`~protocol.errors.ProtocolError` for impossible lengths; running off the
end of the buffer surfaces as ``struct.error`` / ``IndexError`` which the message decoder turns
into ``ProtocolError`` as well.
"""

from __future__ import annotations

import base64
import struct
from typing import Any, Callable

from minikafka.protocol.errors import ProtocolError

Reader = Callable[[memoryview, int], tuple[Any, int]]
WriterFn = Callable[["Writer", Any], None]

INT8_S = struct.Struct(">b")
INT16_S = struct.Struct(">h")
INT32_S = struct.Struct(">i")
INT64_S = struct.Struct(">q")

# Record payloads at least this big go out as their own chunk instead of being copied into
# the header buffer: a fetch response made of large in-memory sets is then never re-copied.
LARGE_CHUNK = 16 * 1024


class Writer:
    """Accumulates an encoded message as a list of chunks.

    Small values go into ``buf`` (a bytearray); a ``records`` value that is not bytes-like but
    has an int ``length`` (storage's ``FileSlice``) is emitted as a chunk of its own, untouched,
    so the connection can ``sendfile`` it. Large bytes payloads are also passed through as
    their own chunk to avoid a copy.
    """

    __slots__ = ("buf", "chunks")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.chunks: list[Any] = []

    def pass_through(self, chunk: Any) -> None:
        if self.buf:
            self.chunks.append(self.buf)
            self.buf = bytearray()
        self.chunks.append(chunk)

    def finish(self) -> list[Any]:
        """The chunks: bytearrays for what was written here, passed-through objects as given."""
        if self.buf or not self.chunks:
            self.chunks.append(self.buf)
            self.buf = bytearray()
        return self.chunks


def chunk_length(chunk: Any) -> int:
    """Bytes a chunk occupies on the wire (``len`` for bytes, ``.length`` for file slices)."""
    if isinstance(chunk, (bytes, bytearray, memoryview)):
        return len(chunk)
    return chunk.length


# ---------------------------------------------------------------------------------------------
# unsigned varints and tagged fields


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """Skip a tagged-field section whose tags are all unknown to us (e.g. a request header's)."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolError("tagged field runs past the end of the frame")
    return pos


def _length_prefix_reader(flexible: bool, wide: bool) -> Reader:
    """Reader of a length prefix returning N (or -1 for null): int16/int32 or compact varint."""
    if flexible:

        def read(buf: memoryview, pos: int) -> tuple[int, int]:
            n, pos = read_uvarint(buf, pos)
            return n - 1, pos

        return read
    unpack = (INT32_S if wide else INT16_S).unpack_from
    size = 4 if wide else 2

    def read_fixed(buf: memoryview, pos: int) -> tuple[int, int]:
        return unpack(buf, pos)[0], pos + size

    return read_fixed


def _checked_length_reader(flexible: bool, wide: bool, nullable: bool, what: str) -> Reader:
    """Reader of a length prefix returning N >= 0, or -1 for null where ``nullable``; any
    other negative length is a ProtocolError naming ``what``."""
    read_len = _length_prefix_reader(flexible, wide)

    def read(buf: memoryview, pos: int) -> tuple[int, int]:
        n, pos = read_len(buf, pos)
        if n < -1 or (n == -1 and not nullable):
            raise ProtocolError(f"invalid {what} length {n}")
        return n, pos

    return read


def _write_length(flexible: bool, wide: bool) -> Callable[[bytearray, int], None]:
    if flexible:
        return lambda out, n: write_uvarint(out, n + 1)
    pack = (INT32_S if wide else INT16_S).pack
    return lambda out, n: out.extend(pack(n))


# ---------------------------------------------------------------------------------------------
# primitive types


class PrimitiveType:
    """A scalar wire type; ``fmt`` is its struct format character when it has a fixed width."""

    name: str = ""
    fmt: str | None = None
    default: Any = None

    def reader(self, flexible: bool, nullable: bool) -> Reader:
        raise NotImplementedError

    def writer(self, flexible: bool, nullable: bool) -> WriterFn:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


class FixedType(PrimitiveType):
    """int8 / int16 / int32 / int64 / boolean: fixed width, never null."""

    def __init__(self, name: str, fmt: str, default: Any, lo: int, hi: int) -> None:
        self.name = name
        self.fmt = fmt
        self.default = default
        self.lo = lo
        self.hi = hi
        self._struct = struct.Struct(">" + fmt)

    def reader(self, flexible: bool, nullable: bool) -> Reader:
        unpack = self._struct.unpack_from
        size = self._struct.size
        if self.fmt == "?":
            return lambda buf, pos: (buf[pos] != 0, pos + 1)
        return lambda buf, pos: (unpack(buf, pos)[0], pos + size)

    def writer(self, flexible: bool, nullable: bool) -> WriterFn:
        pack = self._struct.pack

        def write(w: Writer, value: Any) -> None:
            w.buf += pack(value)

        return write


class StringType(PrimitiveType):
    """UTF-8 text with an int16 (or compact varint) length; null only where nullable."""

    name = "string"
    default = ""

    def reader(self, flexible: bool, nullable: bool) -> Reader:
        read_len = _checked_length_reader(flexible, False, nullable, "string")

        def read(buf: memoryview, pos: int) -> tuple[str | None, int]:
            n, pos = read_len(buf, pos)
            if n < 0:
                return None, pos
            end = pos + n
            if end > len(buf):
                raise ProtocolError("string runs past the end of the frame")
            try:
                return str(buf[pos:end], "utf-8"), end
            except UnicodeDecodeError as exc:
                raise ProtocolError(f"string is not valid UTF-8: {exc}") from None

        return read

    def writer(self, flexible: bool, nullable: bool) -> WriterFn:
        write_len = _write_length(flexible, wide=False)

        def write(w: Writer, value: str | None) -> None:
            if value is None:
                if not nullable:
                    raise ValueError("null given for a non-nullable string")
                write_len(w.buf, -1)
                return
            data = value.encode("utf-8")
            if not flexible and len(data) > 0x7FFF:
                raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
            write_len(w.buf, len(data))
            w.buf += data

        return write


class BytesType(PrimitiveType):
    """Opaque bytes with an int32 (or compact varint) length; decoded as ``bytes``.

    ``records`` is the same layout, decoded as a ``memoryview`` of the frame (no copy); its
    writer additionally accepts a file slice (an object with an int ``length`` that is not
    bytes-like) and emits it as a separate chunk (an empty slice is written as its length
    alone, with no chunk).
    """

    default = b""

    def __init__(self, name: str, pass_through: bool) -> None:
        self.name = name
        self.pass_through = pass_through

    def reader(self, flexible: bool, nullable: bool) -> Reader:
        # Message sets come out as views of the frame, not copies: a 100 MiB produce would
        # otherwise take twice its size while the request is decoded and handled, beyond what
        # queued.max.request.bytes accounts for. Readers copy what they keep.
        view = self.pass_through
        if not flexible:
            unpack = INT32_S.unpack_from

            def read_classic(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
                (n,) = unpack(buf, pos)
                pos += 4
                end = pos + n
                if n >= 0 and end <= len(buf):
                    return (buf[pos:end] if view else bytes(buf[pos:end])), end
                if n == -1 and nullable:
                    return None, pos
                raise ProtocolError(f"invalid {self.name} length {n} at byte {pos - 4}")

            return read_classic
        read_len = _checked_length_reader(flexible, True, nullable, self.name)

        def read(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
            n, pos = read_len(buf, pos)
            if n < 0:
                return None, pos
            end = pos + n
            if end > len(buf):
                raise ProtocolError(f"{self.name} field runs past the end of the frame")
            return (buf[pos:end] if view else bytes(buf[pos:end])), end

        return read

    def writer(self, flexible: bool, nullable: bool) -> WriterFn:
        write_len = _write_length(flexible, wide=True)
        pass_through = self.pass_through

        def write(w: Writer, value: Any) -> None:
            if value is None:
                if not nullable:
                    raise ValueError(f"null given for non-nullable {self.name}")
                write_len(w.buf, -1)
            elif isinstance(value, (bytes, bytearray, memoryview)):
                write_len(w.buf, len(value))
                if pass_through and len(value) >= LARGE_CHUNK:
                    w.pass_through(bytes(value) if not isinstance(value, bytes) else value)
                else:
                    w.buf += value
            elif pass_through and isinstance(getattr(value, "length", None), int):
                write_len(w.buf, value.length)
                if value.length:
                    w.pass_through(value)
            else:
                raise TypeError(f"{self.name} must be bytes or a file slice, not {type(value).__name__}")

        return write


class UuidType(PrimitiveType):
    """16 bytes, held as Kafka's text form of a ``Uuid`` (base64url without padding, as topic
    ids appear in ``partition.metadata`` and in Kafka's tools); never null: the all-zero id
    (:data:`ZERO_UUID`) stands for "none"."""

    name = "uuid"

    def __init__(self) -> None:
        self.default = ZERO_UUID

    def reader(self, flexible: bool, nullable: bool) -> Reader:
        encode = base64.urlsafe_b64encode

        def read(buf: memoryview, pos: int) -> tuple[str, int]:
            end = pos + 16
            if end > len(buf):
                raise ProtocolError("uuid runs past the end of the frame")
            return encode(buf[pos:end]).decode("ascii")[:22], end

        return read

    def writer(self, flexible: bool, nullable: bool) -> WriterFn:
        def write(w: Writer, value: str) -> None:
            w.buf += uuid_bytes(value)

        return write


def uuid_bytes(text: str) -> bytes:
    """The 16 bytes of a Uuid in Kafka's text form; ValueError for anything else."""
    raw = base64.urlsafe_b64decode(text + "==") if len(text) == 22 else b""
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a uuid (16 bytes, base64url without padding)")
    return raw


ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"

INT8 = FixedType("int8", "b", 0, -(2**7), 2**7 - 1)
INT16 = FixedType("int16", "h", 0, -(2**15), 2**15 - 1)
INT32 = FixedType("int32", "i", 0, -(2**31), 2**31 - 1)
INT64 = FixedType("int64", "q", 0, -(2**63), 2**63 - 1)
BOOLEAN = FixedType("bool", "?", False, 0, 1)
STRING = StringType()
BYTES = BytesType("bytes", pass_through=False)
RECORDS = BytesType("records", pass_through=True)
UUID = UuidType()


def primitive_array_reader(element: PrimitiveType, flexible: bool, nullable: bool) -> Reader:
    """Reader of an array of primitives; fixed-width elements are unpacked in one call."""
    if element.fmt is None or element.fmt == "?":
        return array_reader(element.reader(flexible, nullable=False), flexible, nullable, "array")
    read_len = _checked_length_reader(flexible, True, nullable, "array")
    fmt = element.fmt
    width = struct.calcsize(fmt)

    def read_fixed(buf: memoryview, pos: int) -> tuple[list | None, int]:
        n, pos = read_len(buf, pos)
        if n < 0:
            return None, pos
        end = pos + n * width
        if end > len(buf):
            raise ProtocolError("array runs past the end of the frame")
        return list(struct.unpack_from(f">{n}{fmt}", buf, pos)), end

    return read_fixed


def array_reader(read_element: Reader, flexible: bool, nullable: bool, what: str) -> Reader:
    """Reader of an array whose elements ``read_element`` reads one by one (scalars or
    structs); ``what`` names the array in errors."""
    read_len = _checked_length_reader(flexible, True, nullable, what)

    def read(buf: memoryview, pos: int) -> tuple[list | None, int]:
        n, pos = read_len(buf, pos)
        if n < 0:
            return None, pos
        # Every element of our schemas takes at least one byte, so a forged count fails here
        # before the loop allocates anything.
        if n > len(buf) - pos:
            raise ProtocolError(f"{what} of {n} elements cannot fit in the frame")
        items = []
        append = items.append
        for _ in range(n):
            item, pos = read_element(buf, pos)
            append(item)
        return items, pos

    return read


def primitive_array_writer(element: PrimitiveType, flexible: bool, nullable: bool) -> WriterFn:
    if element.fmt is not None:
        write_len = _write_length(flexible, wide=True)
        fmt = element.fmt

        def write_fixed(w: Writer, items: Any) -> None:
            if items is None:
                if not nullable:
                    raise ValueError("null given for a non-nullable array")
                write_len(w.buf, -1)
                return
            write_len(w.buf, len(items))
            w.buf += struct.pack(f">{len(items)}{fmt}", *items)

        return write_fixed
    return array_writer(element.writer(flexible, nullable=False), flexible, nullable)


def array_writer(write_element: WriterFn, flexible: bool, nullable: bool) -> WriterFn:
    """Writer of an array whose elements ``write_element`` writes one by one."""
    write_len = _write_length(flexible, wide=True)

    def write(w: Writer, items: Any) -> None:
        if items is None:
            if not nullable:
                raise ValueError("null given for a non-nullable array")
            write_len(w.buf, -1)
            return
        write_len(w.buf, len(items))
        for item in items:
            write_element(w, item)

    return write
