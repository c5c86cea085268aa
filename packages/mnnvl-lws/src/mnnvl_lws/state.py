"""What this controller knows about the cluster, kept current from watch events and fresh lists, and the
registry its kopf handlers (watchers and webhooks) are registered in."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains, opt_in, plans
from mnnvl_runtime import indexes, stores

from . import decisions, planner

registry = kopf.OperatorRegistry()

NamespacedName = tuple[str, str]
#: Only replica-scope pods are watched (and listed); every ComputeDomain is (a foreign one may collide).
POD_SELECTOR = keys.SCOPE_LABEL


@dataclasses.dataclass
class Stores(stores.ScopeStores):
    manager = planner.MANAGER
    #: (namespace, LWS name) → its replica-scope pods
    pods: indexes.Index[NamespacedName, planner.PodFacts] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, LWS name) → the LeaderWorkerSet
    workloads: indexes.Index[NamespacedName, planner.Workload] = dataclasses.field(default_factory=indexes.Index)

    def __post_init__(self) -> None:
        self.pod_mirror = stores.Mirror(
            stores.Resource(api_version="v1", plural="pods", label_selector=POD_SELECTOR), self.apply_pod
        )
        self.workload_mirror = stores.Mirror(
            stores.Resource(api_version=keys.LWS_API_VERSION, plural=keys.LWS_PLURAL), self.apply_workload
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
        return [self.pod_mirror, self.workload_mirror, self.domain_mirror, self.template_mirror]

    # --- feeding (through the mirrors: watch events and fresh lists) ---------------------------------------

    def apply_pod(self, uid: str, pod: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index a replica-scope pod (None: its deletion); returns the (namespace, LWS) it belongs to."""
        before = self.pods.groups_of(uid)
        self.shared.apply_pod(uid, pod)
        self.pods.drop(uid)
        self.domain_users.drop(uid)
        if pod is None:
            return list(before)
        meta = pod["metadata"]
        namespace = meta.get("namespace", "")
        position = decisions.pod_position(pod)
        if (meta.get("labels") or {}).get(keys.SCOPE_LABEL) != keys.SCOPE_REPLICA or not isinstance(
            position, decisions.PodPosition
        ):
            return list(before)
        facts = pod_facts(pod, position)
        self.pods.put(uid, {(namespace, position.lws): facts})
        self.domain_users.put(uid, {(namespace, facts.domain): position.lws} if facts.domain else {})
        return sorted({*before, (namespace, position.lws)})

    def apply_workload(self, uid: str, lws: Mapping[str, Any] | None) -> list[NamespacedName]:
        before = self.workloads.groups_of(uid)
        if lws is None:
            self.workloads.drop(uid)
            return list(before)
        meta = lws["metadata"]
        workload = (meta.get("namespace", ""), meta["name"])
        facts = planner.Workload(
            namespace=workload[0],
            name=workload[1],
            uid=meta["uid"],
            deleting=bool(meta.get("deletionTimestamp")),
            opted_in=opt_in.is_opted_in(meta.get("annotations") or {}, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION),
        )
        self.workloads.put(uid, {workload: facts}, version=indexes.version_of(lws))
        return [workload]

    # --- reading -------------------------------------------------------------------------------------------

    def workload(self, namespace: str, name: str) -> planner.Workload | None:
        return self.workloads.newest((namespace, name))

    def domain_ready(self, namespace: str, name: str, lws: str) -> bool:
        workload = self.workload(namespace, lws)
        return workload is not None and domains.is_ready(
            self.shared.domain(namespace, name),
            owner_uid=workload.uid,
            manager=planner.MANAGER,
            template_exists=self.shared.template_exists(namespace, names.claim_template_name(name)),
        )

    def snapshot(self, namespace: str, lws: str, *, gate_enabled: bool) -> planner.Snapshot:
        pods = tuple(self.pods.get((namespace, lws)).values())
        found = {
            facts.name: self.shared.domain(namespace, facts.name) or facts
            for facts in self.shared.domains_of(namespace, lws)
        }
        for pod in pods:
            if pod.domain and pod.domain not in found and (recorded := self.shared.domain(namespace, pod.domain)):
                found[pod.domain] = recorded
        usage = self.usage(namespace, found, (p.domain for p in pods if p.domain))
        return planner.Snapshot(
            namespace=namespace,
            lws_name=lws,
            workload=self.workload(namespace, lws),
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
        """Every LWS this controller may have work for: known objects, their pods, their domains."""
        return sorted(set(self.workloads.groups()) | set(self.pods.groups()) | self.managed_workloads())


def pod_facts(pod: Mapping[str, Any], position: decisions.PodPosition) -> planner.PodFacts:
    observed = dataclasses.asdict(plans.pod_facts(pod))
    return planner.PodFacts(**observed, group=position.group, is_leader=position.is_leader)


#: The one store of this process: fed by the watch handlers and fresh lists, read by reconciliation and admission.
STORES = Stores()
