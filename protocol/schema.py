"""Messages declared as data, compiled once per version into fast readers and writers.

A message is a tuple of :func:`Field` declarations. Each field names its wire type, the
versions it exists in, the versions in which it may be null, its default, and (for flexible
versions only) a tag that moves it into the tagged-field section. A field whose type is an
:func:`Array` of fields is an array of nested structs; an :func:`Array` of one primitive type
is an array of scalars; a :func:`Nested` of fields is one nested struct (Kafka's struct-typed
fields, e.g. DescribeTopicPartitions' cursor).

:class:`Api` ties the request and response declarations of one API key together with its
served version range and its flexible versions, and compiles one :class:`StructCodec` per
(direction, version) on its first use. A codec is generated straight-line Python (runs of adjacent
fixed-width fields are one ``struct`` call, classic strings are decoded inline); decoding a
request never looks at the declaration again.

Decoded values are :class:`Struct` objects whose attributes are the field names; every field
the declaration knows is present, those outside the decoded version holding their default.
Values to encode may be dicts, :class:`Struct` objects or any object with the attributes; a
field left out takes its default, and fields that do not exist at the encoded version are
ignored.
"""

from __future__ import annotations

import re
import struct
from typing import Any, Callable, Iterable, NamedTuple

from minikafka.protocol.errors import ProtocolError
from minikafka.protocol.types import (
    INT16_S,
    STRING,
    FixedType,
    PrimitiveType,
    Reader,
    Writer,
    array_reader,
    array_writer,
    primitive_array_reader,
    primitive_array_writer,
    read_uvarint,
    write_uvarint,
)

MISSING: Any = object()


class Versions(NamedTuple):
    """An inclusive version range; ``high=None`` means open-ended, ``low > high`` means none."""

    low: int
    high: int | None

    @staticmethod
    def parse(spec: str | None) -> "Versions":
        """Parse Kafka's notation: ``"0+"``, ``"1-3"``, ``"2"``, or ``"none"``/``None``."""
        # The declarations parse some 800 ranges at import, a dozen distinct ones: the
        # regular expression for each would cost the broker's start-up ~1 ms.
        parsed = _PARSED_VERSIONS.get(spec)
        if parsed is None:
            parsed = _PARSED_VERSIONS[spec] = _parse_versions(spec)
        return parsed

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)


def _parse_versions(spec: str | None) -> Versions:
    if spec is None or spec == "none":
        return Versions(1, 0)
    match = re.fullmatch(r"(\d+)(\+|-(\d+))?", spec)
    if not match:
        raise ValueError(f"bad version range {spec!r}")
    low = int(match.group(1))
    if match.group(2) == "+":
        return Versions(low, None)
    return Versions(low, int(match.group(3)) if match.group(3) else low)


_PARSED_VERSIONS: dict[str | None, Versions] = {}


class ArrayType(NamedTuple):
    """An array whose elements are either one primitive type or a struct of fields."""

    element: PrimitiveType | tuple["FieldDecl", ...]

    @property
    def of_structs(self) -> bool:
        return isinstance(self.element, tuple)


class NestedType(NamedTuple):
    """One nested struct (not an array of them). Where nullable, an int8 comes first: -1 for
    null, 1 for a struct (Kafka's MessageDataGenerator, KIP-893)."""

    fields: tuple["FieldDecl", ...]


class FieldDecl(NamedTuple):
    """One field of a message declaration (built with :func:`Field`)."""

    name: str
    type: PrimitiveType | ArrayType | NestedType
    versions: Versions
    nullable: Versions
    default: Any
    tag: int | None
    tagged: Versions

    def default_value(self) -> Any:
        """The value a field takes when absent: a fresh list for arrays."""
        if self.default is not MISSING:
            return self.default
        if isinstance(self.type, ArrayType):
            return []
        if isinstance(self.type, NestedType):
            return None  # written as a struct of defaults where it is not nullable
        return self.type.default


def Field(
    name: str,
    type: PrimitiveType | ArrayType | NestedType,
    versions: str = "0+",
    *,
    nullable: str | None = None,
    default: Any = MISSING,
    tag: int | None = None,
    tagged: str | None = None,
) -> FieldDecl:
    """Declare a field. ``versions``/``nullable``/``tagged`` use Kafka's range notation.

    ``tag`` with ``tagged`` (default: same as ``versions``) puts the field in the tagged-field
    section of those (flexible) versions; it is written only when it differs from its default.
    """
    if tag is not None and tagged is None:
        tagged = versions
    return FieldDecl(
        name,
        type,
        Versions.parse(versions),
        Versions.parse(nullable),
        default,
        tag,
        Versions.parse(tagged),
    )


def Array(*element: PrimitiveType | FieldDecl) -> ArrayType:
    """``Array(INT32)`` is an array of int32; ``Array(Field(...), ...)`` an array of structs."""
    if len(element) == 1 and isinstance(element[0], PrimitiveType):
        return ArrayType(element[0])
    if not element or not all(isinstance(f, FieldDecl) for f in element):
        raise TypeError("Array() takes one primitive type or one or more Field declarations")
    return ArrayType(tuple(element))  # type: ignore[arg-type]


def Nested(*fields: FieldDecl) -> NestedType:
    """``Nested(Field(...), ...)``: a field holding one struct of these fields."""
    if not fields or not all(isinstance(f, FieldDecl) for f in fields):
        raise TypeError("Nested() takes one or more Field declarations")
    return NestedType(tuple(fields))


class Struct:
    """A decoded message or nested element; attributes are the declaration's field names."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Struct) and self.__dict__ == other.__dict__

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"Struct({inner})"

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dicts and lists (e.g. for comparisons and logging)."""
        return {k: _plain(v) for k, v in self.__dict__.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class EncodeError(ValueError):
    """A value that cannot be encoded with the schema; ``path`` names the field, e.g.
    ``responses[0].partition_responses[2].base_offset``."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def under(self, prefix: str) -> "EncodeError":
        joiner = "" if self.path.startswith("[") else "."
        return EncodeError(f"{prefix}{joiner}{self.path}", self.reason)


def _getter(value: Any) -> Callable[[str, Any], Any]:
    if isinstance(value, dict):
        return value.get
    if isinstance(value, Struct):
        return value.__dict__.get
    return lambda name, default: getattr(value, name, default)


class _Item:
    """One step of a compiled struct: a run of adjacent fixed-width fields (``packer``), or one
    field whose reader, fast writer and checked writer ``make("read" / "write" / "checked")``
    gives when first asked for: a nested struct's are compiled code, and a request is only
    ever read by the broker, a response only written."""

    __slots__ = ("decls", "packer", "_make", "_reader", "_writer", "_checked_writer")

    def __init__(self, decls: list[FieldDecl], packer: struct.Struct | None = None,
                 make: Callable[[str], Any] | None = None) -> None:
        self.decls = decls
        self.packer = packer
        self._make = make
        self._reader = self._writer = self._checked_writer = None

    @property
    def reader(self) -> Reader:
        if self._reader is None:
            self._reader = self._make("read")
        return self._reader

    @property
    def writer(self) -> Any:
        if self._writer is None:
            self._writer = self._make("write")
        return self._writer

    @property
    def checked_writer(self) -> Any:
        if self._checked_writer is None:
            self._checked_writer = self._make("checked")
        return self._checked_writer


class StructCodec:
    """The compiled reader and writer of one struct (message body or array element) at one
    version.

    Compilation turns the declaration into straight-line Python (one function to read, one to
    write) in which adjacent fixed-width fields are a single ``struct`` call and classic
    strings are decoded inline; nested arrays call their element's compiled functions. The
    generated writer does no per-field error handling: when it fails, the value is encoded
    again by a slower checked path that reports which field is wrong.

    Each of the two is compiled when first used (``read`` and ``write`` are filled in by
    ``__getattr__``), nested structs' likewise: the broker only reads requests and only writes
    responses, and a compilation costs ~60 µs of the first request of its kind.
    """

    __slots__ = ("path", "flexible", "read", "write", "_version", "_items", "_absent", "_tagged_by_tag",
                 "_tagged_writes")

    def __init__(self, fields: Iterable[FieldDecl], version: int, flexible: bool, path: str) -> None:
        self.path = path
        self.flexible = flexible
        self._version = version
        self._items: list[_Item] = []
        self._absent: list[FieldDecl] = []
        self._tagged_by_tag: dict[int, tuple[str, Reader]] = {}
        self._tagged_writes: list[tuple[int, str, Any, Callable[[Writer, Any], None]]] = []
        run: list[FieldDecl] = []
        for decl in fields:
            if flexible and decl.tag is not None and version in decl.tagged:
                make = self._field_codec(decl, version)
                self._tagged_by_tag[decl.tag] = (decl.name, make("read"))
                self._tagged_writes.append((decl.tag, decl.name, decl.default_value(), make("write")))
                self._absent.append(decl)
            elif version not in decl.versions:
                self._absent.append(decl)
            elif isinstance(decl.type, FixedType) and decl.type.fmt != "?":
                run.append(decl)
            else:
                self._flush_run(run)
                run = []
                self._items.append(_Item([decl], None, self._field_codec(decl, version)))
        self._flush_run(run)
        self._tagged_writes.sort(key=lambda t: t[0])

    def __getattr__(self, name: str) -> Any:
        # Only for a slot not filled in yet: ``read`` and ``write`` on their first use.
        if name == "read":
            self.read = self._compile_reader(self._version)
            return self.read
        if name == "write":
            self.write = self._compile_writer()
            return self.write
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _flush_run(self, run: list[FieldDecl]) -> None:
        if run:
            packer = struct.Struct(">" + "".join(d.type.fmt for d in run))  # type: ignore[union-attr]
            self._items.append(_Item(list(run), packer))

    def _field_codec(self, decl: FieldDecl, version: int) -> Callable[[str], Any]:
        """``make(kind)`` of one non-run field, giving its "read"er, fast "write"r or
        "checked" writer (see _Item); a nested struct compiles only what is asked for."""
        nullable = version in decl.nullable
        ftype = decl.type
        if isinstance(ftype, ArrayType) and ftype.of_structs:
            element = StructCodec(ftype.element, version, self.flexible, f"{self.path}.{decl.name}[]")  # type: ignore[arg-type]

            def make(kind: str) -> Any:
                if kind == "read":
                    return element.array_reader(nullable)
                return element.array_writer(nullable, checked=kind == "checked")

            return make
        if isinstance(ftype, NestedType):
            inner = StructCodec(ftype.fields, version, self.flexible, f"{self.path}.{decl.name}")

            def make_nested(kind: str) -> Any:
                if kind == "read":
                    return inner.nested_reader(nullable)
                return inner.nested_writer(nullable, checked=kind == "checked")

            return make_nested
        if isinstance(ftype, ArrayType):
            reader = primitive_array_reader(ftype.element, self.flexible, nullable)  # type: ignore[arg-type]
            writer = primitive_array_writer(ftype.element, self.flexible, nullable)  # type: ignore[arg-type]
        else:
            reader, writer = ftype.reader(self.flexible, nullable), ftype.writer(self.flexible, nullable)
        return lambda kind: reader if kind == "read" else writer

    # -- code generation -----------------------------------------------------------------------

    def _compile_reader(self, version: int) -> Callable[[memoryview, int], tuple[Struct, int]]:
        ns: dict[str, Any] = {"_new": Struct.__new__, "_Struct": Struct, "_str": str,
                              "_len": len, "_i16": INT16_S.unpack_from, "_Error": ProtocolError,
                              "_tagged": self._read_tagged}
        lines = ["def read(buf, pos):"]
        entries = []
        for i, item in enumerate(self._items):
            if item.packer is not None:
                names = [f"v{i}_{j}" for j in range(len(item.decls))]
                ns[f"_u{i}"] = item.packer.unpack_from
                lines.append(f"    {', '.join(names)}, = _u{i}(buf, pos)")
                lines.append(f"    pos += {item.packer.size}")
                entries += [f"{d.name!r}: {n}" for d, n in zip(item.decls, names)]
                continue
            (decl,) = item.decls
            entries.append(f"{decl.name!r}: v{i}")
            if decl.type is STRING and not self.flexible:
                null = "None" if version in decl.nullable else f"_bad({decl.name!r}, n)"
                ns["_bad"] = _bad_length
                lines += [
                    "    n, = _i16(buf, pos)",
                    "    pos += 2",
                    "    if n < 0:",
                    f"        v{i} = {null} if n == -1 else _bad({decl.name!r}, n)",
                    "    else:",
                    "        end = pos + n",
                    "        if end > _len(buf):",
                    f"            raise _Error('string {decl.name} runs past the end of the frame')",
                    f"        v{i} = _str(buf[pos:end], 'utf-8')",
                    "        pos = end",
                ]
            else:
                ns[f"_r{i}"] = item.reader
                lines.append(f"    v{i}, pos = _r{i}(buf, pos)")
        for k, decl in enumerate(self._absent):
            if isinstance(decl.type, ArrayType) and decl.default is MISSING:
                entries.append(f"{decl.name!r}: []")
            else:
                ns[f"_d{k}"] = decl.default_value()
                entries.append(f"{decl.name!r}: _d{k}")
        lines.append(f"    d = {{{', '.join(entries)}}}")
        if self.flexible:
            lines.append("    pos = _tagged(buf, pos, d)")
        lines += ["    o = _new(_Struct)", "    o.__dict__ = d", "    return o, pos"]
        exec("\n".join(lines), ns)  # noqa: S102 - source built above from the declaration only
        return ns["read"]

    def _compile_writer(self) -> Callable[[Writer, Any], None]:
        ns: dict[str, Any] = {"_getter": _getter, "_dict": dict, "_type": type,
                              "_tagged": self._write_tagged}
        lines = ["def write(w, value):",
                 "    get = value.get if _type(value) is _dict else _getter(value)"]
        for i, item in enumerate(self._items):
            defaults = []
            for j, decl in enumerate(item.decls):
                ns[f"_d{i}_{j}"] = () if isinstance(decl.type, ArrayType) and decl.default is MISSING \
                    else decl.default_value()
                defaults.append(f"get({decl.name!r}, _d{i}_{j})")
            if item.packer is not None:
                ns[f"_p{i}"] = item.packer.pack
                lines.append(f"    w.buf += _p{i}({', '.join(defaults)})")
            else:
                ns[f"_w{i}"] = item.writer
                lines.append(f"    _w{i}(w, {defaults[0]})")
        if self.flexible:
            lines.append("    _tagged(w, get)")
        if len(lines) == 2:
            lines.append("    pass")
        exec("\n".join(lines), ns)  # noqa: S102 - source built above from the declaration only
        return ns["write"]

    # -- reading -------------------------------------------------------------------------------

    def _read_tagged(self, buf: memoryview, pos: int, values: dict) -> int:
        count, pos = read_uvarint(buf, pos)
        last_tag = -1
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            if tag <= last_tag:
                raise ProtocolError(f"{self.path}: tagged fields out of order (tag {tag})")
            last_tag = tag
            end = pos + size
            if end > len(buf):
                raise ProtocolError(f"{self.path}: tagged field {tag} runs past the end")
            known = self._tagged_by_tag.get(tag)
            if known is not None:
                name, reader = known
                values[name], stop = reader(buf[:end], pos)
                if stop != end:
                    raise ProtocolError(f"{self.path}: tagged field {name} has {end - stop} stray bytes")
            pos = end
        return pos

    def array_reader(self, nullable: bool) -> Reader:
        return array_reader(self.read, self.flexible, nullable, f"{self.path} array")

    def nested_reader(self, nullable: bool) -> Reader:
        if not nullable:
            return self.read

        def read(buf: memoryview, pos: int) -> tuple[Struct | None, int]:
            if buf[pos] & 0x80:  # any negative marker is null, as Kafka reads it
                return None, pos + 1
            return self.read(buf, pos + 1)

        return read

    # -- writing -------------------------------------------------------------------------------

    def write_checked(self, w: Writer, value: Any) -> None:
        """Like ``write``, field by field, raising :class:`EncodeError` naming the bad field."""
        get = _getter(value)
        for item in self._items:
            label = "/".join(d.name for d in item.decls)
            try:
                if item.packer is not None:
                    w.buf += item.packer.pack(*[
                        get(d.name, d.default_value()) for d in item.decls])
                else:
                    (decl,) = item.decls
                    item.checked_writer(w, get(decl.name, decl.default_value()))
            except EncodeError as exc:
                raise exc.under(label) from exc.__cause__
            except (struct.error, TypeError, ValueError, AttributeError, OverflowError) as exc:
                raise EncodeError(label, str(exc)) from exc
        if self.flexible:
            self._write_tagged(w, get)

    def _write_tagged(self, w: Writer, get: Callable[[str, Any], Any]) -> None:
        encoded: list[tuple[int, bytes]] = []
        for tag, name, default, writer in self._tagged_writes:
            value = get(name, default)
            # Never write a tagged field holding its default: librdkafka 2.0 mis-parses them.
            if value == default or (isinstance(value, list) and not value):
                continue
            scratch = Writer()
            writer(scratch, value)
            encoded.append((tag, b"".join(scratch.finish())))
        write_uvarint(w.buf, len(encoded))
        for tag, data in encoded:
            write_uvarint(w.buf, tag)
            write_uvarint(w.buf, len(data))
            w.buf += data

    def array_writer(self, nullable: bool, checked: bool) -> Callable[[Writer, Any], None]:
        if not checked:
            return array_writer(self.write, self.flexible, nullable)
        write_numbered = array_writer(self._write_checked_numbered, self.flexible, nullable)

        def write(w: Writer, items: Any) -> None:
            write_numbered(w, None if items is None else list(enumerate(items)))

        return write

    def nested_writer(self, nullable: bool, checked: bool) -> Callable[[Writer, Any], None]:
        write_struct = self.write_checked if checked else self.write

        def write(w: Writer, value: Any) -> None:
            if nullable:
                w.buf.append(0xFF if value is None else 1)
                if value is None:
                    return
            write_struct(w, {} if value is None else value)

        return write

    def _write_checked_numbered(self, w: Writer, numbered: tuple[int, Any]) -> None:
        """``write_checked`` of one array element, its index added to the error path."""
        index, item = numbered
        try:
            self.write_checked(w, item)
        except EncodeError as exc:
            raise exc.under(f"[{index}]") from exc.__cause__

    # -- whole messages ------------------------------------------------------------------------

    def decode(self, buf: memoryview, pos: int = 0, *, to_the_end: bool = True) -> Struct:
        """Decode a complete body starting at ``pos``; it must end exactly at the end of ``buf``
        unless ``to_the_end`` is false (bytes after it are then left unread)."""
        try:
            value, end = self.read(buf, pos)
        except ProtocolError as exc:
            raise ProtocolError(f"{self.path}: {exc}") from None
        except (struct.error, IndexError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"{self.path}: truncated or malformed ({exc})") from None
        if to_the_end and end != len(buf):
            raise ProtocolError(f"{self.path}: {len(buf) - end} unexpected bytes after the body")
        return value

    def encode(self, w: Writer, value: Any) -> None:
        """Append ``value`` to ``w``; a bad value raises :class:`EncodeError` naming the field
        (``w`` then holds a partial encoding and must be discarded)."""
        try:
            self.write(w, value)
            return
        except Exception as exc:  # noqa: BLE001 - re-diagnosed just below
            failure = exc
        try:
            self.write_checked(Writer(), value)
        except EncodeError as exc:
            raise EncodeError(f"{self.path}: {exc.path}", exc.reason) from exc.__cause__
        raise EncodeError(self.path, repr(failure)) from failure


def _bad_length(name: str, n: int) -> None:
    raise ProtocolError(f"invalid length {n} for string {name}")


class Api:
    """One Kafka API: its key, the versions we serve, and its request and response schemas.

    The codec of a (direction, version) is compiled the first time it is used and kept, so
    importing the registry stays cheap; the test suite compiles every one of them.
    """

    def __init__(
        self,
        key: int,
        name: str,
        *,
        versions: tuple[int, int],
        request: tuple[FieldDecl, ...],
        response: tuple[FieldDecl, ...],
        flexible: str | None = None,
    ) -> None:
        self.key = key
        self.name = name
        self.min_version, self.max_version = versions
        self.flexible_versions = Versions.parse(flexible)
        self.request_fields = request
        self.response_fields = response
        self._requests: dict[int, StructCodec] = {}
        self._responses: dict[int, StructCodec] = {}

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible_versions

    def request(self, version: int) -> StructCodec:
        codec = self._requests.get(version)
        if codec is None:
            codec = self._requests[version] = self._compile(self.request_fields, version, "Request")
        return codec

    def response(self, version: int) -> StructCodec:
        codec = self._responses.get(version)
        if codec is None:
            codec = self._responses[version] = self._compile(self.response_fields, version, "Response")
        return codec

    def _compile(self, fields: tuple[FieldDecl, ...], version: int, kind: str) -> StructCodec:
        if not self.supports(version):
            raise KeyError(f"{self.name} v{version} is not served")
        return StructCodec(fields, version, self.is_flexible(version), f"{self.name}{kind} v{version}")

    def __repr__(self) -> str:
        return f"Api({self.name}, key={self.key}, v{self.min_version}-v{self.max_version})"
