"""An in-memory stand-in for the API server, for replaying interleavings of admission and reconciliation.

It keeps what the safety argument relies on and nothing more: resourceVersions that change on every write,
JSON-patch `test` failures as 422, DELETE preconditions as 409, finalizers holding a deleted object, field
managers recorded in `managedFields` at creation, and a log of watch events for stores to lag behind. The
NVIDIA driver is simulated as the real one behaves: a domain's claim template exists from its creation, and
teardown starts as soon as the domain is marked for deletion, so any pod still using it then is recorded.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import jsonpatch

from mnnvl_api import keys, names
from mnnvl_api.decisions import references
from mnnvl_runtime import kube

#: Objects per page of a list: small, so in-use checks and re-lists cross page boundaries.
PAGE_SIZE = 2

Object = dict[str, Any]
CD = keys.COMPUTE_DOMAIN_PLURAL


@dataclasses.dataclass(frozen=True)
class Teardown:
    domain: str
    users: tuple[str, ...]


class MemoryApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Object] = {}  # (plural, namespace, name) → object
        self.events: list[tuple[str, str, Object]] = []  # (plural, type, object) in write order
        self.teardowns: list[Teardown] = []
        self.deleted_domains: set[str] = set()
        self._versions = itertools.count(1)
        self._uids = itertools.count(1)

    def client(self, field_manager: str) -> MemoryClient:
        return MemoryClient(self, field_manager)

    # --- state changes ---------------------------------------------------------------------------------

    def _record(self, plural: str, kind: str, body: Object) -> None:
        self.events.append((plural, kind, copy.deepcopy(body)))

    def put(self, plural: str, body: Object, *, manager: str) -> Object:
        meta = body["metadata"]
        key = (plural, meta.get("namespace", ""), meta["name"])
        if key in self.objects:
            raise kube.ApiError(status=409, reason="AlreadyExists")
        meta["uid"] = f"uid-{next(self._uids)}"
        meta["creationTimestamp"] = "2026-11-30T00:00:00Z"
        meta["resourceVersion"] = str(next(self._versions))
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
        body["metadata"]["resourceVersion"] = str(next(self._versions))
        if body["metadata"].get("deletionTimestamp") and not body["metadata"].get("finalizers"):
            self._remove(plural, namespace, name)
        else:
            self._record(plural, "MODIFIED", body)
            if plural == CD and not was_deleting and body["metadata"].get("deletionTimestamp"):
                self._teardown(body)
        return copy.deepcopy(body)

    def delete(self, plural: str, namespace: str, name: str) -> None:
        body = self.objects[(plural, namespace, name)]
        if body["metadata"].get("finalizers"):
            self.update(plural, namespace, name, lambda b: b["metadata"].__setitem__("deletionTimestamp", "now"))
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
                if plural == "pods" and ns == namespace and references.uses(pod, domain=name, claim_template=claim)
            )
        )
        self.teardowns.append(Teardown(domain=name, users=users))
        self.deleted_domains.add(name)

    def get(self, plural: str, namespace: str, name: str) -> Object | None:
        found = self.objects.get((plural, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def all(self, plural: str) -> list[Object]:
        return [copy.deepcopy(body) for (p, _, _), body in self.objects.items() if p == plural]


def _parse(path: str) -> tuple[str, str, str | None]:
    """(plural, namespace, name) of a REST path made by `kube.path_of`."""
    parts = path.strip("/").split("/")
    index = parts.index("namespaces")
    return parts[index + 2], parts[index + 1], parts[index + 3] if len(parts) > index + 3 else None


class MemoryClient:
    """`kube.Api` over a `MemoryApi`, writing as one field manager."""

    def __init__(self, api: MemoryApi, field_manager: str) -> None:
        self.api = api
        self.field_manager = field_manager
        self.snapshots: list[list[Object]] = []  # the lists in flight, by continue token

    async def arequest(self, method: str, path: str, **kwargs: Any) -> Object:
        return {}  # Events: nothing to keep

    async def aget(self, api_version: str, plural: str, name: str, *, namespace: str | None = None) -> Object | None:
        return self.api.get(plural, namespace or "", name)

    async def alist_page(
        self,
        api_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        after: str | None = None,
    ) -> kube.Page:
        """Pages of PAGE_SIZE objects, all from the snapshot the first page took (as the API server's are)."""
        if after is None:
            after = str(len(self.snapshots))
            listed = self.api.all(plural)
            self.snapshots.append(
                [b for b in listed if namespace is None or b["metadata"].get("namespace") == namespace]
            )
        index, _, start = after.partition(":")
        offset = int(start or 0)
        items = self.snapshots[int(index)][offset : offset + PAGE_SIZE]
        more = offset + PAGE_SIZE < len(self.snapshots[int(index)])
        return kube.Page(items=items, resource_version="", next=f"{index}:{offset + PAGE_SIZE}" if more else None)

    async def acreate(self, manifest: Object, plural: str) -> Object:
        return self.api.put(plural, copy.deepcopy(manifest), manager=self.field_manager)

    async def apatch(self, path: str, patch: object, *, content_type: str = kube.MERGE_PATCH) -> Object:
        assert content_type == kube.JSON_PATCH
        assert isinstance(patch, list)  # a JSON patch is a list of operations
        plural, namespace, name = _parse(path)
        assert name is not None
        if self.api.get(plural, namespace, name) is None:
            raise kube.ApiError(status=404, reason="NotFound")

        def change(body: Object) -> None:
            try:
                patched = jsonpatch.apply_patch(body, patch)
            except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict) as error:
                raise kube.ApiError(status=422, reason="Invalid") from error
            body.clear()
            body.update(patched)

        current = self.api.get(plural, namespace, name)
        assert current is not None
        change(current)  # validate first: a failed patch changes nothing
        return self.api.update(plural, namespace, name, change)

    async def adelete(self, path: str, *, uid: str | None = None, resource_version: str | None = None) -> bool:
        plural, namespace, name = _parse(path)
        assert name is not None
        current = self.api.get(plural, namespace, name)
        if current is None:
            return False
        meta = current["metadata"]
        if (uid and meta["uid"] != uid) or (resource_version and meta["resourceVersion"] != resource_version):
            raise kube.ApiError(status=409, reason="Conflict")
        self.api.delete(plural, namespace, name)
        return True

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
