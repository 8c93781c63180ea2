"""Messages declared as data, compiled once per version into fast readers and writers.

A message is a tuple of :func:`Field` declarations. Each field names its wire type, the
versions it exists in, the versions in which it may be null, its default, and (for flexible
versions only) a tag that moves it into the tagged-field section. A field whose type is an
:func:`Array` of fields is an array of nested structs; an :func:`Array` of one primitive type
is an array of scalars.

:class:`Api` ties the request and response declarations of one API key together with its
served version range and its flexible versions, and compiles one :class:`StructCodec` per
(direction, version) up front. A codec's reader walks a precomputed list of steps (runs of
adjacent fixed-width fields are unpacked by a single ``struct`` call); decoding a request never
looks at the declaration again.

Decoded values are :class:`Struct` objects whose attributes are the field names; every field
the declaration knows is present, those outside the decoded version holding their default.
Values to encode may be dicts, :class:`Struct` objects or any object with the attributes; a
field left out takes its default, and fields that do not exist at the encoded version are
ignored.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from protocol.errors import ProtocolError
from protocol.types import (
    FixedType,
    PrimitiveType,
    Reader,
    Writer,
    array_length_reader,
    array_length_writer,
    primitive_array_reader,
    primitive_array_writer,
    read_uvarint,
    write_uvarint,
)

MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``high=None`` means open-ended, ``low > high`` means none."""

    low: int
    high: int | None

    @classmethod
    def parse(cls, spec: str | None) -> "Versions":
        """Parse Kafka's notation: ``"0+"``, ``"1-3"``, ``"2"``, or ``"none"``/``None``."""
        if spec is None or spec == "none":
            return cls(1, 0)
        match = re.fullmatch(r"(\d+)(\+|-(\d+))?", spec)
        if not match:
            raise ValueError(f"bad version range {spec!r}")
        low = int(match.group(1))
        if match.group(2) == "+":
            return cls(low, None)
        return cls(low, int(match.group(3)) if match.group(3) else low)

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)


@dataclass(frozen=True, slots=True)
class ArrayType:
    """An array whose elements are either one primitive type or a struct of fields."""

    element: PrimitiveType | tuple["FieldDecl", ...]

    @property
    def of_structs(self) -> bool:
        return isinstance(self.element, tuple)


@dataclass(frozen=True, slots=True)
class FieldDecl:
    """One field of a message declaration (built with :func:`Field`)."""

    name: str
    type: PrimitiveType | ArrayType
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
        return self.type.default


def Field(
    name: str,
    type: PrimitiveType | ArrayType,
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


_Step = Callable[[memoryview, int, dict], int]
_WriteStep = Callable[[Writer, Callable[[str, Any], Any]], None]


class StructCodec:
    """The compiled reader and writer of one struct (message body or array element) at one
    version: fields in wire order, adjacent fixed-width fields merged into one ``struct``."""

    __slots__ = ("path", "flexible", "_read_steps", "_absent", "_tagged_by_tag", "_write_steps",
                 "_tagged_writes")

    def __init__(self, fields: Iterable[FieldDecl], version: int, flexible: bool, path: str) -> None:
        self.path = path
        self.flexible = flexible
        self._read_steps: list[_Step] = []
        self._write_steps: list[tuple[str, _WriteStep]] = []
        self._absent: list[FieldDecl] = []
        self._tagged_by_tag: dict[int, tuple[str, Reader]] = {}
        self._tagged_writes: list[tuple[int, str, Any, Callable[[Writer, Any], None]]] = []
        run: list[FieldDecl] = []
        for decl in fields:
            if flexible and decl.tag is not None and version in decl.tagged:
                reader, writer = self._field_codec(decl, version)
                self._tagged_by_tag[decl.tag] = (decl.name, reader)
                self._tagged_writes.append((decl.tag, decl.name, decl.default_value(), writer))
                self._absent.append(decl)
            elif version not in decl.versions:
                self._absent.append(decl)
            elif isinstance(decl.type, FixedType) and decl.type.fmt != "?":
                run.append(decl)
            else:
                self._flush_run(run)
                run = []
                self._add_single(decl, version)
        self._flush_run(run)
        self._tagged_writes.sort(key=lambda t: t[0])

    # -- compilation ---------------------------------------------------------------------------

    def _field_codec(self, decl: FieldDecl, version: int) -> tuple[Reader, Callable[[Writer, Any], None]]:
        nullable = version in decl.nullable
        ftype = decl.type
        if isinstance(ftype, ArrayType):
            if ftype.of_structs:
                element = StructCodec(ftype.element, version, self.flexible, f"{self.path}.{decl.name}[]")  # type: ignore[arg-type]
                return element.array_reader(nullable), element.array_writer(nullable)
            return (
                primitive_array_reader(ftype.element, self.flexible, nullable),  # type: ignore[arg-type]
                primitive_array_writer(ftype.element, self.flexible, nullable),  # type: ignore[arg-type]
            )
        return ftype.reader(self.flexible, nullable), ftype.writer(self.flexible, nullable)

    def _add_single(self, decl: FieldDecl, version: int) -> None:
        reader, writer = self._field_codec(decl, version)
        name = decl.name
        default = decl.default
        is_array = isinstance(decl.type, ArrayType)

        def read_step(buf: memoryview, pos: int, out: dict) -> int:
            out[name], pos = reader(buf, pos)
            return pos

        if default is MISSING and is_array:
            def write_step(w: Writer, get: Callable[[str, Any], Any]) -> None:
                value = get(name, MISSING)
                writer(w, [] if value is MISSING else value)
        else:
            value_default = decl.default_value()

            def write_step(w: Writer, get: Callable[[str, Any], Any]) -> None:
                writer(w, get(name, value_default))

        self._read_steps.append(read_step)
        self._write_steps.append((name, write_step))

    def _flush_run(self, run: list[FieldDecl]) -> None:
        if not run:
            return
        packer = struct.Struct(">" + "".join(d.type.fmt for d in run))  # type: ignore[union-attr]
        names = tuple(d.name for d in run)
        defaults = tuple(d.default_value() for d in run)
        named_defaults = tuple(zip(names, defaults))
        unpack = packer.unpack_from
        size = packer.size
        pack = packer.pack

        if len(run) == 1:
            name = names[0]

            def read_one(buf: memoryview, pos: int, out: dict) -> int:
                out[name] = unpack(buf, pos)[0]
                return pos + size

            self._read_steps.append(read_one)
        else:

            def read_run(buf: memoryview, pos: int, out: dict) -> int:
                out.update(zip(names, unpack(buf, pos)))
                return pos + size

            self._read_steps.append(read_run)

        def write_run(w: Writer, get: Callable[[str, Any], Any]) -> None:
            w.buf += pack(*[get(n, d) for n, d in named_defaults])

        self._write_steps.append(("/".join(names), write_run))

    # -- reading -------------------------------------------------------------------------------

    def read(self, buf: memoryview, pos: int) -> tuple[Struct, int]:
        values: dict[str, Any] = {}
        for decl in self._absent:
            values[decl.name] = decl.default_value()
        for step in self._read_steps:
            pos = step(buf, pos, values)
        if self.flexible:
            pos = self._read_tagged(buf, pos, values)
        result = Struct.__new__(Struct)
        result.__dict__ = values
        return result, pos

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
        read_len = array_length_reader(self.flexible)
        read_element = self.read

        def read(buf: memoryview, pos: int) -> tuple[list | None, int]:
            n, pos = read_len(buf, pos)
            if n < 0:
                if n == -1 and nullable:
                    return None, pos
                raise ProtocolError(f"{self.path}: invalid array length {n}")
            if n > len(buf) - pos:
                raise ProtocolError(f"{self.path}: array of {n} elements cannot fit in the frame")
            items = []
            append = items.append
            for _ in range(n):
                item, pos = read_element(buf, pos)
                append(item)
            return items, pos

        return read

    # -- writing -------------------------------------------------------------------------------

    def write(self, w: Writer, value: Any) -> None:
        get = _getter(value)
        for name, step in self._write_steps:
            try:
                step(w, get)
            except EncodeError as exc:
                raise exc.under(name) from exc.__cause__
            except (struct.error, TypeError, ValueError, AttributeError, OverflowError) as exc:
                raise EncodeError(name, str(exc)) from exc
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

    def array_writer(self, nullable: bool) -> Callable[[Writer, Any], None]:
        write_len = array_length_writer(self.flexible)
        write_element = self.write

        def write(w: Writer, items: Any) -> None:
            if items is None:
                if not nullable:
                    raise ValueError("null given for a non-nullable array")
                write_len(w.buf, -1)
                return
            write_len(w.buf, len(items))
            for index, item in enumerate(items):
                try:
                    write_element(w, item)
                except EncodeError as exc:
                    raise exc.under(f"[{index}]") from exc.__cause__

        return write

    # -- whole messages ------------------------------------------------------------------------

    def decode(self, buf: memoryview, pos: int = 0) -> Struct:
        """Decode a complete body starting at ``pos``; the body must end exactly at the end."""
        try:
            value, end = self.read(buf, pos)
        except ProtocolError as exc:
            raise ProtocolError(f"{self.path}: {exc}") from None
        except (struct.error, IndexError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"{self.path}: truncated or malformed ({exc})") from None
        if end != len(buf):
            raise ProtocolError(f"{self.path}: {len(buf) - end} unexpected bytes after the body")
        return value

    def encode(self, w: Writer, value: Any) -> None:
        try:
            self.write(w, value)
        except EncodeError as exc:
            raise EncodeError(f"{self.path}: {exc.path}", exc.reason) from exc.__cause__


class Api:
    """One Kafka API: its key, the versions we serve, and its request and response schemas.

    Codecs for every served version are compiled when the API is declared.
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
        for version in range(self.min_version, self.max_version + 1):
            flex = version in self.flexible_versions
            self._requests[version] = StructCodec(request, version, flex, f"{name}Request v{version}")
            self._responses[version] = StructCodec(response, version, flex, f"{name}Response v{version}")

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible_versions

    def request(self, version: int) -> StructCodec:
        return self._requests[version]

    def response(self, version: int) -> StructCodec:
        return self._responses[version]

    def __repr__(self) -> str:
        return f"Api({self.name}, key={self.key}, v{self.min_version}-v{self.max_version})"
