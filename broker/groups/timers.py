"""Deadline timers driven by an explicit clock, for session and rebalance timeouts.

The coordinator arms a timer for every member's session and every rebalance; most are
cancelled or re-armed long before they fire (each heartbeat re-arms its member's timer). A
heap with lazy cancellation keeps arming and cancelling O(log n) without searching.
``run_due(now_ms)`` fires what is due; whoever owns the scheduler decides when to call it
(the coordinator's background task in a broker, the test directly with a fake clock).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Timer:
    """A callback due at ``deadline_ms`` unless cancelled first."""

    __slots__ = ("deadline_ms", "callback", "cancelled")

    def __init__(self, deadline_ms: int, callback: Callable[[], None]) -> None:
        self.deadline_ms = deadline_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class TimerQueue:
    """Timers ordered by deadline. ``on_earlier_deadline`` is called when a new timer becomes
    the earliest one, so a sleeping driver can wake up and sleep less."""

    def __init__(self, on_earlier_deadline: Callable[[], None] | None = None) -> None:
        self._heap: list[tuple[int, int, Timer]] = []
        self._sequence = itertools.count()
        self._on_earlier_deadline = on_earlier_deadline

    def schedule(self, deadline_ms: int, callback: Callable[[], None]) -> Timer:
        timer = Timer(deadline_ms, callback)
        earliest = self.next_deadline()
        heapq.heappush(self._heap, (deadline_ms, next(self._sequence), timer))
        if self._on_earlier_deadline is not None and (earliest is None or deadline_ms < earliest):
            self._on_earlier_deadline()
        return timer

    def next_deadline(self) -> int | None:
        """Deadline of the earliest live timer (cancelled ones at the top are dropped)."""
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def run_due(self, now_ms: int) -> int:
        """Fire every live timer whose deadline is ``<= now_ms``, earliest first; timers armed
        by a callback for a time already past fire in the same call. Returns how many fired."""
        fired = 0
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            _, _, timer = heapq.heappop(heap)
            if timer.cancelled:
                continue
            timer.cancelled = True
            try:
                timer.callback()
            except Exception:
                # One broken timer must not stop the others (or the broker).
                logger.exception("timer callback failed")
            fired += 1
        return fired

    def __len__(self) -> int:
        return sum(1 for _, _, timer in self._heap if not timer.cancelled)
