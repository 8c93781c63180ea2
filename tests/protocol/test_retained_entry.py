"""``records.retained_entry``: the log cleaner's per-entry work on magic 0/1 entries and
magic 2 batches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.protocol.records import (LOG_APPEND_TIME, Codec, ValidationConfig, build_message_set, iter_entries,
                                        iter_records, retained_entry, validate_and_assign)

NOW = 1_700_000_000_000

records = st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c"]), st.one_of(st.none(), st.binary(max_size=20)),
                             st.integers(NOW - 1000, NOW)), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(records, st.sampled_from([c for c in Codec if c != Codec.ZSTD]), st.sampled_from([0, 1, 2]),
       st.integers(0, 1000), st.data(), st.booleans())
def test_the_survivors_keep_offsets_keys_values_and_timestamps(batch, codec, magic, base, data, log_append_time):
    # Magic 2: a magic 1 set up-converted by a log of the current format.
    config = ValidationConfig(timestamp_type=LOG_APPEND_TIME if log_append_time else 0, magic=max(magic, 1))
    produced = build_message_set(batch, magic=min(magic, 1), codec=codec)
    stored = bytes(validate_and_assign(produced, base, NOW, config).buffer)
    batches = magic == 2
    before = list(iter_records(stored))
    wanted = data.draw(st.sets(st.sampled_from([r.offset for r in before])))
    kept = []
    for entry in iter_entries(stored):
        result = retained_entry(memoryview(stored)[entry.position:entry.position + entry.size],
                                lambda record: record.offset in wanted)
        if result is not None:
            kept.append(bytes(result))
    after = list(iter_records(b"".join(kept)))
    assert after == [r for r in before if r.offset in wanted]
    if len(wanted) == len(before):
        assert b"".join(kept) == stored  # nothing dropped: the bytes as they were
    last_offsets = [entry.offset for entry in iter_entries(stored)]
    for entry in iter_entries(b"".join(kept)):  # a rebuilt wrapper keeps the codec and names its last record
        assert entry.codec == codec
        records_in = [r.offset for r in iter_records(b"".join(kept)[entry.position:entry.position + entry.size])]
        # a batch keeps its last offset (its producer's last sequence), a wrapper names its last record
        assert entry.offset in last_offsets if batches else entry.offset == records_in[-1]
