"""The ``minikafka`` command: ``serve`` and ``healthcheck`` here, ``export`` and ``replay`` from
the export package.

``minikafka serve`` runs one broker in the foreground. When it accepts connections it prints
exactly one line to stdout::

    minikafka ready: bootstrap.servers=HOST:PORT log.dirs=PATH

(preceded, with ``--test-control``, by the line that announces the test-control port, see
``broker/control.py``).

SIGINT or SIGTERM shut it down cleanly (checkpoints and the clean-shutdown marker are written,
so the next start needs no recovery). Anything that stops it from starting (a bad flag, a
bad config key or value, a busy port, an unusable log dir) is reported as one line on stderr
with a non-zero exit status, never a traceback. Logs go to stderr.
"""

from __future__ import annotations

import gc
import logging
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:
    import argparse

EXIT_USAGE = 2
EXIT_STARTUP = 1
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


class _BadValue(ValueError):
    """An option value a converter refuses; the message says why (argparse prints it)."""


def _parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise _BadValue(f"{text!r} is not key=value")
    return key.strip(), value


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise _BadValue(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise _BadValue(f"port {port} is out of range 0-65535")
    return port


class _Option(NamedTuple):
    """One ``serve`` option, as ``add_argument`` takes it."""

    flag: str
    help: str
    convert: Callable[[str], Any] | None = None  # None: the text itself
    action: str = "store"  # or "store_true", "append"
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    exclusive: bool = False  # one of the mutually exclusive data-directory options

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")


# The ``serve`` options: build_parser gives them to argparse, and _plain_serve_args reads an
# ordinary ``serve`` command line with them without argparse, whose import and parser cost a
# broker ~3 ms of its start (mostly gettext looking up translations of argparse's texts).
_SERVE_OPTIONS = (
    _Option("--host", "listen address (default 127.0.0.1; 0.0.0.0 for every IPv4 interface, '' for every interface)"),
    _Option("--port", "listen port (default 9092; 0 picks a free port)", _port),
    _Option("--log-dir", "data directory (default ./minikafka-data)", Path, exclusive=True),
    _Option("--ephemeral", "keep data in a temporary directory removed on exit", action="store_true",
            default=False, exclusive=True),
    _Option("--config", "a server.properties-style file with Kafka config names", Path, metavar="FILE"),
    _Option("--override", "set a config key (repeatable)", _parse_override, action="append", default=(),
            metavar="KEY=VALUE"),
    _Option("--zookeeper", "join the cluster coordinated by this ZooKeeper (config key zookeeper.connect)",
            metavar="HOST:PORT[/CHROOT]"),
    _Option("--broker-id", "this broker's id in the cluster (config key broker.id)", int, metavar="N"),
    _Option("--export-to", "hand closed segments to the Spark exporter in DIR (config key minikafka.export.dir)",
            Path, metavar="DIR"),
    _Option("--export-master", "Spark master URL for the exporter (default local[*]; config key "
            "minikafka.export.master)", metavar="URL"),
    _Option("--test-control", "for tests: open a control port on 127.0.0.1 (announced on stdout) through "
            "which errors and delays can be injected (config key minikafka.test.control.port)",
            action="store_true", default=False),
    _Option("--log-level", "stderr log level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")),
)


def _for_argparse(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """``convert`` with its refusals in argparse's terms (it then prints their message)."""
    import argparse

    def checked(text: str) -> Any:
        try:
            return convert(text)
        except _BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    checked.__name__ = convert.__name__  # argparse names the type in other errors
    return checked


def _plain_serve_args(argv: list[str]) -> SimpleNamespace | None:
    """What ``build_parser().parse_args(argv)`` returns for a ``serve`` command line made only
    of the options' full names, each value a separate word or after ``=`` and not looking like
    an option, every value accepted, and at most one data-directory option; None for any other
    command line, which argparse then reads (and reports the mistakes in)."""
    if not argv or argv[0] != "serve":
        return None
    options = {option.flag: option for option in _SERVE_OPTIONS}
    values = {option.dest: list(option.default) if option.action == "append" else option.default
              for option in _SERVE_OPTIONS}
    exclusive_given = 0
    words = iter(argv[1:])
    for word in words:
        flag, equals, text = word.partition("=")
        option = options.get(flag)
        if option is None:  # --help, an abbreviation, a typo, a stray word
            return None
        exclusive_given += option.exclusive
        if option.action == "store_true":
            if equals:
                return None
            values[option.dest] = True
            continue
        if not equals:
            text = next(words, None)
            if text is None or text.startswith("-"):
                return None
        try:
            value = option.convert(text) if option.convert is not None else text
        except ValueError:
            return None
        if option.choices is not None and value not in option.choices:
            return None
        if option.action == "append":
            values[option.dest].append(value)
        else:
            values[option.dest] = value
    if exclusive_given > 1:
        return None
    return SimpleNamespace(command="serve", func=_serve_command, **values)


# Subcommands defined here; the others live in modules that import what they need (SCRAM's
# hashes, ACLs, subprocess handling, the export package), which a broker never needs.
_OWN_COMMANDS = ("serve", "healthcheck")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``minikafka`` parser. With ``command`` one of this module's own subcommands (the
    first word of the command line), the other subcommands' modules are not imported: only
    ``minikafka --help`` and those subcommands themselves need them."""
    import argparse

    class _ArgumentParser(argparse.ArgumentParser):
        """argparse that reports a bad command line as one line (no usage dump)."""

        def error(self, message: str):  # noqa: D401 - argparse API
            self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")

    parser = _ArgumentParser(prog="minikafka",
                             description="A Kafka-compatible mini-broker in Python.")
    parser.add_argument("--version", action="version", version=f"minikafka {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND",
                                       parser_class=_ArgumentParser)
    subparsers.required = True

    serve = subparsers.add_parser(
        "serve", help="run a broker in the foreground",
        description="Run a broker. Config keys use Kafka's names (see README); precedence, "
                    "lowest first: defaults, --config, --override, --host/--port/--log-dir.")
    data = serve.add_mutually_exclusive_group()
    for option in _SERVE_OPTIONS:
        settings: dict[str, Any] = {"help": option.help, "action": option.action}
        if option.convert is not None:
            settings["type"] = _for_argparse(option.convert)
        if option.default is not None:
            settings["default"] = list(option.default) if option.action == "append" else option.default
        if option.metavar is not None:
            settings["metavar"] = option.metavar
        if option.choices is not None:
            settings["choices"] = list(option.choices)
        (data if option.exclusive else serve).add_argument(option.flag, **settings)
    serve.set_defaults(func=_serve_command)

    if command not in _OWN_COMMANDS:
        from minikafka.broker.acls_cli import register as register_acls
        from minikafka.broker.cluster_cli import register as register_cluster
        from minikafka.broker.users_cli import register as register_users

        register_cluster(subparsers)
        register_users(subparsers)
        register_acls(subparsers)

    health = subparsers.add_parser(
        "healthcheck", help="exit 0 if a broker answers Metadata with brokers and a controller",
        description="Connect to a broker and make one Kafka Metadata round trip (what the "
                    "Docker image's HEALTHCHECK runs): exit 0 when it names brokers and a "
                    "controller (a cluster broker does once the controller has described the "
                    "cluster to it), 1 otherwise, with one line on stderr saying why.")
    health.add_argument("--bootstrap", default="127.0.0.1:9092", metavar="HOST:PORT",
                        help="the broker to ask (default 127.0.0.1:9092)")
    health.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="give up after this long without an answer (default 5)")
    health.set_defaults(func=_healthcheck_command)

    if command in _OWN_COMMANDS:
        return parser
    try:
        from minikafka.export.cli import register
    except ModuleNotFoundError as exc:
        if exc.name not in ("minikafka.export.cli", "minikafka.export"):
            raise
    else:
        register(subparsers)
    return parser


def _healthcheck_command(args: argparse.Namespace) -> int:
    from minikafka.broker.blocking_client import kafka_request
    from minikafka.protocol.apis import ApiKey
    from minikafka.protocol.errors import ProtocolError

    try:
        # Metadata, not only ApiVersions: a cluster broker answers it once the controller has
        # described the cluster to it (until then it holds the request), so "healthy" means
        # clients are given brokers and a controller, as the ready line does.
        answer = kafka_request(args.bootstrap, ApiKey.METADATA, 1, {"topics": []}, timeout=args.timeout,
                               client_id="minikafka-healthcheck")
    except (OSError, ValueError, ProtocolError) as exc:
        print(f"minikafka healthcheck: error: {args.bootstrap}: {exc}", file=sys.stderr)
        return 1
    if not answer.brokers or answer.controller_id < 0:
        print(f"minikafka healthcheck: error: {args.bootstrap}: Metadata names no brokers or no controller",
              file=sys.stderr)
        return 1
    return 0


def _serve_command(args: argparse.Namespace) -> int:
    # Start-up makes some 30,000 objects that live as long as the process (trio's and our
    # modules, classes, codecs) and little garbage; the cyclic collector would walk them all
    # over and over while they are made (~5 ms of a ~130 ms start, a full pass more during the
    # first requests). It is off until the ready line, which freezes them out of its sight
    # (_collect_from_now_on) for good.
    gc.disable()
    try:
        return _serve(args)
    finally:
        gc.enable()


def _collect_from_now_on() -> None:
    """At the ready line: what start-up made stays for the process's life, so the collector
    leaves it out of every later pass (``gc.freeze``) and runs again for what comes next.
    Start-up's few garbage cycles are frozen with it, a bounded one-off."""
    gc.freeze()
    gc.enable()


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from minikafka.broker.config import BrokerConfig, ConfigError
    from minikafka.broker.server import BrokerStartupError

    ephemeral_dir = Path(tempfile.mkdtemp(prefix="minikafka-")) if args.ephemeral else None
    try:
        overrides = dict(args.override)
        if args.zookeeper is not None:
            overrides["zookeeper.connect"] = args.zookeeper
        if args.broker_id is not None:
            overrides["broker.id"] = str(args.broker_id)
        if args.export_to is not None:
            overrides["minikafka.export.dir"] = str(args.export_to)
        if args.export_master is not None:
            overrides["minikafka.export.master"] = args.export_master
        if args.test_control:
            overrides.setdefault("minikafka.test.control.port", "0")
        config = BrokerConfig.from_sources(
            config_file=args.config, overrides=overrides, host=args.host, port=args.port,
            log_dir=ephemeral_dir if ephemeral_dir is not None else args.log_dir)
        import trio

        _raise_open_file_limit()
        try:
            trio.run(_run_until_signalled, config)
        except BaseExceptionGroup as group:
            # trio wraps what a nursery's task raises in an exception group; a start-up error
            # (busy port, unusable log dir) is one exception and gets its one line below.
            raise _sole_exception(group) from None
    except ConfigError as exc:
        print(f"minikafka serve: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokerStartupError as exc:
        print(f"minikafka serve: error: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    except OSError as exc:
        print(f"minikafka serve: error: {exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}",
              file=sys.stderr)
        return EXIT_STARTUP
    finally:
        if ephemeral_dir is not None:
            shutil.rmtree(ephemeral_dir, ignore_errors=True)
    return 0


def _raise_open_file_limit() -> None:
    """Lift the soft open-file limit to the hard one, as the JVM does for Kafka (MaxFDLimit).

    Every active partition holds three descriptors (its log and its two mapped indexes) and
    every closed segment one, so a laptop's default soft limit of 1024 runs out at some 300
    partitions, well below what the user may allow without being root."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An unlimited hard limit (macOS) is not a valid soft one; OPEN_MAX (10240) is.
    target = 10240 if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        logging.getLogger(__name__).warning("cannot raise the open-file limit from %d to %d: %s",
                                            soft, target, exc)
        return
    logging.getLogger(__name__).info("raised the open-file limit from %d to %d", soft, target)


def _sole_exception(error: BaseException) -> BaseException:
    """The one exception inside nested single-member exception groups, else ``error`` itself."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


async def _run_until_signalled(config) -> None:
    """Serve until SIGINT/SIGTERM, which may also arrive during startup (a long recovery)."""
    import trio

    from minikafka.broker.config import host_port
    from minikafka.broker.server import Broker

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        broker = Broker(config)
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    logging.getLogger(__name__).info("%s received, shutting down",
                                                     signal.Signals(signum).name)
                    # A second signal stops at once, even while leaderships are being moved.
                    with trio.CancelScope() as preparing:
                        async def second_signal() -> None:
                            async for _ in signals:
                                preparing.cancel()
                                return

                        async with trio.open_nursery() as waiting:
                            waiting.start_soon(second_signal)
                            await broker.prepare_shutdown()
                            waiting.cancel_scope.cancel()
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            host, port = await nursery.start(broker.serve)
            if broker.control_address is not None:
                from minikafka.broker.control import ANNOUNCEMENT

                control_host, control_port = broker.control_address
                print(ANNOUNCEMENT.format(host=control_host, port=control_port), flush=True)
            if len(broker.endpoints) > 1:
                for name, (listener_host, listener_port) in broker.endpoints.items():
                    print(f"minikafka listener: {name}://{host_port(listener_host, listener_port)}", flush=True)
            log_dirs = ",".join(str(path) for path in config.log_dirs)
            print(f"minikafka ready: bootstrap.servers={host_port(host, port)} log.dirs={log_dirs}", flush=True)
            _collect_from_now_on()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("minikafka")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = _plain_serve_args(argv)
        if args is None:
            args = build_parser(argv[0] if argv else None).parse_args(argv)
        return args.func(args)
    except KeyboardInterrupt:
        # Ctrl-C outside serve (which shuts down cleanly on it): a prompt, a ZooKeeper call,
        # or the command line still being read.
        command = argv[0] if argv and not argv[0].startswith("-") else "command"
        print(f"\nminikafka {command}: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
