"""Consumer group coordinator: group membership state machine and committed offsets.

``GroupCoordinator(broker)`` is built in ``Broker.__init__``; ``startup()`` (sync, after the
log manager started) loads the newest snapshot and replays the ``__consumer_offsets`` events
after it; ``run()`` is a child of the broker nursery (session expiry, rebalance timeouts,
snapshots, offset expiry); ``shutdown()`` (sync, before the log manager shuts down) writes a
final snapshot.
"""

from minikafka.broker.groups.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
