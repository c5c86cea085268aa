"""A fake API server for mnnvl-topology's executor: cluster-scoped objects by (plural, name), with what the
identity checks rely on kept as the real one keeps it — uids, resourceVersions that change on every write, the
field managers that wrote each label and annotation (`managedFields`: set at creation, moved by an apply), and
uid / resourceVersion preconditions failing with 409. Several clients may share one store (two installations)."""

from __future__ import annotations

import copy
import itertools
import json
import uuid
from collections.abc import Mapping
from typing import Any, cast

from mnnvl_api import keys, models
from mnnvl_api.models import configuration
from mnnvl_runtime import controller, identity, kube, leases, settings
from mnnvl_topology import passes, state, topologies

Object = dict[str, Any]
LEVELS = [{"nodeLabel": keys.GPU_CLIQUE_LABEL}, {"nodeLabel": keys.HOSTNAME_LABEL}]
#: The installation `passes_over` is without one configured: its process namespace's `mnnvl`.
INSTALLATION = "mnnvl-system/mnnvl"
#: The plurals whose objects carry identity (the census ConfigMap's applies are only recorded).
IDENTIFIED = frozenset({keys.KAI_TOPOLOGY_PLURAL, keys.GROVE_BINDING_PLURAL})
_versions = itertools.count(1)


def entry(name: str, levels: list[dict[str, str]] = LEVELS) -> configuration.TopologySettings:
    return configuration.TopologySettings.model_validate({"name": name, "levels": levels})


def ownership(manager: str, meta: Mapping[str, Any]) -> Object:
    """The managedFields entry of `manager` owning every label and annotation in `meta`."""
    owned: Object = {
        f"f:{section}": {f"f:{key}": {} for key in meta.get(section) or {}}
        for section in ("labels", "annotations")
        if meta.get(section)
    }
    return {"manager": manager, "operation": "Update", "fieldsV1": {"f:metadata": owned}}


def stored(manifest: Object, *, managers: Mapping[str, str] | None = None, manager: str = "kubectl") -> Object:
    """`manifest` as the API server keeps it once written: each label and annotation owned by `managers[key]`,
    else by `manager` (a copied manifest is `kubectl`'s; an earlier version's object `mnnvl-topology`'s)."""
    body = copy.deepcopy(manifest)
    meta = body["metadata"]
    meta["uid"] = f"uid-{uuid.uuid4().hex[:8]}"
    meta["resourceVersion"] = str(next(_versions))
    entries: dict[str, Object] = {}
    for section in ("labels", "annotations"):
        for key in meta.get(section) or {}:
            owner = (managers or {}).get(key, manager)
            entry = entries.setdefault(owner, {"metadata": {}})
            entry["metadata"].setdefault(section, {})[key] = ""
    meta["managedFields"] = [ownership(owner, entry["metadata"]) for owner, entry in entries.items()]
    return body


def take_ownership(meta: Object, manager: str, applied: Mapping[str, Any]) -> None:
    """Server-side apply with force: the applied labels and annotations move to `manager`."""
    entries: list[Object] = meta.get("managedFields") or []
    for entry in entries:
        fields = entry["fieldsV1"]["f:metadata"]
        for section in ("labels", "annotations"):
            for key in applied.get(section) or {}:
                if entry["manager"] != manager:
                    fields.get(f"f:{section}", {}).pop(f"f:{key}", None)
    meta["managedFields"] = [*entries, ownership(manager, applied)]


class FakeApi:
    """The optional APIs in `served` (Grove's by default) served; creates and deletes of the names in `refuse` are
    denied with the API server's message, as Grove's webhook or RBAC deny them. `writes` logs every successful
    create, apply and delete of an identified object: (verb, plural, the object before, the object after)."""

    def __init__(
        self,
        refuse: set[str],
        served: tuple[topologies.OptionalApi, ...] = (topologies.GROVE_BINDINGS,),
        *,
        objects: dict[tuple[str, str], Object] | None = None,
        field_manager: str = keys.TOPOLOGY_CONTROLLER,
    ) -> None:
        self.objects: dict[tuple[str, str], Object] = {} if objects is None else objects
        self.refuse = refuse
        self.served = set(served)
        self.field_manager = field_manager
        self.events: list[Object] = []
        self.applied: list[Object] = []
        self.writes: list[tuple[str, str, Object | None, Object | None]] = []

    async def arequest(self, method: str, path: str, **kwargs: Any) -> Object:
        if method == "POST":
            self.events.append(kwargs["body"])
            return {}
        listed = [{"name": api.plural} for api in self.served if path == f"/apis/{api.api_version}"]
        if not listed:
            raise kube.ApiError(status=404, reason="NotFound")
        return {"resources": listed}

    async def aget(self, api_version: str, plural: str, name: str, *, namespace: str | None = None) -> Object | None:
        found = self.objects.get((plural, name))
        return None if found is None else copy.deepcopy(found)

    async def alist_page(
        self, api_version: str, plural: str, *, label_selector: str | None = None, **_: Any
    ) -> kube.Page:
        label, _sep, value = (label_selector or "").partition("=")
        items = [
            copy.deepcopy(body)
            for (kind, _name), body in self.objects.items()
            if kind == plural and (not label or (body["metadata"].get("labels") or {}).get(label) == value)
        ]
        return kube.Page(items=items, resource_version="")

    def check(self, name: str) -> None:
        if name in self.refuse:
            denied = {"message": f'admission webhook "grove" denied the request: {name} is invalid'}
            raise kube.ApiError(status=400, reason="BadRequest", body=json.dumps(denied))

    async def acreate(self, manifest: Object, plural: str) -> Object:
        name = manifest["metadata"]["name"]
        self.check(name)
        if (plural, name) in self.objects:
            raise kube.ApiError(status=409, reason="AlreadyExists")
        created = stored(manifest, manager=self.field_manager)
        self.objects[(plural, name)] = created
        self.writes.append(("create", plural, None, copy.deepcopy(created)))
        return copy.deepcopy(created)

    async def aapply(self, manifest: Object, plural: str) -> Object:
        self.applied.append(copy.deepcopy(manifest))
        if plural not in IDENTIFIED:
            return manifest
        meta = manifest["metadata"]
        before = self.objects.get((plural, meta["name"]))
        if before is None:
            return await self.acreate(
                {**manifest, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}, plural
            )
        if "resourceVersion" in meta and meta["resourceVersion"] != before["metadata"]["resourceVersion"]:
            raise kube.ApiError(status=409, reason="Conflict")
        after = copy.deepcopy(before)
        for section in ("labels", "annotations"):
            after["metadata"][section] = {**(after["metadata"].get(section) or {}), **(meta.get(section) or {})}
        after["spec"] = copy.deepcopy(manifest["spec"])
        after["metadata"]["resourceVersion"] = str(next(_versions))
        take_ownership(after["metadata"], self.field_manager, meta)
        self.objects[(plural, meta["name"])] = after
        self.writes.append(("apply", plural, copy.deepcopy(before), copy.deepcopy(after)))
        return copy.deepcopy(after)

    async def adelete(self, path: str, *, uid: str | None = None, resource_version: str | None = None) -> bool:
        plural, name = path.split("/")[-2:]
        self.check(name)
        found = self.objects.get((plural, name))
        if found is None:
            return False
        if (uid and uid != found["metadata"]["uid"]) or (
            resource_version and resource_version != found["metadata"]["resourceVersion"]
        ):
            raise kube.ApiError(status=409, reason="Conflict")
        del self.objects[(plural, name)]
        self.writes.append(("delete", plural, copy.deepcopy(found), None))
        return True


def passes_over(
    api: FakeApi,
    *names: str,
    levels: list[dict[str, str]] = LEVELS,
    unwatched: frozenset[topologies.OptionalApi] = frozenset(),
    topologies: list[Object] | None = None,
    installation: str | None = None,
) -> passes.Passes:
    """The queue passes over `api` for the topologies `names` (with `levels`), or the `topologies` entries as given."""
    document: Object = {"topologies": topologies or [{"name": name, "levels": levels} for name in names]}
    if installation is not None:
        document["installation"] = installation
    context = controller.Context(
        identity=identity.Identity(keys.TOPOLOGY_CONTROLLER),
        process=settings.ProcessSettings(namespace="mnnvl-system"),
        configuration=models.Configuration.model_validate(document),
        client=cast(kube.Kube, api),
        elector=cast(leases.LeaderElector, None),  # passes never ask for the Lease
    )
    return passes.Passes(context, state.Stores(), unwatched=unwatched)


def topologies_seen(api: FakeApi) -> state.Stores:
    """Stores holding every Topology in `api`, as the watch would have them."""
    stores = state.Stores()
    for (plural, _), body in api.objects.items():
        if plural == keys.KAI_TOPOLOGY_PLURAL:
            stores.apply_topology(body["metadata"]["uid"], body)
    return stores
