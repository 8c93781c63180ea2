"""Consumer group coordinator: group membership state machine and committed offsets.

``coordinator.GroupCoordinator(broker)`` is built when the broker first needs it
(``Broker.group_coordinator``); ``startup()`` (sync, after the log manager started; on a single
broker at the first group request, see ``Broker.groups``) loads the newest snapshot and replays
the ``__consumer_offsets`` events after it; ``run()`` is a child of the broker nursery (session
expiry, rebalance timeouts, snapshots, offset expiry); ``shutdown()`` (sync, before the log
manager shuts down) writes a final snapshot.

Nothing is imported here: ``broker.config`` reads ``groups.config`` for its key table, and a
broker whose clients use no group never loads the coordinator.
"""
