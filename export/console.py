"""Progress bar and summary line for long-running export and replay commands.

The bar is drawn on stderr only when stderr is a terminal (a log file gets no carriage-return
noise); the one summary line is always printed, so scripts and the broker's log see it::

    minikafka export: 12 segments, 1000000 records, 104.9 MB read, 41.2 MB written, 9.8 s
"""

from __future__ import annotations

import sys
import time

__all__ = ["ProgressBar", "summary_line"]


class ProgressBar:
    """A one-line ``[#####-----] done/total unit`` bar redrawn in place."""

    WIDTH = 30

    def __init__(self, label: str, total: int, unit: str, *, stream=None, enabled: bool | None = None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self._last_draw = 0.0

    def update(self, done: int) -> None:
        self.done = min(done, self.total) if self.total else done
        now = time.monotonic()
        if self.enabled and (now - self._last_draw >= 0.1 or self.done == self.total):
            self._last_draw = now
            filled = self.WIDTH * self.done // self.total if self.total else self.WIDTH
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {self.unit}")
            self.stream.flush()

    def advance(self, count: int = 1) -> None:
        self.update(self.done + count)

    def finish(self) -> None:
        if self.enabled:
            self.update(self.total)
            self.stream.write("\n")
            self.stream.flush()

    def abandon(self) -> None:
        """End the line where the bar stopped (interrupted), so the next message starts clean."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB"


def summary_line(command: str, *, seconds: float, **counts: int) -> str:
    """``minikafka <command>: 3 segments, 10 records, 1.2 MB read, 0.5 MB written, 4.0 s``.

    Keyword names become the words: ``bytes_read`` -> "MB read", others -> their name.
    """
    parts = []
    for name, value in counts.items():
        if name.startswith("bytes_"):
            parts.append(f"{_megabytes(value)} {name.removeprefix('bytes_')}")
        else:
            parts.append(f"{value} {name}")
    parts.append(f"{seconds:.1f} s")
    return f"minikafka {command}: " + ", ".join(parts)
