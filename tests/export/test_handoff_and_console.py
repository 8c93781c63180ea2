"""ExportHandoff without a broker (veto, queueing from threads, the exporter process loop),
the progress bar and summary line, and replay's user errors and Ctrl-C."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trio

from minikafka.export.console import ProgressBar, summary_line
from minikafka.export.handoff import ExportHandoff
from minikafka.export.progress import ExportProgress
from minikafka.storage import SegmentInfo, new_topic_id

from .conftest import plain_segment, write_segments

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = "import sys; from minikafka.broker.cli import main; sys.exit(main())"


def info(topic: str, base: int, next_offset: int, topic_id: str | None = None) -> SegmentInfo:
    return SegmentInfo(topic, 0, base, next_offset, Path(f"/nowhere/{base:020d}.log"), 100, -1, True, topic_id)


def test_retention_veto_follows_recorded_progress(tmp_path):
    ExportProgress(tmp_path).record("t", 0, 10, 1, None)
    handoff = ExportHandoff(tmp_path, [tmp_path / "log"])
    assert handoff.may_delete(info("t", 0, 10))
    assert not handoff.may_delete(info("t", 10, 20))
    assert not handoff.may_delete(info("other", 0, 5))  # never exported
    assert handoff.may_delete(info("__consumer_offsets", 0, 5))  # internal: not exported, not held


def test_retention_veto_holds_a_recreated_topic_until_its_own_export(tmp_path):
    """Progress counts for the incarnation (topic id) it was recorded for: the old topic's
    offsets never let retention delete a topic created again under the same name."""
    old, new = new_topic_id(), new_topic_id()
    legacy = tmp_path / "_minikafka" / "progress"
    legacy.mkdir(parents=True)
    (legacy / "t-0").write_text("10\n")  # written before topic ids: the first id met adopts it
    assert ExportHandoff(tmp_path, []).may_delete(info("t", 0, 10, old))
    store = ExportProgress(tmp_path)
    store.record_incarnation("t", old, 1)
    store.record("t", 0, 10, 1, old)
    handoff = ExportHandoff(tmp_path, [])
    assert handoff.may_delete(info("t", 0, 10, old))
    assert not handoff.may_delete(info("t", 0, 10, new))  # same offsets, another topic
    assert not handoff.may_delete(info("t", 0, 5, new))
    store.record_incarnation("t", new, 2)
    store.record("t", 0, 5, 2, new)
    handoff._reload_progress()
    assert handoff.may_delete(info("t", 0, 5, new))
    assert not handoff.may_delete(info("t", 5, 10, new))
    assert not handoff.may_delete(info("t", 0, 5, old))  # the old one's progress is gone with it


def test_segment_closed_from_threads_does_not_block(tmp_path):
    handoff = ExportHandoff(tmp_path, [tmp_path / "log"])
    threads = [threading.Thread(target=handoff.segment_closed, args=(info("t", i, i + 1),)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert not any(t.is_alive() for t in threads)
    assert len(handoff._pending) == 20


async def test_run_spawns_the_exporter_and_reloads_progress(tmp_path):
    """Nothing is closed yet, so the exporter process starts no Spark and records nothing;
    after a segment closes and is recorded elsewhere, the veto lifts on the next run."""
    log_dir, out = tmp_path / "log", tmp_path / "out"
    write_segments(log_dir, "t", 0, [plain_segment(0, 3)])
    handoff = ExportHandoff(out, [log_dir], batch_delay=0.05)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handoff.run)
        with trio.fail_after(60):
            while handoff.runs < 1:
                await trio.sleep(0.05)
        assert not handoff.may_delete(info("t", 0, 3))
        ExportProgress(out).record("t", 0, 3, 1, None)
        handoff.segment_closed(info("t", 0, 3))
        with trio.fail_after(60):
            while handoff.runs < 2:
                await trio.sleep(0.05)
        assert handoff.may_delete(info("t", 0, 3))
        handoff.close()
    assert handoff.runs == 2


def test_progress_bar_draws_only_when_enabled():
    shown = io.StringIO()
    bar = ProgressBar("export", 4, "segments", stream=shown, enabled=True)
    bar.update(2)
    bar.finish()
    assert "[###############---------------] 2/4 segments" in shown.getvalue()
    assert shown.getvalue().endswith("4/4 segments\n")
    hidden = io.StringIO()  # not a TTY: no bar by default
    quiet = ProgressBar("export", 4, "segments", stream=hidden)
    quiet.update(3)
    quiet.finish()
    assert hidden.getvalue() == ""


def test_summary_line():
    assert summary_line("export", segments=3, records=10, bytes_read=1_200_000, seconds=4.04) == \
        "minikafka export: 3 segments, 10 records, 1.2 MB read, 4.0 s"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", LAUNCHER, *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_serve_refuses_a_malformed_export_master(tmp_path):
    """Refused at start-up, in one line, whether from the flag or the config key; not as an
    exporter failing (and retried) much later while retention waits. A master without an
    export dir is refused too, not ignored."""
    flag = run_cli("serve", "--ephemeral", "--port", "0", "--export-to", str(tmp_path / "out"),
                   "--export-master", "locl[2]")
    assert flag.returncode == 2
    assert flag.stderr.strip() == ("minikafka serve: error: minikafka.export.master: 'locl[2]' is not a Spark "
                                   "master URL (local[*], local[N], spark://HOST:PORT, k8s://HOST:PORT or yarn)")
    key = run_cli("serve", "--ephemeral", "--port", "0", "--export-to", str(tmp_path / "out"),
                  "--override", "minikafka.export.master=spark:/host")
    assert key.returncode == 2
    assert key.stderr.strip().startswith("minikafka serve: error: minikafka.export.master: 'spark:/host' is not")
    assert len(key.stderr.strip().splitlines()) == 1
    alone = run_cli("serve", "--ephemeral", "--port", "0", "--export-master", "local[2]")
    assert alone.returncode == 2
    assert alone.stderr.strip() == ("minikafka serve: error: minikafka.export.master: set without "
                                    "minikafka.export.dir (serve --export-to DIR), so nothing would be exported")


def test_replay_user_errors(tmp_path):
    missing = run_cli("replay", "--from", str(tmp_path), "--topic", "t", "--bootstrap", "127.0.0.1:1")
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"minikafka replay: error: no export of topic 't' in {tmp_path}"


def test_replay_to_an_unreachable_broker_is_a_replay_error(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from minikafka.export.replay import ReplayError, replay
    from minikafka.export.segment_reader import ARROW_SCHEMA

    day = tmp_path / "t" / "dt=2025-11-22"
    day.mkdir(parents=True)
    row = {"key": b"k", "value": b"v", "topic": "t", "partition": 0, "offset": 0,
           "timestamp": 1_763_769_600_000_000, "timestampType": 0}
    pq.write_table(pa.Table.from_pylist([row], ARROW_SCHEMA), day / f"1_0_{0:020d}.parquet")
    with pytest.raises(ReplayError, match="cannot reach a broker at 127.0.0.1:1"):
        replay(tmp_path, "t", "127.0.0.1:1", progress=False, timeout=2)


def test_ctrl_c_stops_a_replay_and_says_what_was_produced(tmp_path, minikafka_broker):
    """SIGINT in the middle of a replay: one line saying how many records reached the broker,
    exactly as many as the topic holds (the first ones, in order), exit status 130, no
    traceback. (Raised as KeyboardInterrupt inside a delivery callback, confluent-kafka's
    poll lost it and failed with a SystemError.)"""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from confluent_kafka import Consumer, TopicPartition

    from minikafka.export.segment_reader import ARROW_SCHEMA

    # Far more than one replay can produce before the broker is paused below (300,000 take
    # about 2 s).
    total = 1_000_000
    day = tmp_path / "t" / "dt=2025-11-22"
    day.mkdir(parents=True)
    pq.write_table(pa.Table.from_pydict({
        "key": [None] * total, "value": [b"v%d" % i for i in range(total)], "topic": ["t"] * total,
        "partition": [0] * total, "offset": list(range(total)),
        "timestamp": [1_763_769_600_000_000 + i * 1000 for i in range(total)], "timestampType": [0] * total,
    }, ARROW_SCHEMA), day / f"1_0_{0:020d}.parquet")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    watcher = Consumer({"bootstrap.servers": minikafka_broker.bootstrap, "group.id": "watcher"})
    # The child first says how SIGINT stands in it (see conftest's _children_take_ctrl_c).
    says_sigint = ("import signal, sys; print('SIGINT:', signal.getsignal(signal.SIGINT), 'blocked:', "
                   "signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []), file=sys.stderr); ")
    replaying = subprocess.Popen([sys.executable, "-c", says_sigint + LAUNCHER, "replay", "--from", str(tmp_path),
                                  "--topic", "t", "--bootstrap", minikafka_broker.bootstrap],
                                 stderr=subprocess.PIPE, text=True, env=env)
    broker_pid = minikafka_broker.process.pid
    try:
        deadline = time.monotonic() + 60
        # The first records on disk, seen in the broker's log dir: a consumer learns of the new
        # topic only at its next metadata refresh, and on loaded CI machines the replay had
        # produced all 300,000 records (in under a second) before it did.
        segments = minikafka_broker.log_dir / "t-0"
        while not any(p.stat().st_size for p in segments.glob("*.log")):
            assert time.monotonic() < deadline and replaying.poll() is None
            time.sleep(0.005)
        os.kill(broker_pid, signal.SIGSTOP)  # the replay cannot finish before the Ctrl-C
        replaying.send_signal(signal.SIGINT)
        time.sleep(0.5)  # let the replay stop producing while requests are in flight
    finally:
        os.kill(broker_pid, signal.SIGCONT)
    _, err = replaying.communicate(timeout=60)
    assert replaying.returncode == 130, err
    assert "Traceback" not in err
    line = re.fullmatch(r"minikafka replay: interrupted: (\d+) of 1000000 records were produced to 't'; "
                        r"a new replay starts again from the first record", err.strip().splitlines()[-1])
    assert line, err
    produced = int(line.group(1))
    assert 0 < produced < total
    assert watcher.get_watermark_offsets(TopicPartition("t", 0), timeout=10, cached=False) == (0, produced)
    watcher.assign([TopicPartition("t", 0, produced - 1)])
    last = watcher.consume(1, timeout=10)
    assert [m.value() for m in last] == [b"v%d" % (produced - 1)]  # the first ones, in order
    watcher.close()
