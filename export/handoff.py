"""Hand-off from the broker to the exporter: ``minikafka serve --export-to DIR``.

The broker's log manager calls ``segment_closed`` whenever a segment stops being the active
one, and asks ``may_delete`` before retention deletes a segment. ``run`` (a task in the
broker's nursery) batches the closed segments and runs the exporter on them in a separate
process (``python -m minikafka.export export ...``), so Spark's JVM and the Parquet writing never
touch the broker's event loop. While the exporter has not recorded a segment as exported,
``may_delete`` vetoes its deletion, so retention never loses a record that export has not
seen. Progress counts for the incarnation it was recorded for only (``export.progress``):
a topic deleted and created again has a new topic id, so the old topic's progress never
lets retention delete the new one's segments. Kafka's internal topics
(``__consumer_offsets``) are not exported and never vetoed.

The exporter process is exactly-once on its own (``export.exporter``): if it fails or the
broker is killed mid-export, the next run finishes the job; failed runs are retried with
exponential back-off. No pyspark import here, but importing this module fails (as
``ModuleNotFoundError``, which the broker reports as a config error at start-up) when the
exporter's packages are missing: otherwise every export would fail and retention would wait
forever.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import trio

from minikafka.export.exporter import internal_topic
from minikafka.export.progress import ExportProgress
from minikafka.export.session import check_master, require_extra

__all__ = ["ExportHandoff"]

logger = logging.getLogger("minikafka.export")


require_extra("pyspark", "pyarrow")


class ExportHandoff:
    """Queue of closed segments, retention veto, and the loop running the exporter process."""

    def __init__(self, out_dir: Path | str, log_dirs, *, master: str = "local[*]",
                 batch_delay: float = 1.0, retry_delay: float = 5.0, max_retry_delay: float = 60.0) -> None:
        check_master(master)  # at the broker's start, not as a failing export much later
        self.out_dir = Path(out_dir)
        self.log_dirs = [Path(d) for d in log_dirs]
        self.master = master
        self.batch_delay = batch_delay
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self.runs = 0  # exporter processes finished successfully
        self._lock = threading.Lock()  # segment_closed / may_delete may come from storage threads
        self._pending: list = []
        self._exported = ExportProgress(self.out_dir).state()
        self._token: trio.lowlevel.TrioToken | None = None
        self._wakeup: trio.Event | None = None
        self._closed = False

    # -- called synchronously by storage ----------------------------------------------------

    def segment_closed(self, segment_info) -> None:
        """Note a newly closed segment; returns at once (the export happens in ``run``)."""
        if internal_topic(segment_info.topic):
            return
        with self._lock:
            if self._closed:
                return
            self._pending.append(segment_info)
            token = self._token
        self._wake_from_any_thread(token)

    def may_delete(self, segment_info) -> bool:
        """Retention veto: True only once every record of the segment is recorded as exported."""
        if internal_topic(segment_info.topic):
            return True
        with self._lock:
            exported = self._exported.exported_up_to(segment_info.topic, segment_info.partition,
                                                     segment_info.topic_id)
        return exported is not None and segment_info.next_offset <= exported

    # -- the export loop ----------------------------------------------------------------------

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _wake_from_any_thread(self, token: trio.lowlevel.TrioToken | None) -> None:
        """Wake ``run`` (if it has started) from storage threads or the event loop alike."""
        if token is None:
            return
        try:
            token.run_sync_soon(self._wake)
        except trio.RunFinishedError:
            pass

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "minikafka.export", "export", "--out", str(self.out_dir),
               "--master", self.master, "--no-progress"]
        for log_dir in self.log_dirs:
            cmd += ["--log-dir", str(log_dir)]
        return cmd

    async def run(self) -> None:
        """Export queued segments in batches until cancelled or closed.

        The first pass runs at once, to catch up on segments that closed while the broker
        (or export) was down.
        """
        self._token = trio.lowlevel.current_trio_token()
        self._wakeup = trio.Event()
        self._wakeup.set()
        delay = self.retry_delay
        while True:
            await self._wakeup.wait()
            if self._closed:
                return
            await trio.sleep(self.batch_delay)  # let segments closing together share one run
            self._wakeup = trio.Event()
            with self._lock:
                batch, self._pending = self._pending, []
            command = self.command()
            logger.info("exporting to %s (%d newly closed segments): %s", self.out_dir, len(batch),
                        shlex.join(command))
            result = await trio.run_process(command, check=False, stdin=subprocess.DEVNULL,
                                            stdout=2)
            self._reload_progress()
            if result.returncode == 0:
                self.runs += 1
                delay = self.retry_delay
                continue
            logger.warning("exporter exited with status %s; retrying in %.0f s", result.returncode, delay)
            await trio.sleep(delay)
            delay = min(delay * 2, self.max_retry_delay)
            self._wakeup.set()

    def _reload_progress(self) -> None:
        exported = ExportProgress(self.out_dir).state()
        with self._lock:
            self._exported = exported

    def close(self) -> None:
        """Stop taking segments; ``run`` returns at its next wake-up."""
        with self._lock:
            self._closed = True
            token = self._token
        self._wake_from_any_thread(token)
