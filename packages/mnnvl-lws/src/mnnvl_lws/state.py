"""What this controller knows about the cluster, kept current from watch events and fresh lists, and the
registry its kopf handlers (watchers and webhooks) are registered in."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_api.decisions import opt_in, plans
from mnnvl_runtime import indexes, stores

from . import planner, rules

registry = kopf.OperatorRegistry()

NamespacedName = stores.NamespacedName
#: Only replica-scope pods are watched (and listed); every ComputeDomain is (a foreign one may collide).
POD_SELECTOR = keys.SCOPE_LABEL
#: Only ControllerRevisions of LWS template revisions (and of their StatefulSets, which `apply_revision` skips).
REVISION_SELECTOR = keys.LWS_TEMPLATE_REVISION_HASH_LABEL


@dataclasses.dataclass
class Stores(stores.ScopeStores[planner.LeaderWorkerSetFacts, planner.ReplicaPodFacts]):
    manager = planner.MANAGER
    pod_resource = stores.Resource(api_version="v1", plural="pods", label_selector=POD_SELECTOR)
    workload_resource = stores.Resource(api_version=keys.LWS_API_VERSION, plural=keys.LWS_PLURAL)
    #: (namespace, LWS name) → upstream's records of its template revisions
    revisions: indexes.Index[NamespacedName, rules.TemplateRevision] = dataclasses.field(default_factory=indexes.Index)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.revision_mirror = stores.Mirror(
            stores.Resource(api_version="apps/v1", plural="controllerrevisions", label_selector=REVISION_SELECTOR),
            self.apply_revision,
        )

    def more_mirrors(self) -> list[stores.Mirror[NamespacedName]]:
        return [self.revision_mirror]

    def pod_of(self, pod: Mapping[str, Any]) -> tuple[str, planner.ReplicaPodFacts] | None:
        position = rules.pod_position(pod)
        labels = pod["metadata"].get("labels") or {}
        if labels.get(keys.SCOPE_LABEL) != keys.SCOPE_REPLICA or not isinstance(position, rules.PodPosition):
            return None
        return position.lws, pod_facts(pod, position)

    def workload_of(self, body: Mapping[str, Any]) -> planner.LeaderWorkerSetFacts:
        meta = body["metadata"]
        return planner.LeaderWorkerSetFacts(
            namespace=meta.get("namespace", ""),
            name=meta["name"],
            uid=meta["uid"],
            deleting=bool(meta.get("deletionTimestamp")),
            opted_in=opt_in.is_opted_in(meta.get("annotations") or {}, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION),
        )

    def apply_revision(self, uid: str, revision: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index upstream's record of an LWS template revision; returns the (namespace, LWS) it belongs to."""
        before = self.revisions.groups_of(uid)
        self.revisions.drop(uid)
        facts = None if revision is None else rules.template_revision(revision)
        if revision is None or facts is None:
            return list(before)
        key = (revision["metadata"].get("namespace", ""), facts.lws)
        self.revisions.put(uid, {key: facts})
        return sorted({*before, key})

    # --- reading -------------------------------------------------------------------------------------------

    def stamped_revisions(self, namespace: str, lws: str, lws_uid: str) -> frozenset[str]:
        """The revision hashes of the LWS with `lws_uid` that upstream recorded with our stamp."""
        return frozenset(
            found.hash
            for found in self.revisions.get((namespace, lws)).values()
            if rules.revision_opted_in([found], lws_uid=lws_uid, revision_hash=found.hash)
        )

    def snapshot(self, namespace: str, lws: str, *, gate_enabled: bool) -> planner.Snapshot:
        pods = self.scope_pods(namespace, lws)
        recorded = [p.domain for p in pods if p.domain]
        workload = self.workload(namespace, lws)
        stamped = frozenset() if workload is None else self.stamped_revisions(namespace, lws, workload.uid)
        found = self.domains_for(namespace, lws, also=recorded)
        return self.snapshot_of(
            planner.Snapshot,
            namespace,
            lws,
            pods=pods,
            found=found,
            wanted=recorded,
            gate_enabled=gate_enabled,
            stamped_revisions=stamped,
        )


def pod_facts(pod: Mapping[str, Any], position: rules.PodPosition) -> planner.ReplicaPodFacts:
    observed = dataclasses.asdict(plans.pod_facts(pod))
    revision = (pod["metadata"].get("labels") or {}).get(keys.LWS_TEMPLATE_REVISION_HASH_LABEL)
    return planner.ReplicaPodFacts(**observed, group=position.group, is_leader=position.is_leader, revision=revision)


#: The one store of this process: fed by the watch handlers and fresh lists, read by reconciliation and admission.
STORES = Stores()
