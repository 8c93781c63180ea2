"""One Kafka request over a plain blocking socket, for code without an event loop: the
command line (``minikafka healthcheck``, ``minikafka cluster status``) and the test harness.
The protocol layer's client side does the framing; this only moves its bytes."""

from __future__ import annotations

import socket
from typing import Any

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.framing import ClientConnection


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as ``(host, port)``; ValueError if it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def kafka_request(address: str, api_key: int, version: int, body: Any, *, timeout: float = 10.0,
                  client_id: str = "minikafka", plain_login: tuple[str, str] | None = None):
    """Send one request to the broker at ``address`` and return the decoded response body.
    ``plain_login`` = (user, password) first authenticates with SASL PLAIN (SaslHandshake v1,
    SaslAuthenticate v0), for a SASL_PLAINTEXT listener.

    Raises OSError (ConnectionError when the broker closes the connection before answering or
    refuses the login, socket.timeout when it is silent for ``timeout`` seconds), ValueError
    for a bad address, ``ProtocolError`` for an answer that does not decode."""
    connection = ClientConnection(client_id=client_id)
    with socket.create_connection(split_address(address), timeout=timeout) as sock:
        def exchange(api_key: int, version: int, body: Any):
            sock.sendall(connection.send_request(api_key, version, body)[1])
            while (response := connection.next_response()) is None:
                try:
                    data = sock.recv(1 << 16)
                except ConnectionResetError:
                    # A peer that closes with our request unread resets instead: the same answer.
                    data = b""
                if not data:
                    raise ConnectionError("the broker closed the connection")
                connection.receive_data(data)
            return response.body

        if plain_login is not None:
            user, password = plain_login
            for step, api, api_version, request in (
                    ("handshake", ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
                    ("login", ApiKey.SASL_AUTHENTICATE, 0, {"auth_bytes": f"\0{user}\0{password}".encode()})):
                answer = exchange(api, api_version, request)
                if answer.error_code:
                    raise ConnectionError(f"SASL PLAIN {step} as {user!r} refused (error {answer.error_code})")
        return exchange(api_key, version, body)
