"""The Kubernetes client adapter: JSON in and out over the official client's connection.

Objects stay plain dicts, exactly as the API server sends them, because the decision functions read them
that way. Every call is retried with bounded back-off on throttling (429), server errors (5xx) and broken
connections; conflicts are left to `modify`, which re-reads and recomputes. Whatever stops a call from getting
an answer (refused, reset, timed out, TLS, a truncated body), once the retries are spent, is raised as
`UnreachableError`, an `ApiError` without a status: a caller handles one error type for every way a call can
fail, and a loop that must outlive an API-server restart catches it like any other API error. Writes to shared
objects use server-side apply under the controller's own field manager. The `a*` methods run the blocking client on a
thread pool of the client's own, sized for I/O (not asyncio's default pool of a few threads), so an asyncio
event loop is never blocked and many passes can wait on the API at once; the HTTP connection pool is as large,
so those requests are not queued behind a few connections.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import functools
import http.client
import json
import logging
import pathlib
import re
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, ParamSpec, Protocol, TypeVar

import tenacity
import urllib3
from kubernetes import client, config
from kubernetes.client import exceptions

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"
RETRIED_STATUSES: Final = frozenset({429, 500, 502, 503, 504})
#: API requests one controller process may have in flight at once: threads of a `Kube`'s pool, and HTTP
#: connections kept per host.
MAX_CONCURRENT_REQUESTS: Final = 64
#: Objects per page of a list: a list of thousands of pods is never held (raw and parsed) in memory whole.
LIST_PAGE_SIZE: Final = 500

Object = dict[str, Any]
JsonPatch = list[dict[str, Any]]
ApiError = exceptions.ApiException

log = logging.getLogger(__name__)
Params = ParamSpec("Params")
Result = TypeVar("Result")


#: How a call fails without an answer from the API server: urllib3's errors (MaxRetryError on a refused or reset
#: connection or a timeout, ProtocolError on a body cut short), socket and TLS errors, and http.client's own.
TRANSPORT_ERRORS: Final = (urllib3.exceptions.HTTPError, OSError, http.client.HTTPException)


class UnreachableError(ApiError):
    """No answer from the API server for one call, after the retries: an `ApiError` whose status is None."""

    def __init__(self, method: str, path: str, cause: BaseException) -> None:
        super().__init__(reason=f"{method} {path}: no answer from the API server: {cause}")

    def __str__(self) -> str:
        return str(self.reason)


def status_of(error: BaseException) -> int | None:
    return error.status if isinstance(error, exceptions.ApiException) else None


#: How the API server words a webhook's refusal: `admission webhook "<name>" denied the request: <its message>`.
WEBHOOK_DENIAL: Final = re.compile(r'admission webhook "[^"]+" denied the request')
#: How it words a ValidatingAdmissionPolicy's: `<object> is forbidden: ValidatingAdmissionPolicy '<name>' with
#: binding '<name>' denied request: <its message>`.
POLICY_DENIAL: Final = re.compile(r"ValidatingAdmissionPolicy '[^']+' with binding '[^']+' denied request")


def admission_denial(error: ApiError) -> str | None:
    """The API server's message when an admission webhook or policy refused the request, from the Status it
    answered with; None for any other error (the 403 of RBAC included), so the two are never confused."""
    try:
        status = json.loads(error.body or "")
    except ValueError:
        return None
    message = status.get("message") if isinstance(status, dict) else None
    if not isinstance(message, str):
        return None
    return message if WEBHOOK_DENIAL.match(message) or POLICY_DENIAL.search(message) else None


def _transient(error: BaseException) -> bool:
    return status_of(error) in RETRIED_STATUSES or isinstance(error, TRANSPORT_ERRORS)


def path_of(api_version: str, plural: str, *, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a collection or an object: `/api/v1/...` for core, `/apis/<group>/<version>/...` else."""
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    scoped = f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"
    return f"{scoped}/{name}" if name else scoped


NO_CREDENTIALS = (
    "no Kubernetes credentials: not in a cluster (KUBERNETES_SERVICE_HOST is unset) and no kubeconfig "
    "(set KUBECONFIG, or run in a Pod with a ServiceAccount token)"
)


def _load_in_cluster_or_default(configuration: client.Configuration) -> None:
    """The Pod's ServiceAccount when in a cluster, else the default kubeconfig ($KUBECONFIG or ~/.kube/config)."""
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]


class CredentialsError(RuntimeError):
    """Neither a kubeconfig nor a Pod's ServiceAccount gives this process a way to reach the API server."""


def load_api_client(
    kubeconfig: pathlib.Path | None = None,
    *,
    context: str | None = None,
    max_connections: int = MAX_CONCURRENT_REQUESTS,
) -> client.ApiClient:
    """From a kubeconfig file when given (or $KUBECONFIG), else the in-cluster service account; keeping up to
    `max_connections` connections open, so that many concurrent requests do not wait for a free one. `context`:
    the kubeconfig's context to use (None: its current one)."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = max_connections
    if kubeconfig is not None:
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), context=context, client_configuration=configuration
            )
        except (config.ConfigException, OSError) as error:
            raise CredentialsError(f"cannot load the kubeconfig {kubeconfig}: {error}") from error
    else:
        try:
            if context is not None:  # a named context is always the kubeconfig's, never the Pod's account
                config.load_kube_config(context=context, client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                _load_in_cluster_or_default(configuration)
        except (config.ConfigException, OSError) as error:
            raise CredentialsError(NO_CREDENTIALS if context is None else str(error)) from error
    return client.ApiClient(configuration)


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of a list. Every page of one list is at the first page's resourceVersion (one snapshot)."""

    items: list[Object]
    resource_version: str
    #: The continue token of the next page; None on the last page.
    next: str | None = None


class Api(Protocol):
    """The asynchronous calls the domain writer and the pod webhooks make: `Kube`, or an in-memory stand-in in
    the tests that replay interleavings of admission and reconciliation."""

    async def arequest(self, method: str, path: str, **kwargs: Any) -> Object: ...

    async def aget(
        self, api_version: str, plural: str, name: str, *, namespace: str | None = None
    ) -> Object | None: ...

    async def alist_page(
        self,
        api_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        after: str | None = None,
    ) -> Page: ...

    async def acreate(self, manifest: Object, plural: str) -> Object: ...

    async def apatch(self, path: str, patch: object, *, content_type: str = MERGE_PATCH) -> Object: ...

    async def adelete(self, path: str, *, uid: str | None = None, resource_version: str | None = None) -> bool: ...

    async def amodify(self, path: str, change: Callable[[Object], JsonPatch | None]) -> Object | None: ...


class WriteWithdrawnError(RuntimeError):
    """A write was not sent: the permit it ran under (this replica's leadership) was withdrawn. Never retried."""


class WritePermit:
    """Lets writes be sent while `valid()` holds, and counts those on their way, so that whoever withdraws it (the
    elector stepping down) can wait until none is left before telling another replica to go ahead.

    A call runs under a permit when `WRITE_PERMIT` holds it in the caller's context (copied into the worker thread):
    every mutating request then checks it before it is sent, each retry and each step of a read-modify-write
    included, so a cancelled pass whose thread is still running sends nothing more once the permit is withdrawn."""

    def __init__(self, valid: Callable[[], bool]) -> None:
        self.valid = valid
        self._sending = 0
        self._idle = threading.Condition()

    def send(self, request: Callable[[], Result]) -> Result:
        with self._idle:
            if not self.valid():
                raise WriteWithdrawnError("not sent: this replica may no longer write (it stepped down)")
            self._sending += 1
        try:
            return request()
        finally:
            with self._idle:
                self._sending -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Block until no write sent under this permit is on its way (True), or `timeout` passes (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._sending == 0, timeout=timeout)


#: The permit the writes of the current context run under; None: writes not tied to leadership (admission).
WRITE_PERMIT: contextvars.ContextVar[WritePermit | None] = contextvars.ContextVar("mnnvl_write_permit", default=None)
#: Methods that change what the API server holds.
MUTATING_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Kube:
    """One controller's view of the API: its connection, its field manager, its retry bounds."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        field_manager: str,
        attempts: int = 6,
        max_backoff: float = 8.0,
        max_workers: int = MAX_CONCURRENT_REQUESTS,
    ) -> None:
        """`max_workers` bounds the threads that run the `a*` methods' blocking calls (started as needed)."""
        self.api = api
        self.field_manager = field_manager
        self.max_workers = max_workers
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=field_manager)
        self._retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(_transient),
            wait=tenacity.wait_exponential_jitter(multiplier=0.2, max=max_backoff),
            stop=tenacity.stop_after_attempt(attempts),
            reraise=True,
            before_sleep=lambda state: log.warning(
                "retrying api call",
                extra={
                    "attempt": state.attempt_number,
                    "error": str(state.outcome.exception()) if state.outcome else "",
                },
            ),
        )

    # --- blocking calls -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: object = None,
        content_type: str = JSON,
        timeout: float = 30.0,
    ) -> Object:
        """One API call, retried while transient; the decoded JSON, or ApiError for any status >= 400 and
        UnreachableError when no answer came."""
        try:
            result: Object = self._retrying(
                self._once, method, path, query=query, body=body, content_type=content_type, timeout=timeout
            )
        except TRANSPORT_ERRORS as error:
            raise UnreachableError(method, path, error) from error
        return result

    def _once(
        self, method: str, path: str, *, query: dict[str, str] | None, body: object, content_type: str, timeout: float
    ) -> Object:
        url_query = f"?{urllib.parse.urlencode(query)}" if query else ""
        _, url, headers, payload, _ = self.api.param_serialize(
            method=method,
            resource_path=path + url_query,
            header_params={"Accept": JSON, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        permit = WRITE_PERMIT.get() if method in MUTATING_METHODS else None

        def send() -> tuple[Any, bytes]:
            response = self.api.call_api(method, url, header_params=headers, body=payload, _request_timeout=timeout)
            data: bytes = response.read()  # type: ignore[no-untyped-call]
            return response, data

        response, data = send() if permit is None else permit.send(send)
        if response.status >= 400:
            raise ApiError(status=response.status, reason=response.reason, body=data.decode(errors="replace"))
        decoded: Object = json.loads(data) if data else {}
        return decoded

    def get(self, api_version: str, plural: str, name: str, *, namespace: str | None = None) -> Object | None:
        try:
            return self.request("GET", path_of(api_version, plural, namespace=namespace, name=name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list_page(
        self,
        api_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        after: str | None = None,
    ) -> Page:
        """One page of a collection (all namespaces when `namespace` is None); `after`: the previous page's
        continue token. A continuation is served at the first page's resourceVersion, which a watch cache
        lagging behind a burst may not have reached yet (504): the retries wait for it."""
        query = {"limit": str(LIST_PAGE_SIZE)}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if after:
            query["continue"] = after
        listed = self.request("GET", path_of(api_version, plural, namespace=namespace), query=query)
        meta = listed.get("metadata") or {}
        return Page(
            items=listed.get("items") or [],
            resource_version=str(meta.get("resourceVersion", "")),
            next=meta.get("continue") or None,
        )

    def list_objects(
        self, api_version: str, plural: str, *, namespace: str | None = None, **query: str
    ) -> list[Object]:
        path = path_of(api_version, plural, namespace=namespace)
        listed: list[Object] = self.request("GET", path, query=query or None)["items"]
        return listed

    def create(self, manifest: Object, plural: str) -> Object:
        namespace = manifest["metadata"].get("namespace")
        # The field manager is recorded in managedFields: it is how our domains are told from look-alikes.
        path = path_of(manifest["apiVersion"], plural, namespace=namespace)
        return self.request("POST", path, query={"fieldManager": self.field_manager}, body=manifest)

    def apply(self, manifest: Object, plural: str, *, force: bool = True) -> Object:
        """Server-side apply under this controller's field manager."""
        meta = manifest["metadata"]
        path = path_of(manifest["apiVersion"], plural, namespace=meta.get("namespace"), name=meta["name"])
        query = {"fieldManager": self.field_manager, "force": "true" if force else "false"}
        return self.request("PATCH", path, query=query, body=manifest, content_type=APPLY_PATCH)

    def patch(self, path: str, patch: object, *, content_type: str = MERGE_PATCH) -> Object:
        return self.request(
            "PATCH", path, query={"fieldManager": self.field_manager}, body=patch, content_type=content_type
        )

    def delete(self, path: str, *, uid: str | None = None, resource_version: str | None = None) -> bool:
        """Delete with optional preconditions; False when the object was already gone."""
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions} if preconditions else None
        try:
            self.request("DELETE", path, body=body)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def modify(self, path: str, change: Callable[[Object], JsonPatch | None], *, attempts: int = 5) -> Object | None:
        """Read, compute a JSON patch from what was read, apply; on a conflict, read again and recompute.

        `change` returns None when nothing needs doing. The patch should carry `test` operations for what it
        relied on, so a concurrent writer turns into a conflict instead of a lost update. Returns None when
        the object is gone or unchanged.
        """
        for _ in range(attempts):
            try:
                current = self.request("GET", path)
            except ApiError as error:
                if error.status == 404:
                    return None
                raise
            operations = change(current)
            if not operations:
                return None
            try:
                return self.patch(path, operations, content_type=JSON_PATCH)
            except ApiError as error:
                if error.status == 404:
                    return None
                if error.status not in (409, 422):
                    raise
        raise RuntimeError(f"{path}: still conflicting after {attempts} attempts")

    # --- the same, off the event loop -----------------------------------------------------------------

    async def _off_loop(self, call: Callable[Params, Result], /, *args: Params.args, **kwargs: Params.kwargs) -> Result:
        """Run a blocking call on this client's pool, in a copy of the caller's context (as `asyncio.to_thread`
        does). Cancelling the await does not stop a call already running; its result is then dropped."""
        loop = asyncio.get_running_loop()
        bound = functools.partial(contextvars.copy_context().run, call, *args, **kwargs)
        return await loop.run_in_executor(self._pool, bound)

    async def arequest(self, method: str, path: str, **kwargs: Any) -> Object:
        return await self._off_loop(self.request, method, path, **kwargs)

    async def aget(self, api_version: str, plural: str, name: str, *, namespace: str | None = None) -> Object | None:
        return await self._off_loop(self.get, api_version, plural, name, namespace=namespace)

    async def alist_page(
        self,
        api_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        after: str | None = None,
    ) -> Page:
        return await self._off_loop(
            self.list_page,
            api_version,
            plural,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            after=after,
        )

    async def acreate(self, manifest: Object, plural: str) -> Object:
        return await self._off_loop(self.create, manifest, plural)

    async def aapply(self, manifest: Object, plural: str) -> Object:
        return await self._off_loop(self.apply, manifest, plural)

    async def apatch(self, path: str, patch: object, *, content_type: str = MERGE_PATCH) -> Object:
        return await self._off_loop(self.patch, path, patch, content_type=content_type)

    async def adelete(self, path: str, *, uid: str | None = None, resource_version: str | None = None) -> bool:
        return await self._off_loop(self.delete, path, uid=uid, resource_version=resource_version)

    async def amodify(self, path: str, change: Callable[[Object], JsonPatch | None]) -> Object | None:
        return await self._off_loop(self.modify, path, change)


async def pages(
    api: Api,
    api_version: str,
    plural: str,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> AsyncIterator[Page]:
    """The pages of one consistent list, one at a time. A continuation that fails (after the client's
    retries) ends the list with that error: the caller starts over."""
    after: str | None = None
    while True:
        page = await api.alist_page(
            api_version,
            plural,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            after=after,
        )
        yield page
        if page.next is None:
            return
        after = page.next


def is_condition_true(obj: Object, condition: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == condition and c.get("status") == "True" for c in conditions)
