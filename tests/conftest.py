"""Shared pytest setup for minikafka's own tests.

The broker fixtures (``minikafka_broker``, ``minikafka_broker_factory``) come from
``broker.pytest_plugin``, which pytest loads through minikafka's ``pytest11`` entry point once
the project is installed (``bash tests/run.sh`` installs it). Running from a checkout that is
not installed still gets them: the plugin is registered here if the entry point did not.
"""


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("minikafka"):
        config.pluginmanager.import_plugin("broker.pytest_plugin")
