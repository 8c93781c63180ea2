"""Consumer group coordinator: group membership state machine and committed offsets.

``coordinator.GroupCoordinator(broker)`` is the front the request handlers call; the work is
in four modules, one per concept (Kafka's GroupCoordinator and GroupMetadataManager):
``membership`` (join, sync, heartbeat, leave, rebalance and session timers), ``offsets``
(commit, fetch, expiry), ``store`` (persistence: events in ``__consumer_offsets``, loading,
snapshots) and ``ownership`` (which offsets partitions this broker coordinates, loaded and
dropped as its leadership changes). ``group`` is one group's state, ``records`` the events'
byte layouts, ``timers`` the deadline queue, ``config`` the settings.

The coordinator is built when the broker first needs it (``Broker.group_coordinator``);
``startup()`` (sync, after the log manager started; on a single broker at the first group
request, see ``Broker.groups``) loads the newest snapshot and replays the ``__consumer_offsets``
events after it; ``run()`` is a child of the broker nursery (session expiry, rebalance
timeouts, snapshots, offset expiry); ``shutdown()`` (sync, before the log manager shuts down)
writes a final snapshot.

Nothing is imported here: ``broker.config`` reads ``groups.config`` for its key table, and a
broker whose clients use no group never loads the coordinator.
"""
