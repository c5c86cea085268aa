"""Arbitrary worlds for the admission properties (`test_replica_admission.py`, `test_slice_admission.py`): what
the API holds, built on a `MemoryApi` from draws that stay near a coherent world (`mostly`) so that a single
removed guard shows, the webhook replica's stores fed from it with any watch lag or relist loss, and the rules
both scopes judge an answer by, read off the API independently of the webhooks' code."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

import jsonpatch
import kopf
from hypothesis import strategies as st

from mnnvl_api import keys, names
from mnnvl_api.decisions import injection
from mnnvl_runtime import stores

from ..mnnvl_runtime.memory_api import MemoryApi, Object
from . import settings

#: A scope controller's stores.
ScopeStoresT = TypeVar("ScopeStoresT", bound=stores.ScopeStores[Any, Any])

NS = "serving"
T = TypeVar("T")
#: A channel claim a pod may bring of its own, under the reserved name.
THEIRS = "theirs"


def mostly(usual: T, *others: T) -> st.SearchStrategy[T]:
    """`usual` three times in four, so that most worlds are near the coherent one and a single removed guard
    shows."""
    return st.sampled_from((usual,) * (3 * len(others)) + others if others else (usual,))


def controller_of(kind: str, name: str, uid: str, *, api_version: str = "v1") -> list[Object]:
    return [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}]


def uid_of(body: Object) -> str:
    return str(body["metadata"]["uid"])


def put_domain(api: MemoryApi, name: str, labels: dict[str, str], data: st.DataObject, *, ours: str) -> None:
    """The domain `name` with `labels`, made by `ours` (the scope's controller) or by someone else writing them;
    then perhaps relabelled by someone else, condemned, or being deleted."""
    body: Object = {
        "metadata": {"name": name, "namespace": NS, "labels": labels, "finalizers": [keys.PROTECTION_FINALIZER]},
        "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
    }
    others = [manager for manager in keys.DOMAIN_MANAGERS if manager != ours]
    api.put(keys.COMPUTE_DOMAIN_PLURAL, body, manager=data.draw(mostly(ours, "kubectl", *others), label="maker"))
    if data.draw(settings.RARELY, label="relabelled by someone else"):
        identity = {key: labels[key] for key in (keys.OWNER_UID_LABEL, keys.MANAGED_BY_LABEL)}
        api.apply_labels(keys.COMPUTE_DOMAIN_PLURAL, NS, name, identity, manager="kubectl")
    end = data.draw(mostly("live", "condemned", "deleting"), label="domain's state")
    if end == "condemned":
        api.update(
            keys.COMPUTE_DOMAIN_PLURAL,
            NS,
            name,
            lambda domain: domain["metadata"].setdefault("annotations", {}).__setitem__(keys.CONDEMNED_ANNOTATION, "x"),
        )
    elif end == "deleting":
        api.delete(keys.COMPUTE_DOMAIN_PLURAL, NS, name)


def feed(api: MemoryApi, mirrors: Mapping[str, stores.Mirror[Any]], data: st.DataObject) -> None:
    """The webhook replica's stores: each resource's watch stream (by plural) has delivered all of its events, or
    only the first of them (it lags), or all but some (a relist lost them, deletions above all)."""
    for plural, mirror in mirrors.items():
        events = [(kind, body) for resource, kind, body in api.events if resource == plural]
        stream = data.draw(mostly("caught up", "lags", "lost some"), label=f"{plural} stream")
        if stream == "lags":
            events = events[: data.draw(st.integers(0, max(len(events) - 1, 0)), label=f"{plural} delivered")]
        elif stream == "lost some" and events:
            lost = data.draw(st.sets(st.integers(0, len(events) - 1)), label=f"{plural} lost")
            events = [found for index, found in enumerate(events) if index not in lost]
        for kind, body in events:
            mirror.observe(body, deleted=kind == "DELETED")


def fed(scope_stores: ScopeStoresT, api: MemoryApi, data: st.DataObject) -> ScopeStoresT:
    """A scope's webhook replica's stores: every mirror but the pods' (the pod is the one being admitted), fed
    from the API with any lag or loss (`feed`)."""
    mirrors = {
        mirror.resource.plural: mirror for mirror in scope_stores.mirrors if mirror is not scope_stores.pod_mirror
    }
    feed(api, mirrors, data)
    return scope_stores


# --- the rules ---------------------------------------------------------------------------------------------


def made_by(domain: Object, manager: str, workload: str, owner_uid: str | None = None) -> bool:
    """`manager` created the domain for `workload` (for the incarnation with `owner_uid`, if given; else for any),
    and no one else has written its identity since."""
    meta = domain["metadata"]
    entries = meta["managedFields"]
    identity = (keys.OWNER_UID_LABEL, keys.MANAGED_BY_LABEL)
    writers = {
        entry["manager"]
        for entry in entries
        if any(f"f:{key}" in entry["fieldsV1"]["f:metadata"]["f:labels"] for key in identity)
    }
    return (
        entries[0]["manager"] == manager
        and writers == {manager}
        and meta["labels"].get(keys.WORKLOAD_NAME_LABEL) == workload
        and owner_uid in (None, meta["labels"].get(keys.OWNER_UID_LABEL))
    )


def leaving(domain: Object) -> bool:
    """Condemned or being deleted."""
    meta = domain["metadata"]
    return bool(meta.get("deletionTimestamp")) or keys.CONDEMNED_ANNOTATION in (meta.get("annotations") or {})


def holds_channel_claim(pod: Object, domain: str) -> bool:
    """The pod's channel claim, if it has one, is `domain`'s, and every GPU container holds it."""
    spec = pod["spec"]
    claims = {claim["name"]: claim.get("resourceClaimTemplateName") for claim in spec.get("resourceClaims") or []}
    if keys.CHANNEL_CLAIM_NAME in claims and claims[keys.CHANNEL_CLAIM_NAME] != names.claim_template_name(domain):
        return False
    return all(
        keys.CHANNEL_CLAIM_NAME in claims
        and keys.CHANNEL_CLAIM_NAME in [claim["name"] for claim in container["resources"].get("claims") or []]
        for container in spec["containers"]
        if (container.get("resources") or {}).get("limits", {}).get(keys.GPU_RESOURCE)
    )


def is_gated(pod: Object) -> bool:
    return keys.SCHEDULING_GATE in [gate["name"] for gate in pod["spec"].get("schedulingGates") or []]


def answer(
    pod: Object, admitting: Coroutine[Any, Any, injection.PodAdmission]
) -> tuple[Object, injection.PodAdmission] | None:
    """`pod` as the webhook admits it (its patch applied) and the webhook's account of it; None: refused."""
    try:
        admitted = asyncio.run(admitting)
    except kopf.AdmissionError:
        return None
    assert not admitted.errors
    return jsonpatch.apply_patch(copy.deepcopy(pod), admitted.patch), admitted
