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
#: Only ControllerRevisions of LWS template revisions (and of their StatefulSets, which `apply_revision` skips).
REVISION_SELECTOR = keys.LWS_TEMPLATE_REVISION_HASH_LABEL


@dataclasses.dataclass
class Stores(stores.ScopeStores):
    manager = planner.MANAGER
    #: (namespace, LWS name) → its replica-scope pods
    pods: indexes.Index[NamespacedName, planner.PodFacts] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, LWS name) → the LeaderWorkerSet
    workloads: indexes.Index[NamespacedName, planner.Workload] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, LWS name) → upstream's records of its template revisions
    revisions: indexes.Index[NamespacedName, decisions.TemplateRevision] = dataclasses.field(
        default_factory=indexes.Index
    )

    def __post_init__(self) -> None:
        self.pod_mirror = stores.Mirror(
            stores.Resource(api_version="v1", plural="pods", label_selector=POD_SELECTOR), self.apply_pod
        )
        self.workload_mirror = stores.Mirror(
            stores.Resource(api_version=keys.LWS_API_VERSION, plural=keys.LWS_PLURAL), self.apply_workload
        )
        self.revision_mirror = stores.Mirror(
            stores.Resource(api_version="apps/v1", plural="controllerrevisions", label_selector=REVISION_SELECTOR),
            self.apply_revision,
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
        return [self.pod_mirror, self.workload_mirror, self.revision_mirror, self.domain_mirror, self.template_mirror]

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

    def apply_revision(self, uid: str, revision: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index upstream's record of an LWS template revision; returns the (namespace, LWS) it belongs to."""
        before = self.revisions.groups_of(uid)
        self.revisions.drop(uid)
        facts = None if revision is None else decisions.template_revision(revision)
        if revision is None or facts is None:
            return list(before)
        key = (revision["metadata"].get("namespace", ""), facts.lws)
        self.revisions.put(uid, {key: facts})
        return sorted({*before, key})

    # --- reading -------------------------------------------------------------------------------------------

    def workload(self, namespace: str, name: str) -> planner.Workload | None:
        return self.workloads.newest((namespace, name))

    def stamped_revisions(self, namespace: str, lws: str, lws_uid: str) -> frozenset[str]:
        """The revision hashes of the LWS with `lws_uid` that upstream recorded with our stamp."""
        return frozenset(
            found.hash
            for found in self.revisions.get((namespace, lws)).values()
            if decisions.revision_opted_in([found], lws_uid=lws_uid, revision_hash=found.hash)
        )

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
        workload = self.workload(namespace, lws)
        return planner.Snapshot(
            namespace=namespace,
            lws_name=lws,
            workload=workload,
            pods=pods,
            domains=found,
            existing_templates=usage.existing_templates,
            templates_in_use=usage.templates_in_use,
            domains_recorded=usage.domains_recorded,
            stamped_revisions=frozenset() if workload is None else self.stamped_revisions(namespace, lws, workload.uid),
            gate_enabled=gate_enabled,
        )

    def gated_pods(self) -> int:
        return sum(1 for key in self.pods.groups() for pod in self.pods.get(key).values() if pod.gated)

    def workload_keys(self) -> list[NamespacedName]:
        """Every LWS this controller may have work for: known objects, their pods, their domains."""
        return sorted(set(self.workloads.groups()) | set(self.pods.groups()) | self.managed_workloads())


def pod_facts(pod: Mapping[str, Any], position: decisions.PodPosition) -> planner.PodFacts:
    observed = dataclasses.asdict(plans.pod_facts(pod))
    revision = (pod["metadata"].get("labels") or {}).get(keys.LWS_TEMPLATE_REVISION_HASH_LABEL)
    return planner.PodFacts(**observed, group=position.group, is_leader=position.is_leader, revision=revision)


#: The one store of this process: fed by the watch handlers and fresh lists, read by reconciliation and admission.
STORES = Stores()
