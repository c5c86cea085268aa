"""The chaos watcher's streams against a scripted HTTPS API server: list, watch from the list's version, resume a
broken watch from the last version delivered, and re-list only on 410 Gone, telling the watcher what the gap hid.

The real API server cannot be made to expire a watch on demand (it compacts every few minutes), so the wire
protocol is scripted here; the e2e use of the streams is the chaos run itself."""

from __future__ import annotations

import contextlib
import json
import pathlib
import queue
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mnnvl_runtime import certs
from mnnvl_testbed import cluster, invariants, watching

#: A reply: (HTTP status, body lines); a list reply is one JSON line, a watch reply one line per event.
Reply = tuple[int, list[dict[str, Any]]]


def pod(name: str, version: int) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}", "resourceVersion": str(version)},
        "spec": {"nodeName": "node-1", "containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


def bookmark(version: int) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": str(version)}}


def listed(version: int, *items: dict[str, Any]) -> Reply:
    return 200, [{"metadata": {"resourceVersion": str(version)}, "items": list(items)}]


class ScriptedApiServer(ThreadingHTTPServer):
    """Answers each GET with the next scripted reply and records its query; once the script is spent, holds the
    request open until the test ends (a watch with nothing to say)."""

    def __init__(self, context: ssl.SSLContext, script: list[Reply]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.script: queue.Queue[Reply] = queue.Queue()
        for reply in script:
            self.script.put(reply)
        self.queries: list[dict[str, str]] = []
        self.spent = threading.Event()
        self.ended = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedApiServer

    def do_GET(self) -> None:
        self.server.queries.append(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query)))
        try:
            status, lines = self.server.script.get_nowait()
        except queue.Empty:
            self.server.spent.set()
            self.server.ended.wait(10)
            return
        body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def pki(tmp_path: pathlib.Path) -> pathlib.Path:
    directory = tmp_path / "pki"
    directory.mkdir()
    ca = certs.ensure_ca(directory)
    server = certs.KeyPair(directory / "server.crt", directory / "server.key")
    certs.issue(ca, server, common_name="kube-apiserver", hosts=("127.0.0.1",))
    certs.issue(ca, certs.KeyPair(directory / "admin.crt", directory / "admin.key"), common_name="admin", client=True)
    return directory


@contextlib.contextmanager
def serve(pki: pathlib.Path, script: list[Reply]) -> Iterator[tuple[ScriptedApiServer, cluster.Testbed]]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
    context.verify_mode = ssl.CERT_REQUIRED  # the streams present the admin client certificate, as to the testbed
    server = ScriptedApiServer(context, script)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    testbed = cluster.Testbed(
        state_dir=pki.parent,
        kubeconfig=pki.parent / "kubeconfig",
        ca_cert=pki / "ca.crt",
        ports={"kube-apiserver": server.server_address[1]},
        nodes=0,
    )
    try:
        yield server, testbed
    finally:
        server.ended.set()
        server.shutdown()
        server.server_close()


def run_pod_stream(pki: pathlib.Path, script: list[Reply]) -> tuple[list[dict[str, str]], watching.Monitor]:
    """A pod stream, as the chaos run starts it, run until the script is spent; the queries it made."""
    monitor = watching.Monitor(invariants.Watcher(), ignore=lambda violation: False)
    with serve(pki, script) as (server, testbed):
        [stream] = [s for s in watching.streams(testbed, monitor, topologies=False) if s.collection == "/api/v1/pods"]
        stream.start()
        assert server.spent.wait(20), f"the stream stopped asking after {server.queries}"
        stream.stopping.set()
        server.ended.set()
        stream.join(20)
        assert not stream.is_alive()
    assert monitor.watcher.violations == []
    return server.queries, monitor


def test_a_broken_watch_resumes_from_the_last_version_delivered_and_only_410_relists(pki: pathlib.Path) -> None:
    queries, monitor = run_pod_stream(
        pki,
        [
            listed(10, pod("a", 5)),
            # A watch that ends (the API server restarting) after an event and a bookmark: resumed, not re-listed.
            (200, [{"type": "ADDED", "object": pod("b", 11)}, {"type": "BOOKMARK", "object": bookmark(12)}]),
            # The resumed watch is told its version is too old: events since 12 are lost, so re-list.
            (200, [{"type": "ERROR", "object": {"kind": "Status", "code": 410}}]),
            listed(20, pod("b", 11)),
            # A watch refused outright with 410 re-lists too.
            (410, [{"kind": "Status", "code": 410}]),
            listed(21, pod("b", 11)),
        ],
    )

    watches = [(q.get("watch"), q.get("resourceVersion")) for q in queries]
    assert watches == [(None, None), ("1", "10"), ("1", "12"), (None, None), ("1", "20"), (None, None), ("1", "21")]
    assert all(q["allowWatchBookmarks"] == "true" for q in queries if q.get("watch"))
    watcher = monitor.watcher
    assert monitor.relists == 2
    # Pod a vanished in the first gap: gone at the re-list's version; the gaps are (12, 20] and (20, 21].
    assert watcher.pods["uid-a"][-1] == (20, None)
    assert watcher.pods["uid-b"][-1][1] is not None
    assert watcher.pod_gaps == [(12, 20), (20, 21)]
    assert watcher.pods_seen_to == 21


def test_a_failed_list_is_retried_before_anything_is_judged(pki: pathlib.Path) -> None:
    queries, monitor = run_pod_stream(
        pki, [(500, [{"kind": "Status", "code": 500, "message": "etcd paused"}]), listed(7, pod("a", 3))]
    )

    assert [(q.get("watch"), q.get("resourceVersion")) for q in queries] == [(None, None), (None, None), ("1", "7")]
    assert monitor.relists == 0
    assert monitor.watcher.pod_gaps == []
    assert monitor.watcher.pods["uid-a"] == [(3, invariants.pod_view(pod("a", 3)))]
