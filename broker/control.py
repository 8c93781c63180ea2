"""The test-control channel: how a test reaches a broker's :class:`FaultInjector`.

It is a TCP port on 127.0.0.1, separate from the Kafka listener, opened only when the broker
is started with ``minikafka.test.control.port`` (``minikafka serve --test-control`` picks a
free one). ``minikafka serve`` announces it on stdout, before its ready line::

    minikafka test control: 127.0.0.1:PORT

The protocol is one JSON object per line each way, so ``nc`` will do::

    {"op": "inject", "api": "Produce", "errors": ["NOT_LEADER_FOR_PARTITION", 6],
     "topic": null, "partition": null, "ms": 0}
    {"op": "delay", "api": "Fetch", "ms": 500, "count": 1, "topic": null, "partition": null}
    {"op": "drop_response", "api": "Produce", "count": 1, "topic": null, "partition": null}
    {"op": "clear", "api": null}
    {"op": "status"}                -> {"ok": true, "pending": [...], "served": [...]}

Every answer has ``"ok"``; a refused command gets ``{"ok": false, "error": "..."}`` and the
connection stays usable. Nothing a client sends here can stop the broker: a bad line is
answered, an over-long one closes that connection.

Tests reach it through :class:`minikafka.testing.control.ControlClient`; the server side is
here, beside the broker that serves it, because ``minikafka serve`` must never import the test
harness.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import trio

from minikafka.broker.fault_injection import FaultError, FaultInjector
from minikafka.broker.server import BrokerStartupError

logger = logging.getLogger(__name__)

CONTROL_HOST = "127.0.0.1"
MAX_LINE = 65536
# What `minikafka serve` prints; minikafka.testing's CONTROL_LINE parses it.
ANNOUNCEMENT = "minikafka test control: {host}:{port}"


def run_command(injector: FaultInjector, command: Any) -> dict:
    """Carry out one decoded command; the answer to send back."""
    if not isinstance(command, dict):
        raise FaultError("send a JSON object such as {\"op\": \"status\"}")
    op = command.get("op")
    args = {key: value for key, value in command.items() if key != "op"}

    def only(*allowed: str) -> None:
        unknown = sorted(set(args) - set(allowed))
        if unknown:
            raise FaultError(f"{op}: unknown field(s) {', '.join(unknown)}")

    if op == "inject":
        only("api", "errors", "topic", "partition", "ms")
        injector.inject(args.get("api"), args.get("errors"), topic=args.get("topic"),
                        partition=args.get("partition"), delay_ms=args.get("ms", 0))
        return {"ok": True}
    if op == "delay":
        only("api", "ms", "count", "topic", "partition")
        injector.delay(args.get("api"), args.get("ms"), count=args.get("count", 1),
                       topic=args.get("topic"), partition=args.get("partition"))
        return {"ok": True}
    if op == "drop_response":
        only("api", "count", "topic", "partition")
        injector.drop_responses(args.get("api"), count=args.get("count", 1), topic=args.get("topic"),
                                partition=args.get("partition"))
        return {"ok": True}
    if op == "clear":
        only("api")
        return {"ok": True, "cleared": injector.clear(args.get("api"))}
    if op == "status":
        only()
        return {"ok": True, "pending": injector.pending(), "served": list(injector.served)}
    raise FaultError(f"unknown op {op!r} (inject, delay, drop_response, clear, status)")


async def serve_control(injector: FaultInjector, port: int = 0, *,
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve the control channel on 127.0.0.1:``port`` until cancelled;
    ``task_status.started((host, port))`` once listening."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=CONTROL_HOST)
    except OSError as exc:
        raise BrokerStartupError(f"cannot open the test control port {CONTROL_HOST}:{port}: "
                                 f"{exc.strerror or exc}") from None
    bound = listeners[0].socket.getsockname()
    logger.warning("test control enabled on %s:%d: clients there can fail and delay requests",
                   bound[0], bound[1])

    async def handle(stream: trio.SocketStream) -> None:
        try:
            await _serve_connection(injector, stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        except Exception:  # a bug here must not take the broker down
            logger.exception("test control connection failed")
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        task_status.started((bound[0], bound[1]))
        await trio.serve_listeners(handle, listeners, handler_nursery=nursery)


async def _serve_connection(injector: FaultInjector, stream: trio.SocketStream) -> None:
    buffer = b""
    while True:
        data = await stream.receive_some(MAX_LINE)
        if not data:
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                await stream.send_all(_answer(injector, line) + b"\n")
        if len(buffer) > MAX_LINE:
            await stream.send_all(_encode({"ok": False, "error": f"line longer than {MAX_LINE} bytes"}) + b"\n")
            return


def _answer(injector: FaultInjector, line: bytes) -> bytes:
    try:
        command = json.loads(line)
    except ValueError as exc:
        return _encode({"ok": False, "error": f"not JSON: {exc}"})
    try:
        return _encode(run_command(injector, command))
    except FaultError as exc:
        return _encode({"ok": False, "error": str(exc)})


def _encode(answer: dict) -> bytes:
    return json.dumps(answer, separators=(",", ":")).encode()

