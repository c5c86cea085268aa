"""What the guardian knows: managed domains and which live pods use them, kept from watch events and fresh
lists (the shared `DomainStores`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_api.decisions import domains
from mnnvl_runtime import domain_writer, stores

registry = kopf.OperatorRegistry()
NamespacedName = tuple[str, str]
#: The guardian is sent only pods our webhooks gave a scope, and only ComputeDomains an mnnvl controller manages.
POD_SELECTOR = keys.SCOPE_LABEL
DOMAIN_SELECTOR = f"{keys.MANAGED_BY_LABEL} in ({','.join(sorted(keys.DOMAIN_MANAGERS))})"


@dataclasses.dataclass
class Stores:
    shared: stores.DomainStores = dataclasses.field(default_factory=stores.DomainStores)

    def __post_init__(self) -> None:
        self.domain_mirror = stores.Mirror(
            stores.Resource(
                api_version=keys.COMPUTE_DOMAIN_API_VERSION,
                plural=keys.COMPUTE_DOMAIN_PLURAL,
                label_selector=DOMAIN_SELECTOR,
            ),
            self.apply_domain,
        )
        self.pod_mirror = stores.Mirror(
            stores.Resource(api_version="v1", plural="pods", label_selector=POD_SELECTOR), self.apply_pod
        )

    @property
    def mirrors(self) -> list[stores.Mirror[NamespacedName]]:
        return [self.domain_mirror, self.pod_mirror]

    def apply_domain(self, uid: str, body: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index a domain the guardian may act on (managed, by identity); returns its key."""
        before = self._keys_of(uid)
        self.shared.apply_domain(uid, body if body is not None and domains.facts_of(body).managed else None)
        return sorted({*before, *self._keys_of(uid)})

    def apply_pod(self, uid: str, pod: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index what a pod uses; returns the managed domains whose use may have changed."""
        before = {*self.shared.template_users.groups_of(uid), *self.shared.domain_recorders.groups_of(uid)}
        self.shared.apply_pod(uid, pod)
        after = {*self.shared.template_users.groups_of(uid), *self.shared.domain_recorders.groups_of(uid)}
        found: set[NamespacedName] = set()
        for namespace, name in before | after:
            found |= {(namespace, f.name) for f in self.shared.domains_by_template(namespace, name)}
            if self.shared.domain(namespace, name) is not None:
                found.add((namespace, name))
        return sorted(found)

    def _keys_of(self, uid: str) -> list[NamespacedName]:
        return [
            (namespace, name) for tag, namespace, name in self.shared.compute_domains.groups_of(uid) if tag == "name"
        ]

    def domain(self, key: NamespacedName) -> domains.DomainFacts | None:
        return self.shared.domain(*key)

    def in_use(self, facts: domains.DomainFacts) -> bool:
        return self.shared.in_use(facts)

    def domain_keys(self) -> list[NamespacedName]:
        return [(namespace, name) for tag, namespace, name in self.shared.compute_domains.groups() if tag == "name"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DenyReads:
    """What Deny mode's webhook reads of the running guardian (handed over in kopf's memo as `deny_reads`): its
    stores, their sync barrier, and its domain writer, whose limiter of fresh lists the webhook's lists share."""

    stores: Stores
    synced: asyncio.Event
    writer: domain_writer.DomainWriter
