"""Our error codes carry Kafka's numbers: checked against kafka-python's error table."""

import kafka.errors

from minikafka.protocol.errors import ErrorCode

# The same codes under the older names kafka-python still uses.
KAFKA_PYTHON_NAMES = {
    "UNKNOWN_SERVER_ERROR": "UNKNOWN",
    "NONE": "NO_ERROR",
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
    "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
    "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
}


def kafka_python_codes() -> dict[int, str]:
    codes, classes = {}, [kafka.errors.BrokerResponseError]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        if cls.errno is not None:
            codes[cls.errno] = cls.message
    return codes


def test_every_error_code_has_kafkas_number():
    theirs = kafka_python_codes()
    assert len(theirs) > 80
    for code in ErrorCode:
        assert theirs.get(code.value) == KAFKA_PYTHON_NAMES.get(code.name, code.name), code
