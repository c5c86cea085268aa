"""What this controller knows about the cluster, kept current from watch events and fresh lists, and the
registry its kopf handlers (watchers and webhooks) are registered in."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_api.decisions import enrollment, ownership, plans
from mnnvl_runtime import indexes, stores

from . import planner, rules

registry = kopf.OperatorRegistry()

NamespacedName = stores.NamespacedName
#: Only slice-scope pods are watched (and listed).
POD_SELECTOR = f"{keys.SCOPE_LABEL}={keys.SCOPE_SLICE}"
#: Only LeaderWorkerSets of a DisaggregatedSet.
LWS_SELECTOR = keys.DS_NAME_LABEL


@dataclasses.dataclass
class Stores(stores.ScopeStores[planner.DisaggregatedSetFacts, planner.SlicePodFacts]):
    manager = planner.MANAGER
    pod_resource = stores.Resource(api_version="v1", plural="pods", label_selector=POD_SELECTOR)
    workload_resource = stores.Resource(api_version=keys.DS_API_VERSION, plural=keys.DS_PLURAL)
    #: (namespace, DisaggregatedSet name) → the LeaderWorkerSets it controls
    children: indexes.Index[NamespacedName, planner.Child] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, LeaderWorkerSet name) → the same, by the child's own name (pod admission asks by it)
    children_by_name: indexes.Index[NamespacedName, planner.Child] = dataclasses.field(default_factory=indexes.Index)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.child_mirror = stores.Mirror(
            stores.Resource(api_version=keys.LWS_API_VERSION, plural=keys.LWS_PLURAL, label_selector=LWS_SELECTOR),
            self.apply_child,
        )

    def more_mirrors(self) -> list[stores.Mirror[NamespacedName]]:
        return [self.child_mirror]

    def more_keys(self) -> set[NamespacedName]:
        return set(self.children.groups())

    def pod_of(self, pod: Mapping[str, Any]) -> tuple[str, planner.SlicePodFacts] | None:
        labels = pod["metadata"].get("labels") or {}
        ds = labels.get(keys.DS_NAME_LABEL)
        if labels.get(keys.SCOPE_LABEL) != keys.SCOPE_SLICE or not ds:
            return None
        return ds, plans.pod_facts(pod)

    def workload_of(self, body: Mapping[str, Any]) -> planner.DisaggregatedSetFacts | None:
        return workload_facts(body)

    def apply_child(self, uid: str, lws: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index a LeaderWorkerSet a DisaggregatedSet controls; returns that DisaggregatedSet's key."""
        before = self.children.groups_of(uid)
        self.children.drop(uid)
        self.children_by_name.drop(uid)
        child = None if lws is None else child_facts(lws)
        if lws is None or child is None:
            return list(before)
        namespace = lws["metadata"].get("namespace", "")
        version = indexes.version_of(lws)
        self.children.put(uid, {(namespace, child.ds_name): child}, version=version)
        self.children_by_name.put(uid, {(namespace, child.name): child}, version=version)
        return sorted({*before, (namespace, child.ds_name)})

    # --- reading -------------------------------------------------------------------------------------------

    def child(self, namespace: str, name: str) -> planner.Child | None:
        return self.children_by_name.newest((namespace, name))

    def snapshot(self, namespace: str, ds: str, *, gate_enabled: bool) -> planner.Snapshot:
        pods = self.scope_pods(namespace, ds)
        children = tuple(self.children.get((namespace, ds)).values())
        workload = self.workload(namespace, ds)
        slices = range(workload.slices if workload is not None else 0)
        made = self.domains_for(namespace, ds, also=())
        revisions = {child.revision for child in children} | {f.revision for f in made.values() if f.revision}
        positions = {(child.slice, child.revision) for child in children} | {(s, r) for s in slices for r in revisions}
        wanted = {planner.domain_name(ds, position) for position in positions}
        wanted |= {pod.domain for pod in pods if pod.domain}
        found = {**made, **self.known_domains(namespace, sorted(wanted - made.keys()))}
        return self.snapshot_of(
            planner.Snapshot,
            namespace,
            ds,
            pods=pods,
            found=found,
            wanted=wanted,
            gate_enabled=gate_enabled,
            children=children,
        )


def workload_facts(ds: Mapping[str, Any]) -> planner.DisaggregatedSetFacts | None:
    """What the planner needs of a DisaggregatedSet; None for one whose shape cannot be read."""
    model = rules.parse(ds)
    if model is None or model.metadata.uid is None:
        return None
    return planner.DisaggregatedSetFacts(
        namespace=model.metadata.namespace or "",
        name=model.metadata.name,
        uid=model.metadata.uid,
        deleting=model.metadata.is_deleting,
        opted_in=bool(enrollment.enroll_roles(model).slice_roles),
        slices=model.spec.slices,
    )


def child_facts(lws: Mapping[str, Any]) -> planner.Child | None:
    """What the planner needs of a LeaderWorkerSet that a DisaggregatedSet controls (None: it is none)."""
    meta = lws["metadata"]
    position = rules.child_position(meta)
    owner = ownership.disaggregated_set_reference(meta)
    if position is None or owner is None:
        return None
    return planner.Child(
        name=meta["name"],
        ds_name=position.ds,
        owner_uid=str(owner.get("uid")),
        slice=position.slice,
        revision=position.revision,
        role=position.role,
        slice_scope=rules.in_slice_scope(lws),
        deleting=bool(meta.get("deletionTimestamp")),
    )


#: The one store of this process: fed by the watch handlers and fresh lists, read by reconciliation and admission.
STORES = Stores()
