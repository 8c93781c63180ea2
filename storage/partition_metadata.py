"""The topic id, in each partition directory's ``partition.metadata`` (Kafka >= 2.8, KIP-516).

A topic name can be deleted and created again; the id tells the incarnations apart (the
exporter keys its progress by it). Kafka's text format, exactly::

    version: 0
    topic_id: <16 random bytes, base64url without padding (Kafka's Uuid.toString)>

Written atomically (storage.checkpoint.write_atomically) when a partition is created, or at
load for a directory from before topic ids; every partition of a topic holds the same id.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path

from minikafka.storage.checkpoint import write_atomically
from minikafka.storage.types import CorruptPartitionMetadata

PARTITION_METADATA_FILE = "partition.metadata"
PARTITION_METADATA_VERSION = 0
# Kafka's reserved ids: ZERO_UUID (no id) and METADATA_TOPIC_ID (KRaft's __cluster_metadata).
_RESERVED_IDS = {bytes(16), bytes(15) + b"\x01"}


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def new_topic_id(random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    """A random topic id as Kafka's ``Uuid.randomUuid()`` makes them: never a reserved id,
    and never one whose text starts with ``-`` (it would read as an option on command lines).
    ``random_bytes`` is the source (a seeded one replays the same ids)."""
    while True:
        raw = random_bytes(16)
        text = _encode(raw)
        if raw not in _RESERVED_IDS and not text.startswith("-"):
            return text


def parse_topic_id(text: str) -> str:
    """``text`` if it is a topic id in Kafka's form, else ValueError."""
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except ValueError:
        raw = b""
    if len(raw) != 16 or _encode(raw) != text or raw in _RESERVED_IDS:
        raise ValueError(f"{text!r} is not a topic id (16 bytes, base64url without padding)")
    return text


def read_topic_id(directory: Path) -> str | None:
    """The topic id recorded in a partition directory; None if it has no metadata file.

    Raises CorruptPartitionMetadata for a file that is not Kafka's format version 0.
    """
    path = Path(directory) / PARTITION_METADATA_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CorruptPartitionMetadata(f"{path}: not UTF-8 text") from None
    fields = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip()] = value.strip()
    if fields.get("version") != str(PARTITION_METADATA_VERSION):
        raise CorruptPartitionMetadata(f"{path}: missing or unknown version (expected "
                                       f"'version: {PARTITION_METADATA_VERSION}')")
    try:
        return parse_topic_id(fields.get("topic_id", ""))
    except ValueError as exc:
        raise CorruptPartitionMetadata(f"{path}: {exc}") from None


def write_topic_id(directory: Path, topic_id: str) -> None:
    """Record ``topic_id`` in a partition directory, atomically."""
    write_atomically(Path(directory) / PARTITION_METADATA_FILE, format_topic_id(topic_id))


def format_topic_id(topic_id: str) -> bytes:
    """The bytes of ``partition.metadata`` for ``topic_id`` (for callers that make them durable in bulk)."""
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {parse_topic_id(topic_id)}".encode()
