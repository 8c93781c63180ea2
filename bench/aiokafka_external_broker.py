"""pytest plugin (``-p aiokafka_external_broker``) pointing aiokafka's functional tests at a running
broker, ``AIOKAFKA_EXTERNAL_BROKER=host:port``, instead of the Kafka its conftest starts in docker.

aiokafka has no switch for this, and a plugin's fixture cannot override its conftest's (the
conftest's are nearer the tests), so once the tests are collected this replaces the functions
(and the arguments) of the conftest's docker fixtures: ``kafka_server`` answers the external
broker's address, and the helpers that run Kafka's shell tools inside the container
(``acl_manager``, ``kafka_config``, ``kerberos_utils``) are None, so the tests that use them fail
for want of a container. aiokafka reads the broker's version from the ``--docker-image`` tag
(``--docker-image minikafka:2.8.0``); the image is not pulled, as its fixture is replaced too.
"""

from __future__ import annotations

import os

import pytest


def _kafka_server():
    from tests.conftest import KafkaServer  # aiokafka's own, imported from its checkout

    host, port = os.environ["AIOKAFKA_EXTERNAL_BROKER"].rsplit(":", 1)
    # No TLS or SASL listeners: their ports are the plaintext one, refused at the handshake.
    return KafkaServer(host, int(port), int(port), int(port), int(port), container=None)


def _none():
    return None


def _ssl_folder():
    # Where aiokafka's certificates would be, made in the container; none are made here.
    import pathlib

    return pathlib.Path("tests/ssl_cert")


_REPLACED = {"kafka_server": _kafka_server, "docker": _none, "kafka_image": _none, "ssl_folder": _ssl_folder,
             "acl_manager": _none, "kafka_config": _none, "kerberos_utils": _none}


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    result = yield
    for name, replacement in _REPLACED.items():
        for fixturedef in session._fixturemanager._arg2fixturedefs.get(name, ()):
            fixturedef.func, fixturedef.argnames = replacement, ()
    return result
