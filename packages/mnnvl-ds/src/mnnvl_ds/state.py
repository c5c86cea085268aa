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

from . import decisions, planner

registry = kopf.OperatorRegistry()

NamespacedName = stores.NamespacedName
#: Only slice-scope pods are watched (and listed).
POD_SELECTOR = f"{keys.SCOPE_LABEL}={keys.SCOPE_SLICE}"
#: Only LeaderWorkerSets of a DisaggregatedSet.
LWS_SELECTOR = keys.DS_NAME_LABEL


@dataclasses.dataclass
class Stores(stores.ScopeStores):
    manager = planner.MANAGER
    #: (namespace, DisaggregatedSet name) → its slice-scope pods
    pods: indexes.Index[NamespacedName, planner.PodFacts] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, DisaggregatedSet name) → the DisaggregatedSet
    workloads: indexes.Index[NamespacedName, planner.Workload] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, DisaggregatedSet name) → the LeaderWorkerSets it controls
    children: indexes.Index[NamespacedName, planner.Child] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, LeaderWorkerSet name) → the same, by the child's own name (pod admission asks by it)
    children_by_name: indexes.Index[NamespacedName, planner.Child] = dataclasses.field(default_factory=indexes.Index)

    def __post_init__(self) -> None:
        self.pod_mirror = stores.Mirror(
            stores.Resource(api_version="v1", plural="pods", label_selector=POD_SELECTOR), self.apply_pod
        )
        self.workload_mirror = stores.Mirror(
            stores.Resource(api_version=keys.DS_API_VERSION, plural=keys.DS_PLURAL), self.apply_workload
        )
        self.child_mirror = stores.Mirror(
            stores.Resource(api_version=keys.LWS_API_VERSION, plural=keys.LWS_PLURAL, label_selector=LWS_SELECTOR),
            self.apply_child,
        )
        self.domain_mirror = stores.Mirror(
            stores.Resource(api_version=keys.COMPUTE_DOMAIN_API_VERSION, plural=keys.COMPUTE_DOMAIN_PLURAL),
            self.apply_domain,
        )
        self.template_mirror = stores.Mirror(
            stores.Resource(api_version="resource.k8s.io/v1", plural="resourceclaimtemplates"), self.apply_template
        )

    @property
    def mirrors(self) -> list[stores.Mirror[NamespacedName]]:
        return [self.pod_mirror, self.workload_mirror, self.child_mirror, self.domain_mirror, self.template_mirror]

    # --- feeding (through the mirrors: watch events and fresh lists) ---------------------------------------

    def apply_pod(self, uid: str, pod: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index a slice-scope pod (None: its deletion); returns the (namespace, DisaggregatedSet) it belongs to."""
        before = self.pods.groups_of(uid)
        self.shared.apply_pod(uid, pod)
        self.pods.drop(uid)
        self.domain_users.drop(uid)
        if pod is None:
            return list(before)
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        ds = labels.get(keys.DS_NAME_LABEL)
        if labels.get(keys.SCOPE_LABEL) != keys.SCOPE_SLICE or not ds:
            return list(before)
        namespace = meta.get("namespace", "")
        facts = plans.pod_facts(pod)
        self.pods.put(uid, {(namespace, ds): facts})
        self.domain_users.put(uid, {(namespace, facts.domain): ds} if facts.domain else {})
        return sorted({*before, (namespace, ds)})

    def apply_workload(self, uid: str, ds: Mapping[str, Any] | None) -> list[NamespacedName]:
        before = self.workloads.groups_of(uid)
        facts = None if ds is None else workload_facts(ds)
        if ds is None or facts is None:
            self.workloads.drop(uid)
            return list(before)
        key = (facts.namespace, facts.name)
        self.workloads.put(uid, {key: facts}, version=indexes.version_of(ds))
        return sorted({*before, key})

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

    def workload(self, namespace: str, name: str) -> planner.Workload | None:
        return self.workloads.newest((namespace, name))

    def child(self, namespace: str, name: str) -> planner.Child | None:
        return self.children_by_name.newest((namespace, name))

    def snapshot(self, namespace: str, ds: str, *, gate_enabled: bool) -> planner.Snapshot:
        pods = tuple(self.pods.get((namespace, ds)).values())
        children = tuple(self.children.get((namespace, ds)).values())
        found = {
            facts.name: self.shared.domain(namespace, facts.name) or facts
            for facts in self.shared.domains_of(namespace, ds)
        }
        workload = self.workload(namespace, ds)
        slices = range(workload.slices if workload is not None else 0)
        revisions = {child.revision for child in children} | {f.revision for f in found.values() if f.revision}
        positions = {(child.slice, child.revision) for child in children} | {(s, r) for s in slices for r in revisions}
        wanted = {planner.domain_name(ds, position) for position in positions}
        wanted |= {pod.domain for pod in pods if pod.domain}
        for name in wanted - found.keys():
            known = self.shared.domain(namespace, name)
            if known is not None:
                found[name] = known
        usage = self.usage(namespace, found, wanted)
        return planner.Snapshot(
            namespace=namespace,
            ds_name=ds,
            workload=workload,
            children=children,
            pods=pods,
            domains=found,
            existing_templates=usage.existing_templates,
            templates_in_use=usage.templates_in_use,
            domains_recorded=usage.domains_recorded,
            gate_enabled=gate_enabled,
        )

    def gated_pods(self) -> int:
        return sum(1 for key in self.pods.groups() for pod in self.pods.get(key).values() if pod.gated)

    def workload_keys(self) -> list[NamespacedName]:
        """Every DisaggregatedSet this controller may have work for: known objects, their LeaderWorkerSets and
        pods, their domains."""
        return sorted(
            set(self.workloads.groups())
            | set(self.children.groups())
            | set(self.pods.groups())
            | self.managed_workloads()
        )


def workload_facts(ds: Mapping[str, Any]) -> planner.Workload | None:
    """What the planner needs of a DisaggregatedSet; None for one whose shape cannot be read."""
    model = decisions.parse(ds)
    if model is None or model.metadata.uid is None:
        return None
    return planner.Workload(
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
    position = decisions.position_of(meta)
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
        slice_scope=decisions.in_slice_scope(lws),
        deleting=bool(meta.get("deletionTimestamp")),
    )


#: The one store of this process: fed by the watch handlers and fresh lists, read by reconciliation and admission.
STORES = Stores()
