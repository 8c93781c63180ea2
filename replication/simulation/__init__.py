"""A deterministic cluster simulator (issue 23): the real controller, replica managers,
fetchers, partition state, handlers and storage logs of three brokers in one trio process on
virtual time, over an in-memory ZooKeeper (``zk``) and network (``network``), with a seeded
workload (``workload``) and seeded faults (``faults``), checked by ``checker``.

``python -m minikafka.replication.simulation --seeds N`` runs seeds and prints the figures; a
failing seed prints the command that replays it.
"""
