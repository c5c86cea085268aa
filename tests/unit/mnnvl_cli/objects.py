"""Objects as the API server returns them, for the CLI's summaries: the seed's deepseek-r1 LeaderWorkerSet (its
groups, pods and domains) and llm-serving DisaggregatedSet, in namespace serving."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from mnnvl_api import keys, names
from mnnvl_cli import snapshot

from ..mnnvl_api import pods
from ..mnnvl_api.domain_builders import UID, managed_fields

NS = "serving"
DS_UID = "6f1c1e0a-0000-4000-8000-0000000000d5"
CREATED = "2026-12-04T10:00:00Z"


def lws(name: str = "deepseek-r1", *, opt_in: str | None = keys.OPT_IN_ENABLED, uid: str = UID) -> dict[str, Any]:
    annotations = {} if opt_in is None else {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: opt_in}
    return {
        "apiVersion": keys.LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "annotations": annotations},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2}},
    }


def pod(
    name: str,
    *,
    lws_name: str = "deepseek-r1",
    group: int = 0,
    worker: int = 0,
    domain: str | None = None,
    claimed: bool = True,
    gated: bool = False,
    scope: str | None = keys.SCOPE_REPLICA,
    phase: str = "Running",
    node: str | None = "gb200-000",
    labels: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod of the deepseek-r1 worker template (vllm with 4 GPUs, a CPU-only routing-proxy), as admitted."""
    body_spec = copy.deepcopy(spec) if spec is not None else pods.deepseek_worker_spec()
    all_labels = {
        keys.LWS_NAME_LABEL: lws_name,
        keys.LWS_GROUP_INDEX_LABEL: str(group),
        keys.LWS_WORKER_INDEX_LABEL: str(worker),
        **({keys.SCOPE_LABEL: scope} if scope else {}),
        **(labels or {}),
    }
    annotations = {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: domain} if domain else {}
    if domain and claimed:
        body_spec["resourceClaims"] = [
            {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": names.claim_template_name(domain)}
        ]
        for container in body_spec["containers"]:
            if "nvidia.com/gpu" in (container.get("resources") or {}).get("limits", {}):
                container["resources"]["claims"] = [{"name": keys.CHANNEL_CLAIM_NAME}]
    if gated:
        body_spec["schedulingGates"] = [{"name": keys.SCHEDULING_GATE}]
    if node and not gated:
        body_spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": NS, "labels": all_labels, "annotations": annotations},
        "spec": body_spec,
        "status": {"phase": "Pending" if gated else phase},
    }


def domain(
    name: str,
    *,
    owner_uid: str = UID,
    manager: str = keys.LWS_CONTROLLER,
    created_by: str | None = None,
    workload: str = "deepseek-r1",
    uid: str | None = None,
    deleting: bool = False,
    condemned: bool = False,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ComputeDomain `manager` made for the workload with `owner_uid` (or, with `created_by`, one whose labels were
    written by someone else)."""
    labels = {
        keys.OWNER_UID_LABEL: owner_uid,
        keys.MANAGED_BY_LABEL: manager,
        keys.WORKLOAD_NAME_LABEL: workload,
        **(extra_labels or {}),
    }
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"uid-{name}",
        "resourceVersion": "7",
        "creationTimestamp": CREATED,
        "labels": labels,
        "finalizers": [keys.PROTECTION_FINALIZER],
        "managedFields": managed_fields(created_by or manager, *labels),
        "annotations": {keys.CONDEMNED_ANNOTATION: f"{manager}/abc"} if condemned else {},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T10:05:00Z"
    return {
        "apiVersion": keys.COMPUTE_DOMAIN_API_VERSION,
        "kind": keys.COMPUTE_DOMAIN_KIND,
        "metadata": meta,
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
        "status": {"status": "Ready"},
    }


def foreign_domain(name: str) -> dict[str, Any]:
    """A ComputeDomain a user made by hand, with no labels of ours."""
    return {
        "apiVersion": keys.COMPUTE_DOMAIN_API_VERSION,
        "kind": keys.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "creationTimestamp": CREATED},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
    }


def ds(*, uid: str = DS_UID) -> dict[str, Any]:
    """llm-serving: prefill and decode share the slice domain, encoder opts out."""
    role = {"spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2}}}
    return {
        "apiVersion": keys.DS_API_VERSION,
        "kind": keys.DS_KIND,
        "metadata": {
            "name": "llm-serving",
            "namespace": NS,
            "uid": uid,
            "annotations": {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: keys.OPT_IN_ENABLED},
        },
        "spec": {
            "slices": 1,
            "roles": [
                {"name": "prefill", **copy.deepcopy(role)},
                {"name": "decode", **copy.deepcopy(role)},
                {
                    "name": "encoder",
                    "metadata": {"annotations": {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: keys.OPT_IN_DISABLED}},
                    **copy.deepcopy(role),
                },
            ],
        },
    }


def ds_labels(role: str, *, revision: str = "251a724d", slice_index: int = 0) -> dict[str, str]:
    return {
        keys.DS_NAME_LABEL: "llm-serving",
        keys.DS_ROLE_LABEL: role,
        keys.DS_SLICE_LABEL: str(slice_index),
        keys.DS_REVISION_LABEL: revision,
    }


def child_lws(role: str, *, revision: str = "251a724d") -> dict[str, Any]:
    child = lws(f"llm-serving-0-{revision}-{role}", opt_in=None, uid=f"uid-child-{role}")
    child["metadata"]["labels"] = ds_labels(role, revision=revision)
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": keys.DS_API_VERSION,
            "kind": keys.DS_KIND,
            "name": "llm-serving",
            "uid": DS_UID,
            "controller": True,
        }
    ]
    return child


def cluster(
    *,
    leaderworkersets: Sequence[dict[str, Any]] = (),
    disaggregatedsets: Sequence[dict[str, Any]] | None = (),
    pods: Sequence[dict[str, Any]] = (),
    domains: Sequence[dict[str, Any]] | None = (),
    ready_templates: Sequence[str] = (),
) -> snapshot.Snapshot:
    """A snapshot; `ready_templates` are the domains whose claim template the driver made."""
    return snapshot.Snapshot(
        leaderworkersets=list(leaderworkersets),
        disaggregatedsets=None if disaggregatedsets is None else list(disaggregatedsets),
        pods=list(pods),
        domains=None if domains is None else list(domains),
        claim_templates={(NS, names.claim_template_name(d)): "2026-12-04T10:00:02Z" for d in ready_templates},
        node_cliques={f"gb200-00{i}": "45640c00-b35b-58b8-b0e8-ed410280e5ea.1" for i in range(8)},
    )
