"""The Secor-style exporter: layout, skipping, and exactly once across real crashes (SIGKILL)."""

from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from minikafka.export.exporter import CRASH_HOOK_ENV, ExportSummary, SegmentGone, _move_into_place, export, pending_slices
from minikafka.export.progress import ExportProgress, PartitionProgress
from minikafka.export.replay import generations, read_exported
from minikafka.export.segment_reader import ARROW_SCHEMA, SegmentCorrupt, read_segment
from minikafka.protocol.records import Codec, build_message_set, iter_records
from minikafka.storage import new_topic_id, read_topic_id
from minikafka.storage.partition_metadata import write_topic_id

from .conftest import write_segments

REPO = Path(__file__).resolve().parents[2]
MIDNIGHT = 1_763_769_600_000  # 2025-11-22T00:00:00Z
LAUNCHER = "import sys; from minikafka.broker.cli import main; sys.exit(main())"


def segment(first: int, count: int, *, codec=Codec.NONE, tag: bytes = b"") -> tuple[int, bytes]:
    """Records around midnight UTC, timestamps going back and forth across it; values
    ``<tag>v<offset>``."""
    sets = []
    for offset in range(first, first + count):
        ts = MIDNIGHT + (-1 if offset % 3 == 0 else 1) * (offset * 1000)
        sets.append([(b"k%d" % offset if offset % 5 else None, tag + b"v%d" % offset, ts)])
    if codec == Codec.NONE:
        return first, b"".join(build_message_set(s, base_offset=first + i) for i, s in enumerate(sets))
    return first, build_message_set([s[0] for s in sets], codec=codec, base_offset=first)


def make_log(log_dir: Path) -> dict[tuple[str, int], list]:
    """Topic ``a`` (2 partitions, 3 closed segments in all) and ``__consumer_offsets``."""
    write_segments(log_dir, "a", 0, [segment(0, 10), segment(10, 10, codec=Codec.GZIP), segment(20, 3)])
    write_segments(log_dir, "a", 1, [segment(0, 7, codec=Codec.SNAPPY), segment(7, 2)])
    write_segments(log_dir, "__consumer_offsets", 0, [segment(0, 3), segment(3, 1)])
    return closed_records(log_dir)


def closed_records(log_dir: Path) -> dict[tuple[str, int], list]:
    """Records of the closed segments (all but the last file of each partition)."""
    out = {}
    for part_dir in sorted(log_dir.iterdir()):
        topic, _, partition = part_dir.name.rpartition("-")
        files = sorted(part_dir.glob("*.log"))[:-1]
        out[(topic, int(partition))] = [r for f in files for r in iter_records(f.read_bytes())]
    return out


def exported(out: Path, generation: int = 1) -> list[tuple]:
    """Every row of every final output file of ``generation``, with the file it is in."""
    rows = []
    for path in sorted(out.glob(f"*/dt=*/{generation}_*.parquet")):
        table = pq.read_table(path)
        for row in table.to_pylist():
            rows.append((path.relative_to(out).as_posix(), row))
    return rows


def assert_exactly_once(out: Path, records: dict[tuple[str, int], list], generation: int = 1) -> None:
    rows = exported(out, generation)
    seen = [(r["topic"], r["partition"], r["offset"]) for _, r in rows]
    assert len(seen) == len(set(seen)), "a record was exported twice"
    want = {(t, p, r.offset): r for (t, p), rs in records.items() if not t.startswith("__") for r in rs}
    assert set(seen) == set(want)
    for name in {name for name, _ in rows}:  # each file in offset order
        file_offsets = [r["offset"] for n, r in rows if n == name]
        assert file_offsets == sorted(file_offsets), name
    for name, row in rows:
        record = want[(row["topic"], row["partition"], row["offset"])]
        assert (row["key"], row["value"]) == (record.key, record.value)
        millis = round(row["timestamp"].timestamp() * 1000)
        assert millis == record.timestamp
        # Secor naming: OUT/<topic>/dt=<UTC date>/<generation>_<partition>_<first offset>.parquet;
        # records without a timestamp (-1) go under dt=unknown.
        date = ("unknown" if millis == -1 else
                datetime.datetime.fromtimestamp(millis / 1000, datetime.timezone.utc).date().isoformat())
        topic, dt, file_name = name.split("/")
        file_generation, partition, first_offset = file_name.removesuffix(".parquet").split("_")
        assert (topic, dt, int(partition)) == (row["topic"], f"dt={date}", row["partition"])
        assert int(file_generation) == generation
        assert len(first_offset) == 20 and int(first_offset) <= row["offset"]


def test_layout_progress_and_skipping(spark, tmp_path, capsys):
    log_dir, out = tmp_path / "log", tmp_path / "out"
    records = make_log(log_dir)
    summary = export(lambda: spark, [log_dir], out, progress=True)
    assert (summary.segments, summary.records, summary.files) == (3, 27, 6)
    # The bar is drawn before any segment is done, then redrawn as counts grow, and finished.
    err = capsys.readouterr().err
    drawn = [int(n) for n in re.findall(r"\rexport \[[#-]{30}\] (\d+)/3 segments", err)]
    assert drawn[0] == 0 and drawn[-1] == 3 and drawn == sorted(drawn), err
    assert "] 3/3 segments\n" in err
    assert_exactly_once(out, records)
    assert ExportProgress(out).state().next_offsets() == {("a", 0): 20, ("a", 1): 7}
    # Each segment is split by date (offsets divisible by 3 fall before midnight); a file is
    # named by its first offset.
    names = sorted(p.relative_to(out).as_posix() for p in out.glob("a/dt=*/*.parquet"))
    assert names == sorted(f"a/dt=2025-11-{day}/1_{p}_{o:020d}.parquet" for day, p, o in [
        (22, 0, 0), (21, 0, 3), (22, 0, 10), (21, 0, 12), (22, 1, 0), (21, 1, 3)])
    # Nothing new: no work, no Spark.
    again = export(lambda: pytest.fail("Spark was started with nothing to export"), [log_dir], out)
    assert (again.segments, again.records) == (0, 0)
    # The active segment of a-1 closes when a new one starts: only it is exported next.
    write_segments(log_dir, "a", 1, [segment(9, 4)])
    summary = export(lambda: spark, [log_dir], out)
    assert (summary.segments, summary.records) == (1, 2)
    assert_exactly_once(out, closed_records(log_dir))
    assert ExportProgress(out).state().next_offsets()[("a", 1)] == 9


def test_topic_option_and_internal_topics(spark, tmp_path):
    """--topic exports the named topics only; internal topics (__consumer_offsets) are left
    out unless named, and exported like any other topic when they are."""
    log_dir, out = tmp_path / "log", tmp_path / "out"
    write_segments(log_dir, "b", 0, [segment(0, 4, tag=b"b-"), segment(4, 1)])
    records = make_log(log_dir)
    summary = export(lambda: spark, [log_dir], out, ["b"])
    assert (summary.segments, summary.records) == (1, 4)
    assert {name.split("/")[0] for name in file_contents(out)} == {"b"}
    assert ExportProgress(out).state().next_offsets() == {("b", 0): 4}
    assert_exactly_once(out, {("b", 0): records[("b", 0)]})

    summary = export(lambda: spark, [log_dir], out)  # every topic but the internal one
    assert (summary.segments, summary.records) == (3, 27)
    assert_exactly_once(out, records)  # checks that no __ topic was exported
    assert ("__consumer_offsets", 0) not in ExportProgress(out).state().next_offsets()

    summary = export(lambda: spark, [log_dir], out, ["__consumer_offsets"])
    assert (summary.segments, summary.records) == (1, 3)
    internal = [row for _, row in exported(out) if row["topic"] == "__consumer_offsets"]
    assert sorted((r["offset"], r["value"]) for r in internal) == [
        (r.offset, r.value) for r in records[("__consumer_offsets", 0)]]
    assert ExportProgress(out).state().next_offsets()[("__consumer_offsets", 0)] == 3


def test_records_without_timestamp_go_under_dt_unknown(spark, tmp_path):
    """Magic 0 messages (and magic 1 ones sent with timestamp -1) have no date: they are not
    filed under 1969-12-31 but under dt=unknown, next to the dated records of the segment."""
    log_dir, out = tmp_path / "log", tmp_path / "out"
    no_time = (build_message_set([(b"a", b"0", 0), (None, b"1", 0)], magic=0)
               + build_message_set([(b"c", b"2", 0), (b"d", b"3", 0)], magic=0, codec=Codec.GZIP, base_offset=2)
               + build_message_set([(b"e", b"4", -1)], base_offset=4)
               + build_message_set([(b"f", b"5", MIDNIGHT + 5)], base_offset=5)
               + build_message_set([(b"g", b"6", 0)], magic=0, codec=Codec.LZ4, base_offset=6))
    write_segments(log_dir, "old", 0, [(0, no_time), (7, build_message_set([(b"h", b"7", 0)], base_offset=7))])
    records = closed_records(log_dir)
    assert [r.timestamp for r in records[("old", 0)]] == [-1, -1, -1, -1, -1, MIDNIGHT + 5, -1]
    export(lambda: spark, [log_dir], out)
    assert_exactly_once(out, records)
    assert sorted(p.relative_to(out).as_posix() for p in out.glob("old/dt=*/*.parquet")) == [
        f"old/dt=2025-11-22/1_0_{5:020d}.parquet", f"old/dt=unknown/1_0_{0:020d}.parquet"]
    assert not list(out.glob("*/dt=1969-*"))


def test_offsets_deleted_by_retention_before_export_are_reported(spark, tmp_path, capsys):
    log_dir, out = tmp_path / "log", tmp_path / "out"
    write_segments(log_dir, "g", 0, [segment(10, 5), segment(15, 2)])  # 4..9 are gone
    ExportProgress(out).record("g", 0, 4, 1, None)
    summary = export(lambda: spark, [log_dir], out)
    assert (summary.segments, summary.skipped_offsets) == (1, 6)
    assert "warning: 6 offsets were deleted by retention before they were exported" in capsys.readouterr().err
    assert_exactly_once(out, closed_records(log_dir))


def test_corrupt_segment_stops_the_export_with_its_name(spark, tmp_path):
    log_dir, out = tmp_path / "log", tmp_path / "out"
    make_log(log_dir)
    damaged = log_dir / "a-1" / f"{0:020d}.log"
    data = bytearray(damaged.read_bytes())
    data[-3] ^= 0x10  # inside the snappy wrapper's value: its CRC no longer matches
    damaged.write_bytes(bytes(data))
    with pytest.raises(SegmentCorrupt, match=f"^{re.escape(str(damaged))}: CRC mismatch"):
        export(lambda: spark, [log_dir], out)
    assert not list(out.glob("a/dt=*/*")) and ExportProgress(out).state().next_offsets() == {}


def test_segment_retention_takes_between_planning_and_reading(spark, tmp_path, capsys):
    """A live broker's retention renames a planned segment to .deleted (later deleting it)
    while the exporter starts Spark. The planned file is read all the same, not left out by
    a rescan while progress moves past it; one deleted outright stops the run with nothing
    renamed or recorded, and the next run exports the rest once."""
    log_dir, out = tmp_path / "log", tmp_path / "out"
    records = make_log(log_dir)
    first = log_dir / "a-0" / f"{0:020d}.log"

    def retention_renames_then_spark():
        first.rename(first.with_name(first.name + ".deleted"))
        return spark

    summary = export(retention_renames_then_spark, [log_dir], out)
    assert (summary.segments, summary.records, summary.incomplete_partitions) == (3, 27, 0)
    assert_exactly_once(out, records)
    assert ExportProgress(out).state().next_offsets() == {("a", 0): 20, ("a", 1): 7}

    log_dir, out = tmp_path / "log2", tmp_path / "out2"
    make_log(log_dir)
    first = log_dir / "a-0" / f"{0:020d}.log"

    def retention_deletes_then_spark():
        first.unlink()
        return spark

    with pytest.raises(SegmentGone, match=f"^{re.escape(str(first))} was deleted .* nothing was exported"):
        export(retention_deletes_then_spark, [log_dir], out)
    assert not file_contents(out) and ExportProgress(out).state().next_offsets() == {}
    summary = export(lambda: spark, [log_dir], out)
    assert (summary.segments, summary.records) == (2, 17)
    assert_exactly_once(out, closed_records(log_dir))


def test_partition_with_a_planned_segment_not_staged_is_not_recorded(tmp_path):
    """The check before anything is renamed or recorded: a planned segment with bytes but no
    staged record means it was not read, so none of its partition's files are renamed (and
    export() records no progress for it); other partitions go ahead."""
    log_dir, out = tmp_path / "log", tmp_path / "out"
    make_log(log_dir)
    plan = pending_slices([log_dir], out)
    staging = out / "_minikafka" / "staging" / "run" / "dt=2025-11-22"
    staging.mkdir(parents=True)
    for number, s in enumerate(plan.slices):
        if (s.topic, s.partition, s.start_offset) == ("a", 0, 10):
            continue  # as if Spark never read it
        batches = list(read_segment(s.log_path, s.topic, s.partition))
        pq.write_table(pa.Table.from_batches(batches, ARROW_SCHEMA), staging / f"part-{number}.parquet")
    summary = ExportSummary()
    left_out = _move_into_place(staging.parent, out, plan.slices, plan.incarnations, summary)
    assert left_out == {("a", 0)}
    assert sorted(file_contents(out)) == [f"a/dt=2025-11-22/1_1_{0:020d}.parquet"]
    assert (summary.files, summary.records) == (1, 7)


def file_contents(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.glob("*/dt=*/*.parquet")}


def replace_partition(log_dir: Path, topic: str, partition: int, segments: list) -> str:
    """The partition deleted and created again, as the broker does it: a new topic id, offsets
    from 0 again, other records. Returns the new id."""
    shutil.rmtree(log_dir / f"{topic}-{partition}")
    write_segments(log_dir, topic, partition, segments)
    topic_id = new_topic_id()
    write_topic_id(log_dir / f"{topic}-{partition}", topic_id)
    return topic_id


def test_topic_created_again_is_exported_whole_under_the_next_generation(spark, tmp_path):
    """A topic deleted and created again under the same name (new topic id) starts from its
    first offset although the old one's progress is further on, its files get generation 2
    and never take an old file's name, and a crash between renaming and recording is still
    exactly once. Readers take the newest generation unless told otherwise."""
    log_dir, out = tmp_path / "log", tmp_path / "out"
    write_segments(log_dir, "a", 0, [segment(0, 10), segment(10, 10), segment(20, 3)])
    first_id = new_topic_id()
    write_topic_id(log_dir / "a-0", first_id)
    first = closed_records(log_dir)
    export(lambda: spark, [log_dir], out)
    assert_exactly_once(out, first, generation=1)
    first_files = file_contents(out)
    assert ExportProgress(out).state().progress == {("a", 0): PartitionProgress(20, 1, first_id)}

    # Offsets 0..11 again, all below the old progress (20), in the same segment names.
    second_id = replace_partition(log_dir, "a", 0, [segment(0, 10, tag=b"again-"), segment(10, 2, tag=b"again-"),
                                                    segment(12, 1, tag=b"again-")])
    second = closed_records(log_dir)
    killed = run_cli("export", "--log-dir", str(log_dir), "--out", str(out), "--master", "local[1]",
                     env_extra={CRASH_HOOK_ENV: "after-rename"})
    assert killed.returncode == -9, killed.stderr
    assert ExportProgress(out).state().progress[("a", 0)].generation == 1  # not recorded
    summary = export(lambda: spark, [log_dir], out)
    assert (summary.segments, summary.records) == (2, 12)

    after = file_contents(out)
    assert {name: data for name, data in after.items() if name.split("/")[2].startswith("1_")} == first_files
    assert_exactly_once(out, first, generation=1)
    assert_exactly_once(out, second, generation=2)
    # Same partition, dates and first offsets as old files, yet names of their own.
    assert sorted(set(after) - set(first_files)) == [
        f"a/dt=2025-11-21/2_0_{3:020d}.parquet", f"a/dt=2025-11-22/2_0_{0:020d}.parquet",
        f"a/dt=2025-11-22/2_0_{10:020d}.parquet"]
    assert {f"a/dt=2025-11-21/1_0_{3:020d}.parquet", f"a/dt=2025-11-22/1_0_{0:020d}.parquet"} <= set(first_files)
    state = ExportProgress(out).state()
    assert state.progress == {("a", 0): PartitionProgress(12, 2, second_id)}
    assert generations(out, "a") == {1: first_id, 2: second_id}
    newest = read_exported(spark, out)
    assert sorted(r.value for r in newest.collect()) == sorted(r.value for r in second[("a", 0)])
    older = read_exported(spark, out, generation=1)
    assert sorted(r.value for r in older.collect()) == sorted(r.value for r in first[("a", 0)])
    # Nothing left to do: the old progress is not mistaken for the new topic's, nor the reverse.
    assert export(lambda: pytest.fail("Spark started with nothing to export"), [log_dir], out).segments == 0


def test_progress_from_before_topic_ids_counts_for_the_current_topic(spark, tmp_path):
    """Progress files without a topic id (older exports) and log directories without
    partition.metadata (older brokers) keep working: nothing is exported twice, and the
    files keep generation 1."""
    log_dir, out = tmp_path / "log", tmp_path / "out"
    make_log(log_dir)
    export(lambda: spark, [log_dir], out)  # log dirs without ids
    for path in (out / "_minikafka" / "progress").iterdir():  # as an older exporter wrote them
        path.write_text(path.read_text().split()[0] + "\n")
    topic_id = new_topic_id()
    for partition in (0, 1):  # what a broker does at load
        write_topic_id(log_dir / f"a-{partition}", topic_id)
    write_segments(log_dir, "a", 1, [segment(9, 4)])  # a-1's active segment closes
    summary = export(lambda: spark, [log_dir], out)
    assert (summary.segments, summary.records) == (1, 2)
    assert_exactly_once(out, closed_records(log_dir), generation=1)
    assert generations(out, "a") == {1: topic_id}
    assert ExportProgress(out).state().progress[("a", 1)] == PartitionProgress(9, 1, topic_id)


def test_topic_replaced_while_spark_reads_it_is_left_for_the_next_run(spark, tmp_path, capsys):
    """Deleted and created again after planning, before Spark read the files: what Spark read
    may be the new topic's, so nothing of that partition is renamed into place or recorded;
    the next run exports the new topic under its own generation."""
    log_dir, out = tmp_path / "log", tmp_path / "out"
    records = make_log(log_dir)
    write_topic_id(log_dir / "a-0", new_topic_id())
    write_topic_id(log_dir / "a-1", read_topic_id(log_dir / "a-0"))
    new_id = None

    def replace_then_spark():
        nonlocal new_id
        new_id = replace_partition(log_dir, "a", 0, [segment(0, 10, tag=b"new-"), segment(10, 1, tag=b"new-")])
        return spark

    summary = export(replace_then_spark, [log_dir], out)
    assert summary.replaced_partitions == 1
    assert "a-0 deleted and created again during the export" in capsys.readouterr().err
    assert {name.split("/")[2][:3] for name in file_contents(out)} == {"1_1"}  # a-1 only
    assert_exactly_once(out, {("a", 1): records[("a", 1)]}, generation=1)
    assert ("a", 0) not in ExportProgress(out).state().progress
    export(lambda: spark, [log_dir], out)
    assert_exactly_once(out, {("a", 0): closed_records(log_dir)[("a", 0)]}, generation=2)
    assert generations(out, "a")[2] == new_id


def run_cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", LAUNCHER, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def test_killed_between_writing_and_recording_then_rerun_exports_each_record_once(spark, tmp_path):
    log_dir, out = tmp_path / "log", tmp_path / "out"
    records = make_log(log_dir)
    command = ["export", "--log-dir", str(log_dir), "--out", str(out), "--master", "local[1]"]

    # A run killed after Spark wrote, before its renames, leaves only staging files, which
    # the next run removes.
    killed = run_cli(*command, env_extra={CRASH_HOOK_ENV: "after-write"})
    assert killed.returncode == -9, killed.stderr
    [leftover] = (out / "_minikafka" / "staging").iterdir()
    assert list(leftover.glob("dt=*/*.parquet"))
    assert not list(out.glob("a/dt=*/*")) and ExportProgress(out).state().next_offsets() == {}

    killed = run_cli(*command, env_extra={CRASH_HOOK_ENV: "mid-rename"})
    assert killed.returncode == -9, killed.stderr
    assert not leftover.exists()
    assert len(list(out.glob("a/dt=*/*.parquet"))) == 1 and ExportProgress(out).state().next_offsets() == {}

    # Killed between writing (every file in place) and recording: the rerun renames the same
    # names over them. Then killed between recording a-0 and recording a-1.
    killed = run_cli(*command, env_extra={CRASH_HOOK_ENV: "after-rename"})
    assert killed.returncode == -9, killed.stderr
    assert len(list(out.glob("a/dt=*/*.parquet"))) == 6 and ExportProgress(out).state().next_offsets() == {}
    killed = run_cli(*command, env_extra={CRASH_HOOK_ENV: "mid-record"})
    assert killed.returncode == -9, killed.stderr
    assert len(list(out.glob("a/dt=*/*.parquet"))) == 6
    assert ExportProgress(out).state().next_offsets() == {("a", 0): 20}

    # a-1's segment, whose progress was not recorded; a-0's are skipped. The summary line
    # counts what this run did.
    done = run_cli(*command)
    assert done.returncode == 0, done.stderr
    segment_bytes = (log_dir / "a-1" / f"{0:020d}.log").stat().st_size
    written = sum(p.stat().st_size for p in out.glob("a/dt=*/1_1_*.parquet"))
    assert re.fullmatch(
        rf"minikafka export: 1 segments, {len(records[('a', 1)])} records, 2 files, "
        rf"{segment_bytes / 1e6:.1f} MB read, {written / 1e6:.1f} MB written, \d+\.\d s",
        done.stderr.strip().splitlines()[-1]), done.stderr
    assert_exactly_once(out, records)
    assert not any((out / "_minikafka" / "staging").iterdir())
    assert ExportProgress(out).state().next_offsets() == {("a", 0): 20, ("a", 1): 7}


def test_cli_summary_line_and_user_errors(tmp_path):
    log_dir, out = tmp_path / "log", tmp_path / "out"
    make_log(log_dir)
    progress_dir = out / "_minikafka" / "progress"  # as written before topic ids: still honoured
    progress_dir.mkdir(parents=True)
    (progress_dir / "a-0").write_text("20\n")
    (progress_dir / "a-1").write_text("7\n")
    done = run_cli("export", "--log-dir", str(log_dir), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("minikafka export: 0 segments, 0 records")
    # Never silently nothing: the records of the active segments (a-0: 3, a-1: 2) are counted.
    assert done.stderr.strip().splitlines()[-2].startswith(
        "minikafka export: note: 5 records in 2 partitions are in active segments, exported once those close")

    missing = run_cli("export", "--log-dir", str(tmp_path / "nope"), "--out", str(out))
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"minikafka export: error: log directory '{tmp_path / 'nope'}' does not exist"
    a_file = tmp_path / "a-file"
    a_file.write_text("not a log dir")
    not_a_dir = run_cli("export", "--log-dir", str(a_file), "--out", str(out))
    assert not_a_dir.returncode == 2
    assert not_a_dir.stderr.strip() == f"minikafka export: error: log directory '{a_file}' is not a directory"

    bad_topic = run_cli("export", "--log-dir", str(log_dir), "--out", str(out), "--topic", "zzz")
    assert bad_topic.returncode == 2
    assert bad_topic.stderr.strip() == f"minikafka export: error: topic 'zzz' not found in {log_dir}"

    bad_master = run_cli("export", "--log-dir", str(log_dir), "--out", str(out), "--master", "locl[2]")
    assert bad_master.returncode == 2
    assert bad_master.stderr.strip() == ("minikafka export: error: 'locl[2]' is not a Spark master URL "
                                         "(local[*], local[N], spark://HOST:PORT, k8s://HOST:PORT or yarn)")


def test_busy_output_directory(tmp_path):
    log_dir, out = tmp_path / "log", tmp_path / "out"
    make_log(log_dir)
    holder = ExportProgress(out)
    holder.lock()
    try:
        busy = run_cli("export", "--log-dir", str(log_dir), "--out", str(out))
    finally:
        holder.unlock()
    assert busy.returncode == 2
    assert "another export is running" in busy.stderr


def test_ctrl_c_during_the_spark_job_is_one_line_and_records_nothing(tmp_path):
    """SIGINT while Spark writes: the job is cancelled, the command says so in one line and
    exits 130, with no traceback (PySpark's own handler re-entered the pending Py4J call,
    which logged tracebacks, and the KeyboardInterrupt ended in one), nothing is in place or
    recorded, and the output directory is not left locked."""
    log_dir, out = tmp_path / "log", tmp_path / "out"
    # Enough closed segments that one Spark task at a time is still busy when SIGINT comes.
    write_segments(log_dir, "a", 0, [segment(first, 500) for first in range(0, 30_500, 500)])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    exporting = subprocess.Popen([sys.executable, "-c", LAUNCHER, "export", "--log-dir", str(log_dir),
                                  "--out", str(out), "--master", "local[1]"],
                                 stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    deadline = time.monotonic() + 180
    while not list((out / "_minikafka" / "staging").glob("*/_temporary")):  # the write job has begun
        assert time.monotonic() < deadline and exporting.poll() is None
        time.sleep(0.05)
    exporting.send_signal(signal.SIGINT)
    _, err = exporting.communicate(timeout=120)
    assert exporting.returncode == 130, err
    assert "Traceback" not in err and "Exception" not in err, err
    assert err.strip().splitlines()[-1] == ("minikafka export: interrupted: segments not yet recorded as "
                                            "exported are exported by the next run")
    assert not list(out.glob("a/**/*.parquet"))
    assert ExportProgress(out).state().next_offsets() == {}
    store = ExportProgress(out)
    store.lock()  # released
    store.unlock()


def test_v2_and_mixed_segments_are_exported_with_their_headers(spark, tmp_path):
    from .test_segment_reader import v2_and_mixed_segment

    log_dir, out = tmp_path / "log", tmp_path / "out"
    data, rows_expected = v2_and_mixed_segment()
    last = rows_expected[-1][0]
    write_segments(log_dir, "h", 0, [(0, data), (last + 1, build_message_set([(None, b"x", 1)], base_offset=last + 1))])
    summary = export(lambda: spark, [log_dir], out)
    assert (summary.segments, summary.records) == (1, len(rows_expected))
    rows = sorted((row for _, row in exported(out)), key=lambda row: row["offset"])
    assert [(r["offset"], r["key"], r["value"], r["timestampType"],
             None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]]) for r in rows] == [
        (offset, key, value, kind, headers) for offset, key, value, _, kind, headers in rows_expected]
    assert read_exported(spark, out).count() == len(rows_expected)  # the Kafka schema, headers left out
