"""``minikafka export`` and ``minikafka replay``: subcommands added to the ``minikafka`` CLI.

``broker.cli`` calls ``register(subparsers)``; each subcommand sets ``func`` (``args ->
exit status``). Importing this module does not import pyspark: the JVM starts only when an
export actually has segments to write. User mistakes (a missing log directory, an unknown
topic, a malformed Spark master URL, a busy output directory, an unreachable broker) and a
corrupt segment print one line (after Spark's own log, if Spark had started) and exit with 2.
Ctrl-C prints one line and exits with 130.

``python -m minikafka.export export ...`` runs the same commands (what the broker's hand-off spawns).
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import threading
import time

__all__ = ["register", "main"]

USAGE_ERROR = 2


def register(subparsers) -> None:
    """Add ``export`` and ``replay`` to an ``argparse`` subparsers object."""
    export = _subcommand(
        subparsers, "export", run_export,
        help="export closed log segments to Parquet, exactly once (Secor layout)",
        description="Read closed segments straight from the log directories with Spark and write "
                    "OUT/<topic>/dt=<date>/<generation>_<partition>_<first offset>.parquet. "
                    "Reruns skip what is exported; a crashed run is finished by the next one.")
    export.add_argument("--log-dir", action="append", required=True, metavar="DIR",
                        help="a broker log directory (repeatable)")
    export.add_argument("--out", required=True, metavar="OUT", help="output directory")
    export.add_argument("--topic", action="append", metavar="T",
                        help="export only this topic (repeatable; default: all but internal topics)")
    export.add_argument("--master", default="local[*]",
                        help="Spark master URL: local[*] (default), local[N], spark://HOST:PORT, "
                             "k8s://..., yarn; on a cluster, DIR and OUT must be shared paths")

    replay = _subcommand(
        subparsers, "replay", run_replay,
        help="produce exported records back into a broker (backfill)",
        description="Read OUT/<topic>/ as written by `minikafka export` and produce every record, "
                    "in offset order per partition, to the same partition of a broker, keeping "
                    "keys and timestamps.")
    replay.add_argument("--from", dest="source", required=True, metavar="OUT",
                        help="an export output directory")
    replay.add_argument("--topic", required=True, metavar="T", help="the exported topic to replay")
    replay.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="bootstrap.servers")
    replay.add_argument("--to-topic", metavar="T", help="produce into this topic (default: the same name)")
    replay.add_argument("--generation", type=int, metavar="N",
                        help="replay this incarnation of the topic (default: the newest; a topic "
                             "deleted and created again is exported under the next generation)")


def _subcommand(subparsers, name: str, func, *, help: str, description: str):
    """A long-running subcommand: its parser, with ``--no-progress`` and ``func`` set."""
    parser = subparsers.add_parser(name, help=help, description=description)
    parser.add_argument("--no-progress", action="store_true", help="never draw a progress bar")
    parser.set_defaults(func=func)
    return parser


INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


def _fail(command: str, message: str) -> int:
    print(f"minikafka {command}: error: {message}", file=sys.stderr)
    return USAGE_ERROR


def _interrupted(command: str, message: str) -> int:
    print(f"minikafka {command}: {message}", file=sys.stderr, flush=True)
    return INTERRUPTED


class _SparkInterrupt:
    """Ctrl-C during an export, without Py4J's tracebacks.

    PySpark's own SIGINT handler cancels the jobs from inside the main thread's pending Py4J
    call, whose re-entry fails and logs tracebacks; a KeyboardInterrupt raised inside a Py4J
    call is logged with one too. So SIGINT is held back while the session starts (then raised
    as KeyboardInterrupt in plain Python), and once Spark is up, Ctrl-C cancels its jobs from
    another thread (and keeps cancelling, so a job about to start is cancelled too): the write
    blocked in the main thread fails as a cancelled job. A second Ctrl-C is a plain
    KeyboardInterrupt."""

    def __init__(self, master: str) -> None:
        self.master = master
        self.requested = False

    def session(self):
        from minikafka.export.session import spark_session

        if threading.current_thread() is not threading.main_thread():
            return spark_session(self.master)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            spark = spark_session(self.master)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a held Ctrl-C raises here
        signal.signal(signal.SIGINT, functools.partial(self._cancel, spark.sparkContext))
        return spark

    def _cancel(self, context, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

        def cancel() -> None:
            context.setLogLevel("OFF")  # the cancelled tasks' stack traces are no news
            while True:  # also the job that the main thread may be about to start
                context.cancelAllJobs()
                time.sleep(0.2)

        threading.Thread(target=cancel, daemon=True).start()


def run_export(args) -> int:
    from minikafka.export.session import MissingExtra, require_extra

    try:
        require_extra("pyspark", "pyarrow")
    except MissingExtra as exc:
        return _fail("export", str(exc))
    from minikafka.export.console import summary_line
    from minikafka.export.exporter import export
    from minikafka.export.progress import ExportBusy
    from minikafka.export.session import SparkStartError, check_master

    # Safe at any point, as a kill is: files are renamed into place before their progress is
    # recorded, and the next run redoes whatever was not recorded.
    interrupted = "interrupted: segments not yet recorded as exported are exported by the next run"
    interrupt = _SparkInterrupt(args.master)
    previous_handler = signal.getsignal(signal.SIGINT)
    try:
        check_master(args.master)  # now, not only once there is work for Spark
        summary = export(interrupt.session, args.log_dir, args.out, args.topic,
                         progress=False if args.no_progress else None)
    except (ValueError, ExportBusy, SparkStartError, FileNotFoundError, NotADirectoryError,
            PermissionError) as exc:
        if interrupt.requested:
            return _interrupted("export", interrupted)
        return _fail("export", str(exc))
    except KeyboardInterrupt:
        return _interrupted("export", interrupted)
    except Exception:
        if interrupt.requested:  # the cancelled Spark job
            return _interrupted("export", interrupted)
        raise
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous_handler)
    print(summary_line("export", segments=summary.segments, records=summary.records,
                       files=summary.files, bytes_read=summary.bytes_read,
                       bytes_written=summary.bytes_written, seconds=summary.seconds),
          file=sys.stderr, flush=True)
    return 0


def run_replay(args) -> int:
    from minikafka.export.session import MissingExtra, require_extra

    try:
        require_extra("pyarrow", "confluent_kafka")
    except MissingExtra as exc:
        return _fail("replay", str(exc))
    from minikafka.export.console import summary_line
    from minikafka.export.replay import ReplayError, ReplayInterrupted, replay

    try:
        summary = replay(args.source, args.topic, args.bootstrap, to_topic=args.to_topic,
                         generation=args.generation, progress=False if args.no_progress else None)
    except ReplayInterrupted as exc:
        return _interrupted("replay", str(exc))
    except (ReplayError, ValueError, FileNotFoundError) as exc:
        return _fail("replay", str(exc))
    except KeyboardInterrupt:  # before producing started, or a second Ctrl-C while draining
        return _interrupted("replay", "interrupted")
    print(summary_line("replay", files=summary.files, records=summary.records,
                       bytes_sent=summary.bytes, seconds=summary.seconds),
          file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m minikafka.export``."""
    parser = argparse.ArgumentParser(prog="python -m minikafka.export")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)
