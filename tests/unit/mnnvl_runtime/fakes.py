"""Test doubles for the runtime: one Lease kept in memory as the API server would keep it, and a fake clock."""

from __future__ import annotations

import asyncio
import contextvars
import copy
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

from mnnvl_runtime import kube

T = TypeVar("T")
#: How long a test waits for a condition before failing; generous, since it only bounds a failing test.
PATIENCE = 5.0
#: How long a hung fake request waits to be let go, so a failing test never leaves a thread behind for long.
HANG_LIMIT = 10.0


async def within(awaitable: Awaitable[T]) -> T:
    """`awaitable`'s result, failing the test if the condition it waits for does not come to pass."""
    return await asyncio.wait_for(awaitable, PATIENCE)


class Clock:
    """A monotonic clock that only moves when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class LeaseServer:
    """The Lease endpoints of an API server, for one Lease: GET, POST, PUT with resourceVersion checks, and
    JSON patches with `test` operations. Every request is recorded; requests can be made to hang or fail."""

    field_manager = "mnnvl-test"

    def __init__(self) -> None:
        self.lease: kube.Object | None = None
        self.requests: list[tuple[str, float]] = []
        #: What the test wants to see in order: e.g. "released" when a PATCH gives the Lease up.
        self.journal: list[str] = []
        #: Cleared: every request hangs until it is set again.
        self.answering = threading.Event()
        self.answering.set()
        #: Set: every request fails with this status.
        self.failing: int | None = None
        self._lock = threading.Lock()
        self._version = 0

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = kube.JSON,
        timeout: float = 30.0,
    ) -> kube.Object:
        self.requests.append((method, timeout))
        self.answering.wait(HANG_LIMIT)
        if self.failing is not None:
            raise kube.ApiError(status=self.failing, reason="failing on purpose")
        with self._lock:
            return copy.deepcopy(self._answer(method, body))

    def take_by(self, holder: str) -> None:
        """Another replica writes itself into the Lease."""
        with self._lock:
            assert self.lease is not None
            self._store({**self.lease, "spec": {**self.lease["spec"], "holderIdentity": holder, "renewTime": "x"}})

    @property
    def holder(self) -> str | None:
        return None if self.lease is None else self.lease["spec"].get("holderIdentity")

    def _answer(self, method: str, body: Any) -> kube.Object:
        if method == "GET":
            if self.lease is None:
                raise kube.ApiError(status=404, reason="Not Found")
            return self.lease
        if method == "POST":
            if self.lease is not None:
                raise kube.ApiError(status=409, reason="AlreadyExists")
            return self._store(body)
        if method == "PUT":
            assert self.lease is not None
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                raise kube.ApiError(status=409, reason="Conflict")
            return self._store(body)
        if method == "PATCH":
            assert self.lease is not None
            spec = dict(self.lease["spec"])
            for operation in body:
                field = operation["path"].removeprefix("/spec/")
                if operation["op"] == "test" and spec.get(field) != operation["value"]:
                    raise kube.ApiError(status=422, reason="test failed")
                if operation["op"] == "replace":
                    spec[field] = operation["value"]
            self.journal.append("released" if spec.get("holderIdentity") == "" else "patched")
            return self._store({**self.lease, "spec": spec})
        raise AssertionError(f"unexpected {method}")

    def _store(self, lease: kube.Object) -> kube.Object:
        self._version += 1
        self.lease = {**lease, "metadata": {**lease["metadata"], "resourceVersion": str(self._version)}}
        return self.lease


# --- the generated client's surface that kube.Kube uses, for writes under a permit ------------------------------


class Response:
    def __init__(self, status: int) -> None:
        self.status = status
        self.reason = "OK" if status < 400 else "Service Unavailable"

    def read(self) -> bytes:
        return b"{}"


class RecordingApi:
    """What `kube.Kube` needs of the generated client: records each request sent; `hold` keeps writes on their way
    until set; `statuses` answers the first writes with those statuses (then 200)."""

    def __init__(self, *, statuses: tuple[int, ...] = (), journal: list[str] | None = None) -> None:
        self.sent: list[str] = [] if journal is None else journal
        self.hold = threading.Event()
        self.hold.set()
        self.on_the_way = threading.Event()
        self._statuses = list(statuses)

    def param_serialize(self, *, method: str, resource_path: str, **_: Any) -> tuple[Any, ...]:
        return (method, resource_path, {}, None, None)

    def call_api(self, method: str, url: str, **_: Any) -> Response:
        self.sent.append(f"{method} {url}")
        self.on_the_way.set()
        self.hold.wait(PATIENCE)
        return Response(self._statuses.pop(0) if self._statuses and method != "GET" else 200)


def under(permit: kube.WritePermit) -> contextvars.Context:
    context = contextvars.copy_context()
    context.run(kube.WRITE_PERMIT.set, permit)
    return context
