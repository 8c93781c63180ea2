"""The test side of a broker's test-control channel (``broker/control.py`` serves it): one
JSON command per connection to the port ``minikafka serve --test-control`` announces."""

from __future__ import annotations

import json
import socket
from typing import Any

__all__ = ["ControlClient", "ControlError"]

_CHUNK = 1 << 16


class ControlError(RuntimeError):
    """A fault command the broker refused, or a broker that cannot take one (not started
    with test control, paused, stopped, not answering on its control port)."""


class ControlClient:
    """Blocking client for one broker's control port; one connection per command, so it
    survives broker restarts as long as ``address`` is kept current."""

    def __init__(self, address: tuple[str, int], *, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout

    def request(self, op: str, **fields: Any) -> dict:
        """Send one command; returns the answer, or raises ControlError when refused."""
        payload = json.dumps({"op": op, **fields}).encode() + b"\n"
        try:
            with socket.create_connection(self.address, timeout=self.timeout) as sock:
                sock.sendall(payload)
                reply = b""
                while not reply.endswith(b"\n"):
                    chunk = sock.recv(_CHUNK)
                    if not chunk:
                        break
                    reply += chunk
        except OSError as exc:  # refused, reset, or a timeout (socket.timeout is an OSError)
            raise ControlError(f"test control at {self.address[0]}:{self.address[1]} "
                               f"did not answer {op!r}: {exc}") from None
        if not reply.endswith(b"\n"):
            raise ControlError(f"test control at {self.address[0]}:{self.address[1]} closed "
                               f"the connection without answering {op!r}")
        answer = json.loads(reply)
        if not answer.get("ok"):
            raise ControlError(answer.get("error", "refused"))
        return answer
