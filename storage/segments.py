"""A log's segments ordered by base offset: Kafka's ``LogSegments``.

The last segment is the *active* one, the only one appended to; a log always has one.
Lookups by offset use the base offsets alone (a segment holds the offsets from its base to
the next segment's), as Kafka's ``floorSegment`` does.
"""

from __future__ import annotations

import bisect
from typing import Iterable, Iterator

from minikafka.storage.segment import LogSegment


class LogSegments:
    """The segments of one log, oldest first (see the module docstring). Not locked: the
    log's lock covers it."""

    def __init__(self, segments: Iterable[LogSegment]) -> None:
        self._segments = list(segments)
        self._bases = [segment.base_offset for segment in self._segments]
        if not self._segments:
            raise ValueError("a log has at least its active segment")

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __len__(self) -> int:
        return len(self._segments)

    def __contains__(self, segment: object) -> bool:
        return segment in self._segments

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    def closed(self) -> list[LogSegment]:
        """Every segment but the active one, oldest first."""
        return self._segments[:-1]

    def at_base(self, base_offset: int) -> LogSegment | None:
        """The segment named by ``base_offset``, if there is one."""
        i = bisect.bisect_left(self._bases, base_offset)
        return self._segments[i] if i < len(self._bases) and self._bases[i] == base_offset else None

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segment that holds ``offset`` (the first one for an offset below it) and every
        later one."""
        return self._segments[max(bisect.bisect_right(self._bases, offset) - 1, 0):]

    def add(self, segment: LogSegment) -> None:
        """A new active segment, after the others."""
        if segment.base_offset <= self._bases[-1]:
            raise ValueError(f"segment {segment.base_offset} does not follow segment {self._bases[-1]}")
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    def remove_oldest(self, count: int) -> list[LogSegment]:
        """Take out the ``count`` oldest segments (never the active one) and return them."""
        count = min(count, len(self._segments) - 1)
        removed = self._segments[:count]
        del self._segments[:count], self._bases[:count]
        return removed

    def remove_after(self, offset: int) -> list[LogSegment]:
        """Take out the segments whose base offset is above ``offset`` (never the first) and
        return them."""
        keep = max(bisect.bisect_right(self._bases, offset), 1)
        removed = self._segments[keep:]
        del self._segments[keep:], self._bases[keep:]
        return removed

    def replace(self, old: list[LogSegment], new: LogSegment) -> None:
        """Put ``new`` where the consecutive closed segments ``old`` are (a cleaned group;
        ``new`` has the first one's base offset)."""
        start = self._segments.index(old[0])
        if self._segments[start:start + len(old)] != old or start + len(old) >= len(self._segments):
            raise ValueError("only consecutive closed segments are replaced")
        if new.base_offset != old[0].base_offset:
            raise ValueError(f"segment {new.base_offset} cannot replace segment {old[0].base_offset}")
        self._segments[start:start + len(old)] = [new]
        self._bases[start:start + len(old)] = [new.base_offset]

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)
