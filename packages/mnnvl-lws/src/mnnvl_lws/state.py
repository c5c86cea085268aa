"""What this controller knows about the cluster, kept current from watch events, and the registry its
kopf handlers (watchers and webhooks) are registered in."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains, injection, references
from mnnvl_runtime import indexes

from . import decisions, planner

registry = kopf.OperatorRegistry()

NamespacedName = tuple[str, str]


@dataclasses.dataclass
class Stores:
    #: (namespace, LWS name) → its replica-scope pods
    pods: indexes.Index[NamespacedName, planner.PodFacts] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, domain) → names of the LWS whose pods record it
    domain_users: indexes.Index[NamespacedName, str] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, claim template) → non-terminal pods (of any scope) referencing it
    templates_in_use: indexes.Index[NamespacedName, str] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, LWS name) → the LeaderWorkerSet
    workloads: indexes.Index[NamespacedName, planner.Workload] = dataclasses.field(default_factory=indexes.Index)
    #: ("name" | "workload" | "template", namespace, value) → ComputeDomains
    compute_domains: indexes.Index[tuple[str, str, str], domains.DomainFacts] = dataclasses.field(
        default_factory=indexes.Index
    )
    #: (namespace, name) → ResourceClaimTemplates that exist
    templates: indexes.Index[NamespacedName, bool] = dataclasses.field(default_factory=indexes.Index)

    # --- feeding -------------------------------------------------------------------------------------------

    def observe_pod(self, pod: Mapping[str, Any], *, deleted: bool) -> NamespacedName | None:
        """Record a pod; returns the (namespace, LWS) it belongs to when it is a replica-scope pod."""
        meta = pod["metadata"]
        key = indexes.object_key(pod)
        namespace, name = meta.get("namespace", ""), meta["name"]
        labels = meta.get("labels") or {}
        if deleted:
            for index in (self.pods, self.domain_users, self.templates_in_use):
                index.drop(key)
        else:
            self.templates_in_use.put(
                key, dict.fromkeys(((namespace, t) for t in references.live_claim_templates(pod)), name)
            )
        if labels.get(keys.SCOPE_LABEL) != keys.SCOPE_REPLICA:
            return None
        position = decisions.pod_position(pod)
        if not isinstance(position, decisions.PodPosition):
            return None
        if not deleted:
            facts = pod_facts(pod, position)
            self.pods.put(key, {(namespace, position.lws): facts})
            self.domain_users.put(key, {(namespace, facts.domain): position.lws} if facts.domain else {})
        return namespace, position.lws

    def observe_workload(self, lws: Mapping[str, Any], *, deleted: bool) -> NamespacedName:
        meta = lws["metadata"]
        workload = (meta.get("namespace", ""), meta["name"])
        if deleted:
            self.workloads.drop(indexes.object_key(lws))
        else:
            facts = planner.Workload(
                namespace=workload[0], name=workload[1], uid=meta["uid"], deleting=bool(meta.get("deletionTimestamp"))
            )
            self.workloads.put(indexes.object_key(lws), {workload: facts})
        return workload

    def observe_domain(self, domain: Mapping[str, Any], *, deleted: bool) -> list[NamespacedName]:
        """Record a ComputeDomain; returns the LWS keys that care about it."""
        facts = domains.facts_of(domain)
        key = indexes.object_key(domain)
        if deleted:
            self.compute_domains.drop(key)
        else:
            contributions = {
                ("name", facts.namespace, facts.name): facts,
                ("template", facts.namespace, facts.claim_template): facts,
            }
            if facts.workload and facts.managed_by == planner.MANAGER:
                contributions[("workload", facts.namespace, facts.workload)] = facts
            self.compute_domains.put(key, contributions)
        return self._interested(facts)

    def observe_template(self, template: Mapping[str, Any], *, deleted: bool) -> list[NamespacedName]:
        meta = template["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if deleted:
            self.templates.drop(indexes.object_key(template))
        else:
            self.templates.put(indexes.object_key(template), {key: True})
        return [
            lws for facts in self.compute_domains.get(("template", *key)).values() for lws in self._interested(facts)
        ]

    def _interested(self, facts: domains.DomainFacts) -> list[NamespacedName]:
        found = {(facts.namespace, lws) for lws in self.domain_users.get((facts.namespace, facts.name)).values()}
        if facts.workload and facts.managed_by == planner.MANAGER:
            found.add((facts.namespace, facts.workload))
        return sorted(found)

    # --- reading -------------------------------------------------------------------------------------------

    def domain(self, namespace: str, name: str) -> domains.DomainFacts | None:
        return self.compute_domains.newest(("name", namespace, name), going=_deleting)

    def workload(self, namespace: str, name: str) -> planner.Workload | None:
        return self.workloads.newest((namespace, name), going=_deleting)

    def domain_ready(self, namespace: str, name: str, lws: str) -> bool:
        workload = self.workload(namespace, lws)
        return workload is not None and domains.is_ready(
            self.domain(namespace, name),
            owner_uid=workload.uid,
            manager=planner.MANAGER,
            template_exists=(namespace, _template_of(name)) in self.templates,
        )

    def snapshot(self, namespace: str, lws: str, *, gate_enabled: bool) -> planner.Snapshot:
        pods = tuple(self.pods.get((namespace, lws)).values())
        found: dict[str, domains.DomainFacts] = {}
        for facts in self.compute_domains.get(("workload", namespace, lws)).values():
            found[facts.name] = self.domain(namespace, facts.name) or facts
        for pod in pods:
            if pod.domain and pod.domain not in found and (recorded := self.domain(namespace, pod.domain)):
                found[pod.domain] = recorded
        relevant_templates = {_template_of(name) for name in found} | {_template_of(p.domain) for p in pods if p.domain}
        return planner.Snapshot(
            namespace=namespace,
            lws_name=lws,
            workload=self.workload(namespace, lws),
            pods=pods,
            domains=found,
            existing_templates=frozenset(t for t in relevant_templates if (namespace, t) in self.templates),
            templates_in_use=frozenset(
                f.claim_template for f in found.values() if (namespace, f.claim_template) in self.templates_in_use
            ),
            gate_enabled=gate_enabled,
        )

    def workload_keys(self) -> list[NamespacedName]:
        """Every LWS this controller may have work for: known objects, their pods, their domains."""
        managed = {(namespace, name) for tag, namespace, name in self.compute_domains.groups() if tag == "workload"}
        return sorted(set(self.workloads.groups()) | set(self.pods.groups()) | managed)


def _deleting(facts: domains.DomainFacts | planner.Workload) -> bool:
    return facts.deleting


def _template_of(domain: str) -> str:
    return names.claim_template_name(domain)


def pod_facts(pod: Mapping[str, Any], position: decisions.PodPosition) -> planner.PodFacts:
    meta = pod["metadata"]
    return planner.PodFacts(
        name=meta["name"],
        group=position.group,
        is_leader=position.is_leader,
        domain=(meta.get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION),
        gated=injection.is_gated(pod.get("spec") or {}),
        terminal=not references.is_non_terminal(pod),
        deleting=bool(meta.get("deletionTimestamp")),
    )


#: The one store of this process: fed by the watch handlers, read by reconciliation and admission.
STORES = Stores()
