"""Builders of plain objects for mnnvl-ds unit tests, shaped as upstream DisaggregatedSet v0.10.0 makes them;
they refuse shapes the real system never produces."""

from __future__ import annotations

import copy
import hashlib
import json
import pathlib
from typing import Any

import jsonpatch
import yaml

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains, opt_in
from mnnvl_ds import planner, rules

from ..mnnvl_api import pods, snapshots

UID = "7a2d3c4e-0000-4000-8000-000000000002"
NS = "serving"
DS = "llm-serving"
REVISION = "3f9a0c2e"
NEXT_REVISION = "5be1d07a"
SEED_EXAMPLE = pathlib.Path(__file__).parents[1] / "mnnvl_api" / "objects" / "llm-serving.yaml"

ENV_ON = opt_in.Environment(gate_enabled=True, api_served=True)
ENV_OFF = opt_in.Environment(gate_enabled=False, api_served=True)
ENV_NO_API = opt_in.Environment(gate_enabled=True, api_served=False)


# --- DisaggregatedSets ----------------------------------------------------------------------------------


def seed_example() -> dict[str, Any]:
    """The seed's Option 2 DisaggregatedSet: two slices, prefill and decode enrolled, encoder opted out."""
    loaded: dict[str, Any] = yaml.safe_load(SEED_EXAMPLE.read_text())
    loaded["metadata"].update(namespace=NS, uid=UID)
    return loaded


def ds(
    *,
    annotations: dict[str, str] | None = None,
    roles: list[dict[str, Any]] | None = None,
    placement: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A DisaggregatedSet with the given set annotations and roles (default: prefill and decode, nothing set)."""
    body: dict[str, Any] = {
        "apiVersion": keys.DS_API_VERSION,
        "kind": keys.DS_KIND,
        "metadata": {"name": DS, "namespace": NS, "uid": UID, "annotations": annotations or {}},
        "spec": {"slices": 2, "roles": roles if roles is not None else [role("prefill"), role("decode")]},
    }
    if placement is not None:
        body["spec"]["placementPolicy"] = placement
    return body


def role(
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    worker_meta: dict[str, Any] | None = None,
    worker_spec: dict[str, Any] | None = None,
    leader_spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    template = pods.leader_worker_template(2, worker_spec=worker_spec, leader_spec=leader_spec, worker_meta=worker_meta)
    found: dict[str, Any] = {"name": name, "spec": {"replicas": 1, "leaderWorkerTemplate": template}}
    if annotations is not None:
        found["metadata"] = {"annotations": annotations}
    return found


def enabled(**kwargs: Any) -> dict[str, Any]:
    return ds(annotations={keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}, **kwargs)


def mutated(body: dict[str, Any], env: opt_in.Environment = ENV_ON) -> dict[str, Any]:
    """The DisaggregatedSet as the mutating webhook leaves it."""
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(body), rules.ds_patch(body, env))
    return result


def revision(body: dict[str, Any]) -> str:
    """Stands in for upstream's revision hash: like it, a function of the roles' names and leaderWorkerTemplates
    only (role metadata, replicas, slices and placement are not in it)."""
    payload = [{"name": r["name"], "template": r["spec"]["leaderWorkerTemplate"]} for r in body["spec"]["roles"]]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:8]


# --- the LeaderWorkerSets upstream creates, and their pods ------------------------------------------------


def child(
    role_name: str = "prefill",
    *,
    slice_index: int | None = 0,
    revision_hash: str = REVISION,
    stamped: bool = True,
    owner_uid: str = UID,
    replicas: int = 1,
    owned: bool = True,
) -> dict[str, Any]:
    """A LeaderWorkerSet of (slice, revision, role), as upstream names, labels and owns it; `slice_index` None: a
    LeaderWorkerSet adopted from before slices existed (no slice label, slice 0)."""
    labels = {
        keys.DS_NAME_LABEL: DS,
        keys.DS_REVISION_LABEL: revision_hash,
        keys.DS_ROLE_LABEL: role_name,
    }
    if slice_index is not None:
        labels[keys.DS_SLICE_LABEL] = str(slice_index)
    name = (
        f"{DS}-{revision_hash}-{role_name}"
        if slice_index is None
        else f"{DS}-{slice_index}-{revision_hash}-{role_name}"
    )
    template_labels = {**labels, **({keys.SCOPE_LABEL: keys.SCOPE_SLICE} if stamped else {})}
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels}
    if owned:
        meta["ownerReferences"] = [
            {"apiVersion": keys.DS_API_VERSION, "kind": keys.DS_KIND, "name": DS, "uid": owner_uid, "controller": True}
        ]
    return {
        "apiVersion": keys.LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {"metadata": {"labels": template_labels}, "spec": pods.deepseek_worker_spec()},
            },
        },
    }


def pod(
    lws: dict[str, Any],
    name: str | None = None,
    *,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A pod of `lws`, labelled from its worker template as the StatefulSet creates it."""
    template = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    pod_name = name or f"{lws['metadata']['name']}-0"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": NS,
            "uid": uid or f"uid-{pod_name}",
            "labels": {**template["metadata"]["labels"], keys.LWS_NAME_LABEL: lws["metadata"]["name"]},
            "annotations": dict(annotations or {}),
        },
        "spec": copy.deepcopy(spec or template["spec"]),
        "status": {"phase": "Pending"},
    }


# --- the planner's facts -----------------------------------------------------------------------------------


def workload(
    uid: str = UID, *, deleting: bool = False, opted_in: bool = True, slices: int = 2
) -> planner.DisaggregatedSetFacts:
    return planner.DisaggregatedSetFacts(
        namespace=NS, name=DS, uid=uid, deleting=deleting, opted_in=opted_in, slices=slices
    )


def child_facts(
    slice_index: int = 0,
    revision_hash: str = REVISION,
    role_name: str = "prefill",
    *,
    slice_scope: bool = True,
    owner_uid: str = UID,
    deleting: bool = False,
) -> planner.Child:
    return planner.Child(
        name=f"{DS}-{slice_index}-{revision_hash}-{role_name}",
        ds_name=DS,
        owner_uid=owner_uid,
        slice=slice_index,
        revision=revision_hash,
        role=role_name,
        slice_scope=slice_scope,
        deleting=deleting,
    )


def pod_facts(
    name: str,
    domain: str | None,
    *,
    gated: bool = False,
    terminal: bool = False,
    deleting: bool = False,
    missing_claim: bool = False,
) -> planner.SlicePodFacts:
    return planner.SlicePodFacts(
        name=name,
        uid=f"uid-{name}",
        domain=domain,
        gate_at=0 if gated else None,
        terminal=terminal,
        deleting=deleting,
        missing_claim=missing_claim,
    )


def domain_name(slice_index: int = 0, revision_hash: str = REVISION) -> str:
    return names.slice_domain_name(DS, slice_index, revision_hash)


def domain(
    name: str | None = None,
    *,
    slice_index: int = 0,
    revision_hash: str = REVISION,
    owner_uid: str | None = UID,
    manager: str | None = keys.DS_CONTROLLER,
    created_by: str | None = "manager",
    deleting: bool = False,
    protected: bool = True,
    condemned: bool = False,
    workload_name: str | None = DS,
) -> domains.DomainFacts:
    """A domain's facts; by default the one mnnvl-ds created for (slice, revision) of llm-serving."""
    if manager == keys.DS_CONTROLLER and owner_uid is None:
        raise ValueError("a domain mnnvl-ds manages always carries the owner-uid label")
    found = name or domain_name(slice_index, revision_hash)
    return domains.DomainFacts(
        name=found,
        namespace=NS,
        owner_uid=owner_uid,
        managed_by=manager,
        workload=workload_name,
        claim_template=names.claim_template_name(found),
        deleting=deleting,
        protected=protected,
        uid=f"uid-{found}",
        resource_version="7",
        slice=str(slice_index) if manager else None,
        revision=revision_hash if manager else None,
        condemned=condemned,
        created_by=manager if created_by == "manager" else created_by,
    )


def domain_object(slice_index: int = 0, revision_hash: str = REVISION, *, owner_uid: str = UID) -> dict[str, Any]:
    """A ComputeDomain as the API returns one that mnnvl-ds created for (slice, revision) of llm-serving."""
    name = domain_name(slice_index, revision_hash)
    labels = planner.domain_labels(workload(owner_uid), (slice_index, revision_hash))
    owned: dict[str, dict[str, Any]] = {f"f:{label}": {} for label in labels}
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "labels": labels,
            "finalizers": [keys.PROTECTION_FINALIZER],
            "managedFields": [
                {"manager": keys.DS_CONTROLLER, "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": owned}}}
            ],
        },
        "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
    }


def snapshot(
    *,
    children: tuple[planner.Child, ...] = (),
    pods_: tuple[planner.SlicePodFacts, ...] = (),
    domains_: tuple[domains.DomainFacts, ...] = (),
    templates: tuple[str, ...] | None = None,
    in_use: tuple[str, ...] = (),
    recorded: tuple[str, ...] = (),
    workload_: planner.DisaggregatedSetFacts | None = None,
    gone: bool = False,
    gate_enabled: bool = True,
) -> planner.Snapshot:
    """A snapshot of llm-serving; claim templates exist for every domain unless `templates` says which do."""
    for facts in children:
        if facts.ds_name != DS:
            raise ValueError(f"LeaderWorkerSet {facts.name} is not of {DS}")
    return planner.Snapshot(
        namespace=NS,
        workload_name=DS,
        workload=None if gone else (workload_ or workload()),
        children=children,
        pods=pods_,
        **snapshots.domain_fields(domains_, templates=templates, in_use=in_use, recorded=recorded),
        gate_enabled=gate_enabled,
    )
