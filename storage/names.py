"""Topic names and partition directory names.

A topic name becomes a path component (``<log dir>/<topic>-<partition>``), so it is checked
before anything touches the filesystem: only ``[a-zA-Z0-9._-]``, at most 249 characters
(Kafka's limit, which leaves room for ``-<partition>`` and suffixes within 255), and never
``.`` or ``..``. With that alphabet no name can contain a path separator, so nothing a client
sends can address a file outside the log dirs.

A deleted partition's directory is first renamed ``<topic>-<partition>.<id>-delete``; that
suffix does not fit in 255 bytes behind a long topic name, so the topic is cut short there,
as Kafka does since 2.1 (KAFKA-4893; 0.10.2 failed to delete such topics).
"""

from __future__ import annotations

import re

MAX_TOPIC_NAME_LENGTH = 249
# Longest file name on the filesystems a log dir lives on (ext4, xfs, tmpfs, ...).
MAX_FILE_NAME_LENGTH = 255
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


class InvalidTopicName(ValueError):
    """A topic name Kafka would refuse (maps to INVALID_TOPIC_EXCEPTION)."""


def validate_topic_name(name: str) -> None:
    """Raise :class:`InvalidTopicName` unless ``name`` is a legal Kafka topic name."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicName("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(
            f"topic name is {len(name)} characters long; the maximum is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicName(
            f"topic name {name!r} contains characters other than ASCII letters, digits, '.', '_' and '-'"
        )


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>``; the topic must already be valid."""
    if not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition must be a non-negative int, not {partition!r}")
    return f"{topic}-{partition}"


def delete_dir_name(topic: str, partition: int, unique_id: str) -> str:
    """``<topic>-<partition>.<unique_id>-delete``, the topic cut short to fit a file name."""
    suffix = f"-{partition}.{unique_id}{DELETE_DIR_SUFFIX}"
    return topic[:MAX_FILE_NAME_LENGTH - len(suffix)] + suffix


def future_dir_name(topic: str, partition: int, unique_id: str) -> str:
    """``<topic>-<partition>.<unique_id>-future``: a replica being moved into this log dir
    (AlterReplicaLogDirs), as Kafka names it. Unlike a -delete name it is not cut short: the
    future must be named after its whole topic (Kafka refuses such a move with
    INVALID_TOPIC_EXCEPTION, as the caller does, see fits_future_dir_name)."""
    return f"{topic}-{partition}.{unique_id}{FUTURE_DIR_SUFFIX}"


def fits_future_dir_name(topic: str, partition: int) -> bool:
    return len(future_dir_name(topic, partition, "0" * 32)) <= MAX_FILE_NAME_LENGTH


def parse_future_dir_name(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a directory named by :func:`future_dir_name`, else None."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem, dot, unique_id = name[:-len(FUTURE_DIR_SUFFIX)].rpartition(".")
    if not dot or not unique_id:
        return None
    return parse_partition_dir_name(stem)


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a directory named ``<topic>-<partition>``, else None.

    Directories that are not partitions (a topic deletion in progress ``...-delete``, Kafka's
    ``.deleted`` leftovers, anything foreign) give None so start-up can skip them.
    """
    topic, sep, number = name.rpartition("-")
    if not sep or not (number.isascii() and number.isdigit()) or (len(number) > 1 and number[0] == "0"):
        return None
    try:
        validate_topic_name(topic)
    except InvalidTopicName:
        return None
    return topic, int(number)
