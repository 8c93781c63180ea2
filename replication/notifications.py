"""Kafka's change notifications in ZooKeeper (``ZkNodeChangeNotificationListener``).

A writer that changes shared state (``minikafka acls`` changing ``/kafka-acl/Topic/orders``)
also creates a sequential znode under a notification root, ``/kafka-acl-changes/acl_changes_
0000000042``, whose data names what changed. Every broker watches the root's children, handles
each notification it has not handled yet (sequence above the last one handled) by re-reading
only what it names, and deletes notifications older than ``expiration_ms`` (Kafka: 15
minutes), which every broker has long seen by then. A broker reads the whole state once at
start-up; the notifications present then are handled again, which is harmless.

``pending`` and ``expired`` are the decisions, plain functions; :class:`NotificationListener`
is the thin layer that reads and deletes the znodes.
"""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable

from minikafka.replication.zookeeper import NoNode, ZkClient

logger = logging.getLogger(__name__)

# Kafka's ZkNodeChangeNotificationListener default (changeExpirationMs).
EXPIRATION_MS = 15 * 60 * 1000


def sequence_of(child: str, prefix: str) -> int | None:
    """``acl_changes_0000000042`` -> 42; None for a name that is not a notification."""
    if not child.startswith(prefix) or not child[len(prefix):].isdigit():
        return None
    return int(child[len(prefix):])


def pending(children: list[str], prefix: str, last_handled: int) -> list[tuple[int, str]]:
    """The notifications not handled yet, as ``(sequence, child)`` in sequence order."""
    found = ((sequence_of(child, prefix), child) for child in children)
    return sorted((seq, child) for seq, child in found if seq is not None and seq > last_handled)


def expired(created_ms: dict[str, int], now_ms: int, expiration_ms: int) -> list[str]:
    """The notifications (child -> creation time) older than ``expiration_ms``."""
    return sorted(child for child, ctime in created_ms.items() if now_ms - ctime > expiration_ms)


class NotificationListener:
    """Handles the notifications under ``root`` as its children change: ``on_children`` is
    what a children watch of ``root`` calls. ``handle(data)`` gets each notification's data."""

    def __init__(self, zk: ZkClient, root: str, prefix: str, handle: Callable[[bytes], Awaitable[None]], *,
                 expiration_ms: int = EXPIRATION_MS, clock: Callable[[], float] = time.time) -> None:
        self.zk = zk
        self.root = root.rstrip("/")
        self.prefix = prefix
        self.handle = handle
        self.expiration_ms = expiration_ms
        self.clock = clock
        self.last_handled = -1
        self._created_ms: dict[str, int] = {}

    async def on_children(self, children: list[str]) -> None:
        for seq, child in pending(children, self.prefix, self.last_handled):
            found = await self.zk.get_stat(f"{self.root}/{child}")
            if found is not None:  # else another broker purged it: it was old and seen
                data, stat = found
                await self.handle(data)
                self._created_ms[child] = stat.ctime_ms
            self.last_handled = seq
        present = set(children)
        self._created_ms = {c: t for c, t in self._created_ms.items() if c in present}
        for child in expired(self._created_ms, int(self.clock() * 1000), self.expiration_ms):
            try:
                await self.zk.delete(f"{self.root}/{child}")
            except NoNode:
                pass  # every broker purges; another one was first
            self._created_ms.pop(child, None)
            logger.debug("purged change notification %s/%s", self.root, child)
