"""Builders of plain objects for mnnvl-lws unit tests; they refuse shapes the real system never produces."""

from __future__ import annotations

import copy
from typing import Any

from mnnvl_api import keys
from mnnvl_api.decisions import domains, opt_in
from mnnvl_lws import planner

from ..mnnvl_api import pods, snapshots
from ..mnnvl_api.domain_builders import UID


def lws(
    name: str = "deepseek-r1",
    *,
    annotations: dict[str, str] | None = None,
    worker_spec: dict[str, Any] | None = None,
    leader_spec: dict[str, Any] | None = None,
    worker_meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    template = pods.leader_worker_template(4, worker_spec=worker_spec, leader_spec=leader_spec, worker_meta=worker_meta)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "serving", "uid": UID, "annotations": annotations or {}},
        "spec": {"replicas": 2, "leaderWorkerTemplate": template},
    }


def opted_in(*, placed: bool = True, **kwargs: Any) -> dict[str, Any]:
    """An opted-in LWS; `placed`: its groups are kept within one NVLink clique, as the seed's example does."""
    annotations = {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}
    if placed:
        annotations[keys.LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION] = keys.GPU_CLIQUE_LABEL
    return lws(annotations=annotations, **kwargs)


def pod(
    name: str,
    *,
    lws_name: str = "deepseek-r1",
    leader: str | None = None,
    spec: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    uid: str | None = None,
    revision: str | None = None,
) -> dict[str, Any]:
    labels = {keys.LWS_NAME_LABEL: lws_name, keys.SCOPE_LABEL: keys.SCOPE_REPLICA}
    if revision is not None:
        labels[keys.LWS_TEMPLATE_REVISION_HASH_LABEL] = revision
    meta_annotations = dict(annotations or {})
    if leader is not None:
        meta_annotations[keys.LWS_LEADER_NAME_ANNOTATION] = leader
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "serving",
            "uid": uid or f"uid-{name}",
            "labels": labels,
            "annotations": meta_annotations,
        },
        "spec": spec or pods.deepseek_worker_spec(),
    }


def workload(uid: str = UID, *, deleting: bool = False) -> planner.LeaderWorkerSetFacts:
    return planner.LeaderWorkerSetFacts(namespace="serving", name="deepseek-r1", uid=uid, deleting=deleting)


def controller_revision(
    lws_: dict[str, Any], revision_hash: str, *, uid: str | None = None, owner_kind: str = "LeaderWorkerSet"
) -> dict[str, Any]:
    """Upstream's ControllerRevision of `lws_`'s templates at `revision_hash`, as lws-manager writes it: controlled by
    the LWS (by uid), labelled with the hash, its data the revision's `spec.leaderWorkerTemplate`."""
    meta = lws_["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": f"{meta['name']}-{revision_hash}-1",
            "namespace": meta["namespace"],
            "labels": {keys.LWS_NAME_LABEL: meta["name"], keys.LWS_TEMPLATE_REVISION_HASH_LABEL: revision_hash},
            "ownerReferences": [
                {
                    "apiVersion": keys.LWS_API_VERSION,
                    "kind": owner_kind,
                    "name": meta["name"],
                    "uid": uid or meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": {
            "spec": {
                "leaderWorkerTemplate": {**copy.deepcopy(lws_["spec"]["leaderWorkerTemplate"]), "$patch": "replace"}
            }
        },
        "revision": 1,
    }


def leader(
    group: int,
    domain: str | None,
    *,
    gated: bool = False,
    terminal: bool = False,
    deleting: bool = False,
    revision: str | None = None,
) -> planner.ReplicaPodFacts:
    return planner.ReplicaPodFacts(
        name=f"deepseek-r1-{group}",
        uid=f"uid-deepseek-r1-{group}",
        group=group,
        is_leader=True,
        domain=domain,
        gate_at=0 if gated else None,
        terminal=terminal,
        deleting=deleting,
        revision=revision,
    )


def worker(group: int, index: int, domain: str | None, *, gated: bool = False) -> planner.ReplicaPodFacts:
    return planner.ReplicaPodFacts(
        name=f"deepseek-r1-{group}-{index}",
        uid=f"uid-deepseek-r1-{group}-{index}",
        group=group,
        is_leader=False,
        domain=domain,
        gate_at=0 if gated else None,
        terminal=False,
        deleting=False,
    )


def snapshot(
    *,
    pods_: tuple[planner.ReplicaPodFacts, ...] = (),
    domains_: tuple[domains.DomainFacts, ...] = (),
    templates: tuple[str, ...] | None = None,
    in_use: tuple[str, ...] = (),
    recorded: tuple[str, ...] = (),
    workload_: planner.LeaderWorkerSetFacts | None = None,
    gate_enabled: bool = True,
    gone: bool = False,
    stamped_revisions: tuple[str, ...] = (),
) -> planner.Snapshot:
    for facts in pods_:
        if not facts.is_leader and not any(p.is_leader and p.group == facts.group for p in pods_):
            raise ValueError(f"worker {facts.name} has no leader in the snapshot")
    return planner.Snapshot(
        namespace="serving",
        workload_name="deepseek-r1",
        workload=None if gone else (workload_ or workload()),
        pods=pods_,
        **snapshots.domain_fields(domains_, templates=templates, in_use=in_use, recorded=recorded),
        stamped_revisions=frozenset(stamped_revisions),
        gate_enabled=gate_enabled,
    )


ENV_ON = opt_in.Environment(gate_enabled=True, api_served=True)
ENV_OFF = opt_in.Environment(gate_enabled=False, api_served=True)
ENV_NO_API = opt_in.Environment(gate_enabled=True, api_served=False)
