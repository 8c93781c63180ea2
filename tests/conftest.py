"""Shared pytest setup for minikafka's own tests.

The broker fixtures (``minikafka_broker``, ``minikafka_broker_factory``) come from
``minikafka.broker.pytest_plugin``, which pytest loads through minikafka's ``pytest11`` entry
point: the suite runs against the installed package (``bash tests/run.sh`` runs
``pip install -e .`` first), since the layer folders are importable only as ``minikafka.*``.
"""

from __future__ import annotations

import uuid

import pytest

from minikafka.replication.zk_server import ZooKeeperServer


def pytest_collection_modifyitems(items):
    # `-m "not zookeeper"` leaves out every test that needs a ZooKeeper (and so Java).
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if {"zookeeper", "private_zookeeper", "minikafka_zookeeper"} & set(fixtures):
            item.add_marker(pytest.mark.zookeeper)


@pytest.fixture(scope="session")
def zookeeper(minikafka_zookeeper) -> ZooKeeperServer:
    """One real ZooKeeper server (Debian's 3.8, standalone, free port) for the whole test
    session, the plugin's (the cluster fixtures use it too). Tests must not share nodes
    through it: take a connect string from ``zk_chroot``. Tests that stop or pause a server
    start a private ``ZooKeeperServer`` instead."""
    return minikafka_zookeeper


@pytest.fixture
def zk_chroot(zookeeper) -> str:
    """A connect string with a chroot of this test's own ("127.0.0.1:PORT/t<uuid>"); clients
    create the chroot on connect, so each test starts from an empty tree."""
    return f"{zookeeper.connect_string}/t{uuid.uuid4().hex}"
