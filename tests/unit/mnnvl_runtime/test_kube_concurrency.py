"""The client's `a*` calls run on a pool of its own, large enough for many requests in flight at once."""

from __future__ import annotations

import asyncio
import contextvars
import pathlib
import threading
from typing import Any

from mnnvl_runtime import kube

from . import fakes

CALLER = contextvars.ContextVar("CALLER", default="")
KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_more_calls_run_at_once_than_asyncios_default_pool_has_threads() -> None:
    at_once = 40  # asyncio's default pool has min(32, cpus + 4) threads: this many would never meet
    meeting = threading.Barrier(at_once, timeout=fakes.PATIENCE)
    seen: list[tuple[str, str]] = []
    subject = kube.Kube(None, field_manager="mnnvl-lws", max_workers=at_once)  # type: ignore[arg-type]

    def request(method: str, path: str, **_: Any) -> kube.Object:
        meeting.wait()  # breaks (and fails every call) unless all of them are running at the same time
        seen.append((threading.current_thread().name, CALLER.get()))
        return {"path": path}

    subject.request = request  # type: ignore[method-assign]

    async def scenario() -> list[kube.Object]:
        CALLER.set("reconciler")
        return await asyncio.gather(*(subject.arequest("GET", f"/api/v1/{n}") for n in range(at_once)))

    assert [found["path"] for found in asyncio.run(scenario())] == [f"/api/v1/{n}" for n in range(at_once)]
    assert {caller for _, caller in seen} == {"reconciler"}  # the caller's context goes along, as with to_thread
    assert all(name.startswith("mnnvl-lws") for name, _ in seen)


def test_the_connection_pool_holds_as_many_connections_as_requests_may_be_in_flight(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    api = kube.load_api_client(config)
    assert api.configuration.connection_pool_maxsize == kube.MAX_CONCURRENT_REQUESTS
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == kube.MAX_CONCURRENT_REQUESTS
    assert kube.Kube(api, field_manager="mnnvl-lws").max_workers == kube.MAX_CONCURRENT_REQUESTS
