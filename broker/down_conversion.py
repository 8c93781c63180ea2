"""Fetched records converted for a consumer of Fetch v0-v3 while the response is written.

Kafka 2.8's ``LazyDownConversionRecords``: a partition's stored slice is read and converted
(``protocol.records.down_converted``) a chunk at a time as the connection sends it, so a
fetch of many megabytes never holds more than a chunk and one entry's conversion, whatever
the size of the response.

A response states each partition's records size before its bytes, and a conversion's size is
only known once it is done (magic 1 messages take more room than v2 records; dropping
headers, control batches and records before the fetch offset takes less). As Kafka, the size
promised is the stored slice's, or the first converted entry's if that is larger (the consumer
must always get one whole entry to make progress), and only the first entry is converted before
the response starts. What converts to more is cut at that size, leaving a partial entry at
the end, which consumers drop and fetch again from; what converts to less is filled up with an
*overflow entry*: the header of an entry at offset -1 longer than what is left, followed by
zeros, which consumers read as a partial entry too. A batch that cannot be converted after the
first (zstd, or bytes that do not parse) ends the conversion the same way; the consumer's next
fetch starts at it and gets the error for the partition.

Where this departs from Kafka: a slice holding nothing to convert (only control batches)
answers with no records rather than a 12-byte overflow entry, which old consumers read as
nothing all the same; and a slice whose first entry is cut short (Fetch before v3 cuts at the
partition limit) goes out as it is, as Kafka 0.10.2 sent it, rather than as an overflow entry:
the consumer reports the message too large either way.
"""

from __future__ import annotations

import struct
from typing import Iterator

from minikafka.protocol.errors import RecordError
from minikafka.protocol.records import down_converted
from minikafka.storage.types import FileSlice

# Bytes read from the segment file at a time, and the most converted bytes written at once
# (Kafka's LazyDownConversionRecordsSend.MAX_READ_SIZE).
CHUNK = 128 * 1024
# An overflow entry's size field is at least a v2 batch header's length, so that no reader
# takes it for a whole (empty) entry (Kafka's DefaultRecordBatch.RECORD_BATCH_OVERHEAD).
_MIN_OVERFLOW_SIZE = 61
_OVERFLOW_HEAD = struct.Struct(">qi")


class DownConvertedRecords:
    """``file_slice`` converted to ``magic`` for a fetch at ``fetch_offset``.

    Construction converts the first entry and raises its ``RecordError`` (the partition then
    answers with that code). ``length`` is the size the response promises (0 when nothing
    converts: send no records instead); ``pieces`` yields exactly that many bytes, and may be
    iterated once.
    """

    def __init__(self, file_slice: FileSlice, magic: int, fetch_offset: int) -> None:
        self._converted = down_converted(file_slice.chunks(CHUNK), magic, fetch_offset)
        self._first = next(self._converted, b"")
        self.length = max(file_slice.length, len(self._first)) if self._first else 0

    def pieces(self) -> Iterator[bytes | bytearray | memoryview]:
        remaining = self.length
        pending = bytearray(self._first)
        self._first = b""
        converted = self._converted
        try:
            while len(pending) < remaining:
                try:
                    entry = next(converted, None)
                except RecordError:
                    # The promised size is on the wire already; the consumer meets this
                    # entry's error on its next fetch, which starts at it.
                    entry = None
                if entry is None:
                    break
                pending += entry
                if CHUNK <= len(pending) < remaining:
                    yield pending
                    remaining -= len(pending)
                    pending = bytearray()
        finally:
            converted.close()
        if len(pending) >= remaining:
            yield memoryview(pending)[:remaining]
            return
        if pending:
            yield pending
        yield from _overflow(remaining - len(pending))

    def read_bytes(self) -> bytes:
        """All of it at once, for callers that want the bytes (the simulator's network)."""
        return b"".join(self.pieces())


def _overflow(length: int) -> Iterator[bytes]:
    """``length`` bytes read as a partial entry: an overflow entry's head, then zeros."""
    head = _OVERFLOW_HEAD.pack(-1, max(length + 1, _MIN_OVERFLOW_SIZE))[:length]
    yield head
    length -= len(head)
    while length > 0:
        zeros = bytes(min(length, CHUNK))
        yield zeros
        length -= len(zeros)
