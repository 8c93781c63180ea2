"""The broker: trio TCP server, connection loop, one handler module per API, group
coordinator, configuration, the ``minikafka`` CLI and the pytest plugin.

The only package that does network I/O. Entry points: ``broker.cli.main`` (the
``minikafka`` command), ``broker.server.Broker`` (run one in-process with
``await nursery.start(Broker(BrokerConfig({...})).serve)``), ``broker.config.BrokerConfig``
and ``broker.config.CONFIG_KEYS`` (the supported configuration keys, as data). Submodules are
not imported here, so loading the pytest plugin stays cheap.
"""
