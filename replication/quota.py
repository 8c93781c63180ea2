"""Replication throttles (KIP-73), as Kafka 2.8's ReplicationQuotaManager applies them.

A broker has two quotas, each a rate in bytes per second set by a dynamic broker config:
``leader.replication.throttled.rate`` for what it serves to followers and
``follower.replication.throttled.rate`` for what it fetches as a follower. Only the replicas a
topic lists are throttled: ``leader.replication.throttled.replicas`` names the leaders
(``partition:broker`` where broker is the one serving), ``follower.replication.throttled.replicas``
the followers (the one fetching); ``*`` is every replica. kafka-reassign-partitions.sh
``--throttle`` sets all of them, the moving partitions' current replicas as leaders and their new
ones as followers, and ``--verify`` deletes them once the moves are done.

A replica in the ISR is never throttled (it would fall out of it); one that is not is left out
of a fetch while its broker's rate is over the bound: the leader answers it with no records, the
follower does not ask for it. Every throttled partition's bytes count towards the rate, in the
ISR or not. The rate is Kafka's windowed one: bytes over the last ``samples`` windows of
``window_s`` each, divided by the time they span but never by less than ``samples - 1``
windows, so a throttled move starts with a burst of up to ``(samples - 1) x window_s x
rate`` and then holds the rate (Kafka's defaults: 11 windows of 1 s).
"""

from __future__ import annotations

from collections import deque
from typing import Callable

__all__ = ["ReplicationQuota", "is_throttled", "UNLIMITED"]

UNLIMITED = 2**63 - 1  # Kafka's default rate, Long.MaxValue: no throttle
SAMPLES = 11  # replication.quota.window.num
WINDOW_S = 1.0  # replication.quota.window.size.seconds


class ReplicationQuota:
    """Bytes per second recorded against a bound read at each check (a dynamic config); None
    or ``UNLIMITED``: never exceeded. ``now`` gives seconds."""

    def __init__(self, bound: Callable[[], int | None], now: Callable[[], float], *, samples: int = SAMPLES,
                 window_s: float = WINDOW_S) -> None:
        self._bound = bound
        self._now = now
        self._samples = samples
        self._window_s = window_s
        self._windows: deque[list[float]] = deque()  # [start, bytes], oldest first

    def record(self, nbytes: int) -> None:
        if nbytes <= 0:
            return
        now = self._now()
        self._expire(now)
        if not self._windows or now >= self._windows[-1][0] + self._window_s:
            self._windows.append([now, 0])
        self._windows[-1][1] += nbytes

    def rate(self) -> float:
        """Bytes per second over the windows kept (Kafka's Rate over a SampledStat)."""
        now = self._now()
        self._expire(now)
        if not self._windows:
            return 0.0
        elapsed = max(now - self._windows[0][0], (self._samples - 1) * self._window_s)
        return sum(size for _, size in self._windows) / elapsed

    def limited(self) -> bool:
        """Whether there is a bound at all (Kafka's default has none)."""
        bound = self._bound()
        return bound is not None and bound < UNLIMITED

    def exceeded(self) -> bool:
        return self.limited() and self.rate() > self._bound()

    def _expire(self, now: float) -> None:
        while self._windows and self._windows[0][0] <= now - self._samples * self._window_s:
            self._windows.popleft()


def is_throttled(replicas: str | None, partition: int, broker_id: int) -> bool:
    """Whether a topic's ``*.replication.throttled.replicas`` value lists ``broker_id``'s
    replica of ``partition`` (Kafka's QuotaConfigHandler.parseThrottledPartitions)."""
    if not replicas:
        return False
    entries = [entry.strip() for entry in replicas.split(",")]
    if entries == ["*"]:
        return True
    wanted = f"{partition}:{broker_id}"
    return wanted in entries

