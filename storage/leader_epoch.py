"""The leader epoch cache: which offset each leader epoch started at (KIP-101, seed 000).

Magic 0/1 messages have no room for an epoch, so epoch boundaries live only here, in the
partition's ``leader-epoch-checkpoint`` file, rewritten atomically on every change::

    0                 <- format version
    2                 <- number of entries
    0 0               <- epoch start_offset
    3 1200

A new partition starts with epoch 0 at offset 0. A follower asks the leader for the end
offset of its latest epoch (OffsetForLeaderEpoch) and truncates to it instead of to its high
watermark.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from minikafka.storage.checkpoint import CorruptCheckpoint, format_versioned_lines, parse_versioned_lines, write_atomically

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

logger = logging.getLogger(__name__)


class LeaderEpochCheckpointFile:
    """Reads and writes ``leader-epoch-checkpoint``: ``(epoch, start_offset)`` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: list[tuple[int, int]]) -> None:
        write_atomically(self.path, self.format(entries))

    @staticmethod
    def format(entries: list[tuple[int, int]]) -> bytes:
        """The file's bytes for ``entries`` (for callers that make them durable in bulk)."""
        return format_versioned_lines([f"{e} {o}" for e, o in entries])

    def read(self) -> list[tuple[int, int]]:
        """Entries in file order; [] if missing. Raises CorruptCheckpoint."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except UnicodeDecodeError:
            raise CorruptCheckpoint(f"{self.path}: not UTF-8 text") from None
        entries = []
        for epoch, offset in parse_versioned_lines(text, self.path, 2):
            try:
                entries.append((int(epoch), int(offset)))
            except ValueError:
                raise CorruptCheckpoint(f"{self.path}: bad entry {epoch} {offset}") from None
        for (e1, o1), (e2, o2) in zip(entries, entries[1:]):
            if not (e2 > e1 and o2 >= o1):
                raise CorruptCheckpoint(f"{self.path}: epochs and offsets must increase")
        return entries


class LeaderEpochCache:
    """``epoch -> start offset`` for one partition, persisted on every change.

    ``log_end_offset`` is asked for the end of the latest epoch, which is still open.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpointFile, log_end_offset: Callable[[], int], *,
                 entries: list[tuple[int, int]] | None = None) -> None:
        """``entries``: what the checkpoint is known to hold (its caller has just written it),
        so it is not read back."""
        self._checkpoint = checkpoint
        self._log_end_offset = log_end_offset
        if entries is not None:
            self._entries = list(entries)
            return
        try:
            self._entries = checkpoint.read()
        except CorruptCheckpoint as exc:
            # Only written atomically, so this is outside damage; the replication layer
            # re-learns epochs from the leader, which is safer than guessing them.
            logger.warning("ignoring unreadable leader epoch checkpoint: %s", exc)
            self._entries = []

    @property
    def entries(self) -> list[tuple[int, int]]:
        """``[(epoch, start_offset), ...]`` in increasing order (a copy)."""
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``.

        Epochs at or below the latest are ignored (a stale leader's write cannot rewrite
        history). Entries starting at or after ``start_offset`` belong to a history this
        epoch replaces and are dropped first.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} and start offset {start_offset} must be >= 0")
        if epoch <= self.latest_epoch:
            return
        self._entries = [(e, o) for e, o in self._entries if o < start_offset]
        self._entries.append((epoch, start_offset))
        self._flush()

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` as OffsetForLeaderEpoch answers it (KIP-101/279).

        The end offset of an epoch is the start offset of the next higher epoch, or the log
        end offset for the latest one; the epoch returned is the largest known epoch not above
        the requested one. ``(-1, -1)`` when the requested epoch is unknown or above all.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, self._log_end_offset()
        higher = next(((e, o) for e, o in self._entries if e > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [(e, o) for e, o in self._entries if e <= requested_epoch]
        return (floor[-1][0] if floor else requested_epoch), higher[1]

    def epoch_at(self, offset: int) -> int:
        """The epoch whose messages include ``offset``: the latest starting at or before it
        (UNDEFINED_EPOCH before the first)."""
        covering = [e for e, o in self._entries if o <= offset]
        return covering[-1] if covering else UNDEFINED_EPOCH

    def fit_to_loaded_log(self, start_offset: int, end_offset: int) -> None:
        """Fit the cache to a log just loaded as ``[start_offset, end_offset)``, with one write.

        As Kafka at load, epochs starting at or after the log end are dropped (recovery or a
        lost tail cut them away) and the log start is applied. Kafka's leader then records its
        current epoch at its log end before taking writes (makeLeader); this broker is the
        leader on every load and its epoch never goes back, so the latest epoch held before
        is recorded again at the log end if it was dropped. Without that a partition created
        and never written, or emptied by retention, lost epoch 0 on every restart and
        OffsetForLeaderEpoch answered -1 until the next produce.
        """
        current = self.latest_epoch
        kept = self._truncated_from_start([(e, o) for e, o in self._entries if o < end_offset], start_offset)
        if current != UNDEFINED_EPOCH and (not kept or kept[-1][0] != current):
            # As assign(): what starts at the new entry's offset is history it replaces.
            kept = [(e, o) for e, o in kept if o < end_offset] + [(current, end_offset)]
        self._replace(kept)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget epochs starting at or after it."""
        self._replace([(e, o) for e, o in self._entries if o < end_offset])

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop epochs wholly before it and move the
        start of the epoch that covers it up to it."""
        self._replace(self._truncated_from_start(self._entries, start_offset))

    @staticmethod
    def _truncated_from_start(entries: list[tuple[int, int]], start_offset: int) -> list[tuple[int, int]]:
        covering = [i for i, (_, o) in enumerate(entries) if o <= start_offset]
        if not covering:
            return list(entries)
        i = covering[-1]
        return [(entries[i][0], start_offset)] + entries[i + 1:]

    def _replace(self, entries: list[tuple[int, int]]) -> None:
        if entries != self._entries:
            self._entries = entries
            self._flush()

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Hold exactly ``entries`` (a replica moved to another log dir takes its current
        log's epochs, the magic 0/1 ones that no batch carries included)."""
        self._entries = list(entries)
        self._flush()

    def clear_and_flush(self) -> None:
        self._entries = []
        self._flush()

    def _flush(self) -> None:
        self._checkpoint.write(self._entries)
