"""Clocks. Storage never reads the wall clock itself: every component takes a ``Clock``.

Tests drive time with :class:`FakeClock`; the broker passes :class:`SystemClock`.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Anything that tells the current time in epoch milliseconds."""

    def time_ms(self) -> int: ...


class SystemClock:
    """The real wall clock, in epoch milliseconds."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that only moves when told to (tests)."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    def time_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> None:
        self._now_ms += ms

    def set(self, ms: int) -> None:
        self._now_ms = ms
