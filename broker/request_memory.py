"""``queued.max.request.bytes`` (KIP-72): one bound, across connections, on request memory.

A connection reserves a frame's whole length as soon as its 4-byte size prefix is in, before
reading the body, and gives it back once the request has been handled (its response queued,
or none due). While a reservation does not fit, that connection reads nothing more: its
bytes wait in the kernel's socket buffer and TCP flow control slows the client. A connection
whose frame is reserved can always finish reading it, so the bound never deadlocks.

Unlike Kafka's non-strict pool, which lets one allocation take the pool below zero, a frame is
admitted only when it fits (or when nothing else is reserved: a frame larger than the whole
bound, up to ``socket.request.max.bytes``, still gets through, alone). So request frames never
hold more than ``max(limit, one frame)``.
"""

from __future__ import annotations

import trio


class RequestMemory:
    """The broker-wide pool; ``limit`` None means no bound (the figures are still kept)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self.waiting = 0  # connections that stopped reading for want of memory
        self._freed = trio.lowlevel.ParkingLot()

    def _fits(self, nbytes: int) -> bool:
        return self.limit is None or not self.used or self.used + nbytes <= self.limit

    async def reserve(self, nbytes: int) -> None:
        if not self._fits(nbytes):
            self.waiting += 1
            try:
                while not self._fits(nbytes):
                    await self._freed.park()
            finally:
                self.waiting -= 1
        self.used += nbytes
        self.peak = max(self.peak, self.used)

    def release(self, nbytes: int) -> None:
        if nbytes:
            self.used -= nbytes
            self._freed.unpark_all()
