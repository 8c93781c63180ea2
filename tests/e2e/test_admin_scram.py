"""DescribeUserScramCredentials and AlterUserScramCredentials from kafka-python's
KafkaAdminClient and confluent-kafka's AdminClient against a single broker with a SCRAM
listener: a user added through the API authenticates at once, a deleted one no longer does;
the refused cases change nothing.

librdkafka's AlterUserScramCredentials v0 request carries one byte after the body (a second
top-level tagged-field count), which the broker leaves unread as Kafka does."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.admin import ScramMechanism as KpScramMechanism
from kafka.admin import UserScramCredentialDeletion as KpDeletion
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion
from kafka.errors import KafkaError

pytestmark = pytest.mark.timeout(120)

USERS = {"admin": "admin-pw-1"}


def _can_log_in(broker, user, password) -> bool:
    try:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                                 sasl_plain_password=password, max_block_ms=5000,
                                 # kafka-python retries a refused login until this runs out (30 s by default)
                                 bootstrap_timeout_ms=3000)
    except KafkaError:
        return False
    producer.close()
    return True


def test_users_added_and_deleted_through_the_api(minikafka_broker_factory):
    broker = minikafka_broker_factory(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", users=USERS)
    client = AdminClient(broker.client_config("confluent-kafka", user="admin"))
    admin = KafkaAdminClient(**broker.client_config(user="admin"))
    assert not _can_log_in(broker, "carol", "carol-pw")
    assert admin.alter_user_scram_credentials([KpUpsertion("carol", KpScramMechanism.SCRAM_SHA_256, "carol-pw",
                                                           iterations=8192)]) == {"carol": None}
    assert _can_log_in(broker, "carol", "carol-pw")
    described = client.describe_user_scram_credentials(["carol"])["carol"].result(timeout=15)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]

    refused = admin.alter_user_scram_credentials([
        KpUpsertion("carol", KpScramMechanism.SCRAM_SHA_256, "other-pw", iterations=8192),
        KpUpsertion("carol", KpScramMechanism.SCRAM_SHA_512, "other-pw", iterations=100)])
    assert "Iterations" in refused["carol"]
    assert admin.alter_user_scram_credentials([KpDeletion("nobody", KpScramMechanism.SCRAM_SHA_256)]) == {
        "nobody": "Attempt to delete a user credential that does not exist"}
    assert _can_log_in(broker, "carol", "carol-pw")

    assert admin.alter_user_scram_credentials([KpDeletion("carol", KpScramMechanism.SCRAM_SHA_256)]) == {"carol": None}
    admin.close()
    assert not _can_log_in(broker, "carol", "carol-pw")
    with pytest.raises(Exception, match="RESOURCE_NOT_FOUND|does not exist"):
        client.describe_user_scram_credentials(["carol"])["carol"].result(timeout=15)
    assert list(client.describe_user_scram_credentials().result(timeout=15)) == ["admin"]


def test_confluent_kafka_adds_and_deletes_users(minikafka_broker_factory):
    broker = minikafka_broker_factory(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", users=USERS)
    client = AdminClient(broker.client_config("confluent-kafka", user="admin"))
    upsertion = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                             b"dave-pw", b"dave-salt")
    client.alter_user_scram_credentials([upsertion])["dave"].result(timeout=15)
    assert _can_log_in(broker, "dave", "dave-pw")
    client.alter_user_scram_credentials([UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256)]
                                        )["dave"].result(timeout=15)
    assert not _can_log_in(broker, "dave", "dave-pw")
