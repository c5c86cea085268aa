"""The chaos run's stand-in for a webhook Service, against local echo servers: it spreads connections over the
replicas up, holds them when slow, drops them when down."""

from __future__ import annotations

import errno
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from mnnvl_testbed import proxy


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data = self.request.recv(1024)
        address = self.server.server_address
        assert isinstance(address, tuple)
        port: int = address[1]
        self.request.sendall(port.to_bytes(4, "big") + data)


@pytest.fixture
def upstreams() -> Iterator[list[int]]:
    servers = [socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield [server.server_address[1] for server in servers]
    for server in servers:
        server.shutdown()
        server.server_close()


def ask(port: int) -> bytes:
    """Send a call through and read the answer; empty when the connection was dropped (closed or reset)."""
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        try:
            connection.sendall(b"review")
            connection.shutdown(socket.SHUT_WR)
            while chunk := connection.recv(1024):
                answer += chunk
        except OSError as dropped:
            # Closed at once by the proxy: the reset, or our half-close, finds the connection already gone.
            if dropped.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):
                return b""
            raise
    return answer


def test_calls_are_spread_over_the_replicas_up_and_dropped_when_none_is(upstreams: list[int]) -> None:
    up = list(upstreams)
    stand_in = proxy.WebhookProxy(lambda: up, slow_seconds=0.2).start()
    try:
        answered_by = {int.from_bytes(ask(stand_in.port)[:4], "big") for _ in range(4)}
        assert answered_by == set(upstreams)
        assert ask(stand_in.port)[4:] == b"review"
        up.remove(upstreams[0])
        assert {int.from_bytes(ask(stand_in.port)[:4], "big") for _ in range(3)} == {upstreams[1]}
        up.clear()
        assert ask(stand_in.port) == b""
    finally:
        stand_in.stop()


def test_a_down_proxy_drops_every_call_and_a_slow_one_holds_it_first(upstreams: list[int]) -> None:
    stand_in = proxy.WebhookProxy(lambda: upstreams, slow_seconds=0.3).start()
    try:
        stand_in.mode = proxy.DOWN
        assert ask(stand_in.port) == b""
        stand_in.mode = proxy.SLOW
        started = time.monotonic()
        assert ask(stand_in.port)[4:] == b"review"
        assert time.monotonic() - started >= 0.3  # held at least as long as told, then answered
        stand_in.mode = proxy.PASS
        assert ask(stand_in.port)[4:] == b"review"
    finally:
        stand_in.stop()
