"""An API server that cannot be reached: every way a call gets no answer is one `kube.ApiError`, and the loops a
controller runs for good (store sync, event posting, Lease election) outlive a period of it.

Against real sockets on 127.0.0.1 (a closed port, a server that resets, closes or cuts its answer short), not a
stand-in for urllib3: what the official client raises on each is exactly what is being tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from mnnvl_runtime import kube, leases, metrics, posting, stores

from . import fakes

#: Each call is tried twice, with almost no back-off, so a failing call costs milliseconds.
ATTEMPTS = 2


def closed_port() -> int:
    """A port nothing listens on: connecting to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def kube_at(port: int, *, attempts: int = ATTEMPTS) -> kube.Kube:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    return kube.Kube(client.ApiClient(configuration), field_manager="mnnvl-test", attempts=attempts, max_backoff=0.01)


@contextlib.contextmanager
def misbehaving(answer: Callable[[socket.socket], None]) -> Iterator[tuple[int, list[int]]]:
    """A server that reads each request and then does `answer` to its connection; yields its port and a list
    holding one entry per connection it accepted."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.05)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            with connection:
                connection.recv(65536)
                answer(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(fakes.PATIENCE)
        server.close()


def reset(connection: socket.socket) -> None:
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST


def hang_up(connection: socket.socket) -> None:
    """Close without a word (the connection is closed when `misbehaving` leaves its `with`)."""


def cut_short(connection: socket.socket) -> None:
    connection.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"items"')


@pytest.mark.parametrize("answer", [reset, hang_up, cut_short], ids=["reset", "closed-without-answer", "cut-short"])
def test_a_broken_connection_is_an_api_error_without_a_status_after_the_retries(
    answer: Callable[[socket.socket], None],
) -> None:
    with misbehaving(answer) as (port, accepted), pytest.raises(kube.ApiError) as raised:
        kube_at(port).request("GET", "/api/v1/pods")
    assert raised.value.status is None
    assert isinstance(raised.value, kube.UnreachableError)
    assert "GET /api/v1/pods: no answer from the API server" in str(raised.value)
    # The bounded retries are kept: ours, each of which urllib3 may try a few times over (its default Retry(3)).
    assert ATTEMPTS <= len(accepted) <= ATTEMPTS * 4


def test_a_refused_connection_is_an_api_error_without_a_status() -> None:
    with pytest.raises(kube.ApiError) as raised:
        kube_at(closed_port()).request("GET", "/api/v1/pods")
    assert raised.value.status is None
    assert "Connection refused" in str(raised.value)


def test_a_call_that_times_out_is_an_api_error_without_a_status() -> None:
    with socket.socket() as silent:  # listens, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        with pytest.raises(kube.ApiError) as raised:
            kube_at(silent.getsockname()[1], attempts=1).request("GET", "/api/v1/pods", timeout=0.2)
    assert raised.value.status is None
    assert "timed out" in str(raised.value)


def test_an_event_is_not_posted_while_the_api_server_refuses_and_nothing_is_raised() -> None:
    involved = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
    event = posting.event_for(involved, reason="Tested", message="m", warning=False, component="mnnvl-test")
    asyncio.run(posting.post(kube_at(closed_port()), event))  # returns: an event is best effort


class Lists(http.server.BaseHTTPRequestHandler):
    """An API server's list of pods holding one pod, at resourceVersion 7."""

    def do_GET(self) -> None:
        pod = {"metadata": {"uid": "u1", "name": "p1", "namespace": "ns", "resourceVersion": "7"}}
        payload = json.dumps({"metadata": {"resourceVersion": "7"}, "items": [pod]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_the_store_sync_outlives_refusals_and_syncs_once_the_api_server_answers() -> None:
    port = closed_port()
    held: dict[str, object] = {}

    def apply(uid: str, body: object) -> list[str]:
        held[uid] = body
        return [uid]

    sync = stores.StoreSync(
        kube_at(port),
        [stores.Mirror(stores.Resource(api_version="v1", plural="pods"), apply)],
        every=0.01,
        touched=lambda _: None,
    )

    def failed_resyncs() -> float:
        return metrics.REGISTRY.get_sample_value("mnnvl_store_resync_errors_total", {"resource": "pods.v1"}) or 0.0

    async def scenario() -> None:
        task = asyncio.create_task(sync.run())
        before = failed_resyncs()
        await fakes.within(_until(lambda: failed_resyncs() >= before + 3 or task.done()))
        assert not task.done(), "the store sync ended on a refused connection"
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Lists)  # the API server is back
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            await fakes.within(sync.synced.wait())
        finally:
            server.shutdown()
            server.server_close()
        assert list(held) == ["u1"]
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def test_the_lease_election_outlives_broken_connections() -> None:
    async def scenario(port: int, accepted: list[int]) -> None:
        elector = leases.LeaderElector(
            leases.single_attempt_client(kube_at(port)),
            namespace="ns",
            name="mnnvl-test",
            holder="replica-a",
            timing=leases.Timing(lease_duration=1.5, renew_deadline=1.0, retry_period=0.01),
        )
        task = asyncio.create_task(elector.run())
        await fakes.within(_until(lambda: len(accepted) >= 3 or task.done()))  # one connection per attempt
        assert not task.done(), "the Lease election ended on a broken connection"
        assert not elector.is_leader
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with misbehaving(reset) as (port, accepted):
        asyncio.run(scenario(port, accepted))


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)
