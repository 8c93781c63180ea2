"""One transactional id's state, as Kafka 2.8's ``TransactionMetadata``, and its event in
``__transaction_state`` (Kafka's ``TransactionLog`` key and value, version 0).

A change of state is prepared (:meth:`TransactionMetadata.prepare`: checked against Kafka's
table of valid previous states, marked as the pending state), written to the log, and only then
completed (:meth:`TransactionMetadata.complete`), so the in-memory state never runs ahead of
what a restarted coordinator would load. While a transition is pending, requests about the id
are answered CONCURRENT_TRANSACTIONS.

Event layout (big-endian, Kafka's, so a dump of the topic reads the same)::

    key:   int16 version (0) | string transactional_id
    value: int16 version (0) | int64 producer_id | int16 producer_epoch | int32 timeout_ms
           | int8 state | nullable array of (string topic, array of int32 partition)
           | int64 last_update_timestamp_ms | int64 start_timestamp_ms

A tombstone (null value) removes an expired id. As in Kafka 2.8 the previous producer id and
epoch (KIP-360) are not stored: a retried InitProducerId across a coordinator change is fenced.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 2**15 - 1


class TxnRecordError(ValueError):
    """A ``__transaction_state`` key or value that does not decode."""


class TxnState(enum.IntEnum):
    """Kafka's transaction states, by the byte it stores for each."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


S = TxnState
# Kafka's TransactionMetadata.validPreviousStates.
VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def epoch_exhausted(epoch: int) -> bool:
    # One below the maximum: a fence bumps the epoch once more (Kafka's isEpochExhausted).
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class Transit:
    """The state a prepared transition leads to (Kafka's TxnTransitMetadata)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    update_ms: int


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TxnState | None = None
    # An epoch fence whose write failed: the next fence does not bump the epoch again (the
    # bumped epoch was never handed out).
    failed_epoch_fence: bool = False

    def transit(self) -> Transit:
        return Transit(self.producer_id, self.last_producer_id, self.producer_epoch, self.last_producer_epoch,
                       self.timeout_ms, self.state, frozenset(self.partitions), self.start_ms, self.update_ms)

    def prepare(self, state: TxnState, *, producer_id: int | None = None, epoch: int | None = None,
                last_epoch: int | None = None, timeout_ms: int | None = None,
                partitions: frozenset | None = None, start_ms: int | None = None, now: int) -> Transit:
        """Mark ``state`` as pending and return the transit to write (Kafka's prepareTransitionTo)."""
        if self.pending is not None:
            raise RuntimeError(f"{self.transactional_id}: transition to {state.display} while "
                               f"{self.pending.display} is pending")
        if self.state not in VALID_PREVIOUS[state]:
            raise RuntimeError(f"{self.transactional_id}: no transition from {self.state.display} to {state.display}")
        self.pending = state
        return Transit(
            self.producer_id if producer_id is None else producer_id,
            self.producer_id,
            self.producer_epoch if epoch is None else epoch,
            self.last_producer_epoch if last_epoch is None else last_epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms,
            state,
            frozenset(self.partitions) if partitions is None else partitions,
            self.start_ms if start_ms is None else start_ms,
            now)

    def prepare_fence(self) -> Transit:
        """Bump the epoch to fence the producer of an ongoing transaction, which is then aborted
        (Kafka's prepareFenceProducerEpoch)."""
        epoch = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self.prepare(TxnState.PREPARE_EPOCH_FENCE, epoch=epoch, last_epoch=NO_PRODUCER_EPOCH,
                            now=self.update_ms)

    def complete(self, transit: Transit) -> None:
        """The transit is in the log: make it the state (Kafka's completeTransitionTo)."""
        if self.pending != transit.state:
            raise RuntimeError(f"{self.transactional_id}: completing {transit.state.display}, "
                               f"pending {self.pending}")
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.start_ms = transit.start_ms
        self.update_ms = transit.update_ms
        if transit.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.EMPTY):
            self.partitions = set()
        else:
            self.partitions = set(transit.partitions)
        self.state = transit.state
        self.pending = None
        self.failed_epoch_fence = False


# ------------------------------------------------------------------ the log's events

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMES = struct.Struct(">qq")


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def txn_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def txn_value(transit: Transit) -> bytes:
    out = bytearray(_VALUE_HEAD.pack(0, transit.producer_id, transit.producer_epoch, transit.timeout_ms,
                                     transit.state))
    if transit.state == TxnState.EMPTY:
        out += _I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(transit.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out += _I32.pack(len(by_topic))
        for topic, partitions in by_topic.items():
            out += _string(topic) + _I32.pack(len(partitions))
            out += struct.pack(f">{len(partitions)}i", *partitions)
    out += _TIMES.pack(transit.update_ms, transit.start_ms)
    return bytes(out)


def decode_txn_key(key: bytes) -> str:
    try:
        version, length = struct.unpack_from(">hh", key)
        if version != 0 or 4 + length != len(key):
            raise TxnRecordError(f"not a transaction log key: {key[:64]!r}")
        return key[4:].decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise TxnRecordError(f"undecodable transaction log key: {exc}") from None


def decode_txn_value(transactional_id: str, value: bytes) -> TransactionMetadata:
    try:
        version, producer_id, epoch, timeout_ms, state = _VALUE_HEAD.unpack_from(value)
        if version != 0:
            raise TxnRecordError(f"transaction log value version {version}")
        pos = _VALUE_HEAD.size
        (count,) = _I32.unpack_from(value, pos)
        pos += 4
        partitions = set()
        for _ in range(max(count, 0)):
            (length,) = _I16.unpack_from(value, pos)
            topic = value[pos + 2:pos + 2 + length].decode()
            pos += 2 + length
            (n,) = _I32.unpack_from(value, pos)
            pos += 4
            partitions.update((topic, p) for p in struct.unpack_from(f">{n}i", value, pos))
            pos += 4 * n
        update_ms, start_ms = _TIMES.unpack_from(value, pos)
        return TransactionMetadata(transactional_id, producer_id, epoch, timeout_ms, TxnState(state),
                                   partitions if state != TxnState.EMPTY else set(), start_ms, update_ms)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, TxnRecordError):
            raise
        raise TxnRecordError(f"undecodable transaction log value: {exc}") from None
