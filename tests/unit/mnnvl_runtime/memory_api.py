"""An in-memory stand-in for the API server, for replaying interleavings of admission and reconciliation.

It keeps what the safety argument relies on and nothing more: resourceVersions that change on every write,
JSON-patch `test` failures as 422, DELETE preconditions as 409, finalizers holding a deleted object, a pod's
graceful deletion, field managers recorded in `managedFields` at creation and when someone applies labels under
their own, label selectors, `status.phase!=` field selectors on lists, and a log of watch events that every watch
stream reads at its own pace. The NVIDIA driver is simulated as the real one behaves: a domain's claim template
exists from its creation, and teardown starts as soon as the domain is marked for deletion, so any pod still using
it then is recorded.

A controller's writes do not land when they are sent: each becomes a `Request` in flight, and the harness decides
when (if ever) it reaches the API server and whether its sender hears the answer. This is what a Lease cannot
prevent: `may_write` is checked before a request is sent, and a request sent just before a hand-over can land
after it. Reads are answered at once, from the state at the time of the read, unless the harness makes a client's
reads fail (the API server slow or unreachable, as that client sees it).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch
import jsonpointer

from mnnvl_api import keys, names
from mnnvl_runtime import kube

#: Objects per page of a list: small, so in-use checks and re-lists cross page boundaries.
PAGE_SIZE = 2
#: When every object was created, and when every deletion began (the API server writes RFC 3339 times).
CREATED_AT = "2026-11-30T00:00:00Z"
DELETED_AT = "2026-11-30T00:01:00Z"

Object = dict[str, Any]
CD = keys.COMPUTE_DOMAIN_PLURAL


@dataclasses.dataclass(frozen=True)
class Teardown:
    domain: str
    users: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Landed:
    """A controller's write that reached the API server (whether it succeeded or not)."""

    sender: str
    #: The sender's process (`MemoryClient.process`): a restarted replica is a new process.
    process: int
    what: str
    #: The sender led when it sent the request, and when the request landed.
    sent_leading: bool
    leading: bool
    #: The request can only take effect on the object incarnation (and, for a ComputeDomain, the exact version)
    #: it was decided on: create-if-absent; DELETE with uid and resourceVersion; a JSON patch testing the
    #: resourceVersion (which names one version of one incarnation: the API server's revisions are never reused)
    #: or, on anything but a ComputeDomain, the uid.
    pinned: bool


@dataclasses.dataclass(kw_only=True)
class Request:
    """A write sent and not landed yet; `answer` is what its sender awaits (done once it heard back)."""

    sender: str
    process: int
    what: str
    sent_leading: bool
    pinned: bool
    apply: Callable[[], Any]
    answer: asyncio.Future[Any]
    #: The object a create sends (None for any other write).
    created: Object | None = None


def references_domain(pod: Object, *, domain: str, claim_template: str) -> bool:
    """The pod has not ended and holds the domain's claim or records the domain: the model's own account of who
    uses a domain, written out here rather than taken from the code under test (whose removed guards would weaken
    the judge with the judged)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    claims = (pod.get("spec") or {}).get("resourceClaims") or []
    recorded = (pod["metadata"].get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    return recorded == domain or any(claim.get("resourceClaimTemplateName") == claim_template for claim in claims)


def selects(selector: str | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector of the forms the controllers use (`key`, `key=value`, `key in (a,b)`,
    comma-joined) matches."""
    for term in re.split(r",(?![^()]*\))", selector or ""):
        key, is_in, values = term.partition(" in ")
        if is_in:
            if labels.get(key.strip()) not in {v.strip() for v in values.strip().strip("()").split(",")}:
                return False
            continue
        key, is_equal, value = term.partition("=")
        if key and (key not in labels or (is_equal and labels[key] != value)):
            return False
    return True


def field_selects(selector: str | None, body: Object) -> bool:
    """Whether a field selector of the one form the controllers use (`status.phase!=Phase`, comma-joined) matches.
    Any other term is refused: ignoring it would select every object, and a test could pass on a list the real API
    server would have narrowed."""
    for term in filter(None, (selector or "").split(",")):
        field, is_not, value = term.partition("!=")
        if not is_not or field.strip() != "status.phase":
            raise ValueError(f"the in-memory API server applies `status.phase!=` field selectors only, not {term!r}")
        if (body.get("status") or {}).get("phase") == value.strip():
            return False
    return True


class MemoryApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Object] = {}  # (plural, namespace, name) → object
        self.events: list[tuple[str, str, Object]] = []  # (plural, type, object) in write order
        self.teardowns: list[Teardown] = []
        self.deleted_domains: set[str] = set()
        self.in_flight: list[Request] = []
        #: Called with each request as it is sent: a model judges what a write says at the moment it is sent.
        self.on_send: Callable[[Request], None] = lambda request: None
        self.landed: list[Landed] = []
        #: The replica holding the controller's Lease (None: nobody).
        self.leader: str | None = None
        self.resource_version = 0
        self._uids = itertools.count(1)
        self._processes = itertools.count(1)

    def client(self, field_manager: str, *, sender: str = "") -> MemoryClient:
        """A client writing as `field_manager`; with a `sender`, its writes are requests in flight. Each client is a
        process of its own (`MemoryClient.process`)."""
        return MemoryClient(self, field_manager, sender=sender, process=next(self._processes))

    # --- state changes ---------------------------------------------------------------------------------

    def _next_version(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def _record(self, plural: str, kind: str, body: Object) -> None:
        self.events.append((plural, kind, copy.deepcopy(body)))

    def put(self, plural: str, body: Object, *, manager: str, uid: str | None = None) -> Object:
        """Create `body` as `manager`; `uid` names the uid it gets (default: the next one)."""
        meta = body["metadata"]
        key = (plural, meta.get("namespace", ""), meta["name"])
        if key in self.objects:
            raise kube.ApiError(status=409, reason="AlreadyExists")
        meta["uid"] = uid or f"uid-{next(self._uids)}"
        meta["creationTimestamp"] = CREATED_AT
        meta["resourceVersion"] = self._next_version()
        meta["managedFields"] = [
            {
                "manager": manager,
                "operation": "Update",
                "fieldsV1": {"f:metadata": {"f:labels": {f"f:{label}": {} for label in meta.get("labels") or {}}}},
            }
        ]
        self.objects[key] = body
        self._record(plural, "ADDED", body)
        if plural == CD:
            template = names.claim_template_name(meta["name"])
            self.put(
                "resourceclaimtemplates",
                {"metadata": {"name": template, "namespace": meta["namespace"]}},
                manager="driver",
            )
        return copy.deepcopy(body)

    def update(self, plural: str, namespace: str, name: str, change: Callable[[Object], None]) -> Object:
        body = self.objects[(plural, namespace, name)]
        was_deleting = bool(body["metadata"].get("deletionTimestamp"))
        change(body)
        body["metadata"]["resourceVersion"] = self._next_version()
        if body["metadata"].get("deletionTimestamp") and not body["metadata"].get("finalizers"):
            self._remove(plural, namespace, name)
        else:
            self._record(plural, "MODIFIED", body)
            if plural == CD and not was_deleting and body["metadata"].get("deletionTimestamp"):
                self._teardown(body)
        return copy.deepcopy(body)

    def apply_labels(
        self, plural: str, namespace: str, name: str, labels: Mapping[str, str], *, manager: str
    ) -> Object:
        """`manager` applies `labels` (server-side apply): from now on it owns each of them, beside the managers that
        own it already when the value is unchanged, instead of them when it changes."""

        def change(body: Object) -> None:
            meta = body["metadata"]
            current = meta.setdefault("labels", {})
            for entry in meta.setdefault("managedFields", []):
                owned = entry["fieldsV1"]["f:metadata"]["f:labels"]
                for key, value in labels.items():
                    if current.get(key) != value:
                        owned.pop(f"f:{key}", None)
            current.update(labels)
            mine: Object = {f"f:{key}": {} for key in labels}
            meta["managedFields"].append(
                {"manager": manager, "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": mine}}}
            )

        return self.update(plural, namespace, name, change)

    def delete(self, plural: str, namespace: str, name: str, *, grace_until: str | None = None) -> None:
        """Delete an object: gone at once, or, while it carries finalizers, marked with `deletionTimestamp` until the
        last one is removed. With `grace_until` (a pod's graceful deletion) it stays, marked with that time (the end
        of its grace period), until deleted again (its kubelet confirmed the end)."""
        body = self.objects[(plural, namespace, name)]
        if grace_until is not None:
            body["metadata"]["deletionTimestamp"] = grace_until
            body["metadata"]["resourceVersion"] = self._next_version()
            self._record(plural, "MODIFIED", body)
        elif body["metadata"].get("finalizers"):
            self.update(plural, namespace, name, lambda b: b["metadata"].__setitem__("deletionTimestamp", DELETED_AT))
        else:
            if plural == CD:
                self._teardown(body)
            self._remove(plural, namespace, name)

    def _remove(self, plural: str, namespace: str, name: str) -> None:
        body = self.objects.pop((plural, namespace, name))
        self._record(plural, "DELETED", body)
        if plural == CD:
            template = names.claim_template_name(name)
            if ("resourceclaimtemplates", namespace, template) in self.objects:
                self._remove("resourceclaimtemplates", namespace, template)

    def _teardown(self, domain: Object) -> None:
        """The driver tears IMEX down the moment deletion starts: record who was still using the domain."""
        name, namespace = domain["metadata"]["name"], domain["metadata"]["namespace"]
        claim = names.claim_template_name(name)
        users = tuple(
            sorted(
                pod["metadata"]["name"]
                for (plural, ns, _), pod in self.objects.items()
                if plural == "pods" and ns == namespace and references_domain(pod, domain=name, claim_template=claim)
            )
        )
        self.teardowns.append(Teardown(domain=name, users=users))
        self.deleted_domains.add(name)

    def get(self, plural: str, namespace: str, name: str) -> Object | None:
        found = self.objects.get((plural, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def peek(self, plural: str, namespace: str, name: str) -> Object | None:
        """The stored object itself, not a copy: for the model's own reads (invariants, preconditions), which
        never change what they read; a copy each time would cost most of a run."""
        return self.objects.get((plural, namespace, name))

    def view(self, plural: str) -> list[Object]:
        """The stored objects of `plural` themselves, not copies (as `peek`)."""
        return [body for (p, _, _), body in self.objects.items() if p == plural]

    def all(self, plural: str, selector: str | None = None, *, fields: str | None = None) -> list[Object]:
        return [
            copy.deepcopy(body)
            for (p, _, _), body in self.objects.items()
            if p == plural and selects(selector, body["metadata"].get("labels") or {}) and field_selects(fields, body)
        ]

    # --- requests in flight ----------------------------------------------------------------------------

    def land(self, request: Request, *, answered: bool) -> None:
        """`request` reaches the API server now; its sender hears the answer if `answered` and still waiting
        (else it sees a timeout, while the write took effect)."""
        self.in_flight.remove(request)
        self.landed.append(
            Landed(
                sender=request.sender,
                process=request.process,
                what=request.what,
                sent_leading=request.sent_leading,
                leading=self.leader == request.sender,
                pinned=request.pinned,
            )
        )
        try:
            result, error = request.apply(), None
        except kube.ApiError as failed:
            result, error = None, failed
        if request.answer.done():
            return
        if not answered:
            request.answer.set_exception(timed_out())
        elif error is not None:
            request.answer.set_exception(error)
        else:
            request.answer.set_result(result)


def timed_out() -> kube.ApiError:
    return kube.ApiError(status=504, reason="Timeout")


def _parse(path: str) -> tuple[str, str, str | None]:
    """(plural, namespace, name) of a REST path made by `kube.path_of`."""
    parts = path.strip("/").split("/")
    index = parts.index("namespaces")
    return parts[index + 2], parts[index + 1], parts[index + 3] if len(parts) > index + 3 else None


def _tests(patch: list[Any]) -> set[str]:
    return {op["path"] for op in patch if op.get("op") == "test"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    """What a list answers: the objects it matched when its first page was asked for, and the API's
    resourceVersion then (the list's, which every page reports)."""

    items: list[Object]
    version: int


class MemoryClient:
    """`kube.Api` over a `MemoryApi`, writing as one field manager; a sender's writes are requests in flight."""

    def __init__(
        self, api: MemoryApi, field_manager: str, *, sender: str, process: int = 0, page_size: int = PAGE_SIZE
    ) -> None:
        self.api = api
        self.field_manager = field_manager
        self.sender = sender
        self.process = process
        self.page_size = page_size
        self.snapshots: list[Snapshot] = []  # the lists in flight, by continue token
        self._failing: Exception | None = None
        #: Called as each read (each GET, each page of a list) is asked: a model lets its clock run meanwhile.
        self.reads_take: Callable[[], None] = lambda: None
        self._reads_before_failing = 0

    def fail_reads(self, error: Exception | None, *, after: int = 0) -> None:
        """From now on, after `after` more reads (each GET, each page of a list), every read raises `error`: the API
        server slow (a deadline passing: `TimeoutError`) or unreachable (`kube.UnreachableError`), as this client
        sees it. None: reads are answered again."""
        self._failing = error
        self._reads_before_failing = after

    def _read(self) -> None:
        self.reads_take()
        if self._failing is not None:
            if self._reads_before_failing == 0:
                raise self._failing
            self._reads_before_failing -= 1

    async def _send(self, what: str, apply: Callable[[], Any], *, pinned: bool, created: Object | None = None) -> Any:
        if not self.sender:
            return apply()
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        request = Request(
            sender=self.sender,
            process=self.process,
            what=what,
            sent_leading=self.api.leader == self.sender,
            pinned=pinned,
            apply=apply,
            answer=answer,
            created=created,
        )
        self.api.in_flight.append(request)
        self.api.on_send(request)
        return await answer

    async def arequest(self, method: str, path: str, **kwargs: Any) -> Object:
        return {}  # Events: nothing to keep

    async def aget(self, api_version: str, plural: str, name: str, *, namespace: str | None = None) -> Object | None:
        self._read()
        return self.api.get(plural, namespace or "", name)

    async def alist_page(
        self,
        api_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        after: str | None = None,
    ) -> kube.Page:
        """Pages of `page_size` objects in key order (namespace, name), all from the snapshot the first page took,
        each reporting the snapshot's version (as the API server's are)."""
        self._read()
        if after is None:
            after = str(len(self.snapshots))
            listed = sorted(
                (
                    b
                    for b in self.api.all(plural, label_selector, fields=field_selector)
                    if namespace in (None, b["metadata"].get("namespace"))
                ),
                key=lambda b: (b["metadata"].get("namespace", ""), b["metadata"]["name"]),
            )
            self.snapshots.append(Snapshot(items=listed, version=self.api.resource_version))
        index, _, start = after.partition(":")
        offset, snapshot = int(start or 0), self.snapshots[int(index)]
        items = snapshot.items[offset : offset + self.page_size]
        more = offset + self.page_size < len(snapshot.items)
        return kube.Page(
            items=items,
            resource_version=str(snapshot.version),
            next=f"{index}:{offset + self.page_size}" if more else None,
        )

    async def acreate(self, manifest: Object, plural: str) -> Object:
        body = copy.deepcopy(manifest)
        what = f"create {plural}/{body['metadata']['name']}"
        created: Object = await self._send(
            what, lambda: self.api.put(plural, body, manager=self.field_manager), pinned=True, created=body
        )
        return created

    async def apatch(self, path: str, patch: object, *, content_type: str = kube.MERGE_PATCH) -> Object:
        assert content_type == kube.JSON_PATCH
        assert isinstance(patch, list)  # a JSON patch is a list of operations
        plural, namespace, name = _parse(path)
        assert name is not None
        tested = _tests(patch)
        pinned = "/metadata/resourceVersion" in tested or (plural != CD and "/metadata/uid" in tested)

        def apply() -> Object:
            current = self.api.get(plural, namespace, name)
            if current is None:
                raise kube.ApiError(status=404, reason="NotFound")
            try:
                patched = jsonpatch.apply_patch(current, patch)  # validate first: a failed patch changes nothing
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
                raise kube.ApiError(status=422, reason="Invalid") from error  # a failed test, a path not there

            def change(body: Object) -> None:
                body.clear()
                body.update(copy.deepcopy(patched))

            return self.api.update(plural, namespace, name, change)

        patched: Object = await self._send(f"patch {plural}/{name}", apply, pinned=pinned)
        return patched

    async def adelete(self, path: str, *, uid: str | None = None, resource_version: str | None = None) -> bool:
        plural, namespace, name = _parse(path)
        assert name is not None

        def apply() -> bool:
            current = self.api.get(plural, namespace, name)
            if current is None:
                return False
            meta = current["metadata"]
            if (uid and meta["uid"] != uid) or (resource_version and meta["resourceVersion"] != resource_version):
                raise kube.ApiError(status=409, reason="Conflict")
            self.api.delete(plural, namespace, name)
            return True

        return bool(await self._send(f"delete {plural}/{name}", apply, pinned=bool(uid) and bool(resource_version)))

    async def amodify(self, path: str, change: Callable[[Object], kube.JsonPatch | None]) -> Object | None:
        plural, namespace, name = _parse(path)
        assert name is not None
        current = self.api.get(plural, namespace, name)
        if current is None:
            return None
        operations = change(current)
        if not operations:
            return None
        try:
            return await self.apatch(path, operations, content_type=kube.JSON_PATCH)
        except kube.ApiError as error:
            if error.status == 422:
                return None
            raise
