"""Shared pytest setup for minikafka's own tests.

The broker fixtures (``minikafka_broker``, ``minikafka_broker_factory``) come from
``minikafka.broker.pytest_plugin``, which pytest loads through minikafka's ``pytest11`` entry
point: the suite runs against the installed package (``bash tests/run.sh`` runs
``pip install -e .`` first), since the layer folders are importable only as ``minikafka.*``.
"""
