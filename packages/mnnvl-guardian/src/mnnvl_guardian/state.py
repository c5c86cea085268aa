"""What the guardian knows: managed domains and the claim templates live pods use, kept from watch events."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from mnnvl_api.decisions import domains, references
from mnnvl_runtime import indexes

registry = kopf.OperatorRegistry()
NamespacedName = tuple[str, str]


@dataclasses.dataclass
class Stores:
    # Every index is keyed by object uid (see `mnnvl_runtime.indexes`); its groups are (namespace, name) pairs.
    #: (namespace, domain) → the managed domain
    managed: indexes.Index[NamespacedName, domains.DomainFacts] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, claim template) → the managed domain that names it
    by_template: indexes.Index[NamespacedName, str] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, claim template) → non-terminal pods referencing it
    in_use: indexes.Index[NamespacedName, str] = dataclasses.field(default_factory=indexes.Index)

    def observe_domain(self, body: Mapping[str, Any], *, deleted: bool) -> NamespacedName | None:
        facts = domains.facts_of(body)
        uid = indexes.object_key(body)
        if deleted or not facts.managed:
            self.managed.drop(uid)
            self.by_template.drop(uid)
            return None
        key = (facts.namespace, facts.name)
        self.managed.put(uid, {key: facts})
        self.by_template.put(uid, {(facts.namespace, facts.claim_template): facts.name})
        return key

    def observe_pod(self, pod: Mapping[str, Any], *, deleted: bool) -> list[NamespacedName]:
        """Record a pod; returns the managed domains whose use may have changed."""
        meta = pod["metadata"]
        key = indexes.object_key(pod)
        namespace = meta.get("namespace", "")
        before = set(self.in_use.groups_of(key))
        if deleted:
            self.in_use.drop(key)
        else:
            templates = references.live_claim_templates(pod)
            self.in_use.put(key, dict.fromkeys(((namespace, t) for t in templates), meta["name"]))
        touched = before | set(self.in_use.groups_of(key))
        return sorted({(template[0], name) for template in touched for name in self.by_template.get(template).values()})

    def domain(self, key: NamespacedName) -> domains.DomainFacts | None:
        return self.managed.newest(key, going=lambda facts: facts.deleting)

    def template_in_use(self, facts: domains.DomainFacts) -> bool:
        return (facts.namespace, facts.claim_template) in self.in_use

    def domain_keys(self) -> list[NamespacedName]:
        return self.managed.groups()
