"""The group coordinator (work in progress: lifecycle only)."""

from __future__ import annotations

import trio


class GroupCoordinator:
    """Coordinates consumer groups and stores committed offsets for one broker."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def startup(self) -> None:
        """Load the newest valid snapshot and replay the events after it."""

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Background duties: session expiry, rebalance timeouts, snapshots, offset expiry."""
        task_status.started()
        await trio.sleep_forever()

    def shutdown(self) -> None:
        """Write a final snapshot; called before the log manager shuts down."""
