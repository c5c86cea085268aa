"""Facts about managed ComputeDomains that every scope controller decides on: ownership, readiness, release."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .. import keys


@dataclasses.dataclass(frozen=True, kw_only=True)
class DomainFacts:
    """What the controllers need to know about one ComputeDomain, read from the object."""

    name: str
    namespace: str
    owner_uid: str | None
    managed_by: str | None
    workload: str | None
    claim_template: str
    deleting: bool
    protected: bool  # carries the protection finalizer

    @property
    def managed(self) -> bool:
        return self.managed_by in keys.DOMAIN_MANAGERS and self.owner_uid is not None


def facts_of(domain: Mapping[str, Any]) -> DomainFacts:
    meta = domain["metadata"]
    labels = meta.get("labels") or {}
    return DomainFacts(
        name=meta["name"],
        namespace=meta.get("namespace", ""),
        owner_uid=labels.get(keys.OWNER_UID_LABEL),
        managed_by=labels.get(keys.MANAGED_BY_LABEL),
        workload=labels.get(keys.WORKLOAD_NAME_LABEL),
        claim_template=((domain.get("spec") or {}).get("channel") or {})
        .get("resourceClaimTemplate", {})
        .get("name", ""),
        deleting=bool(meta.get("deletionTimestamp")),
        protected=keys.PROTECTION_FINALIZER in (meta.get("finalizers") or []),
    )


def is_owned_by(domain: DomainFacts, *, owner_uid: str, manager: str) -> bool:
    """True when `domain` was created by `manager` for the workload with `owner_uid` (never adopt others)."""
    return domain.owner_uid == owner_uid and domain.managed_by == manager


def is_ready(domain: DomainFacts | None, *, owner_uid: str, manager: str, template_exists: bool) -> bool:
    """Pods may be released to the scheduler: the domain is ours, alive, and its claim template exists.

    Creating pods before the template exists risks the claim controller backing off for many minutes.
    """
    return (
        domain is not None
        and is_owned_by(domain, owner_uid=owner_uid, manager=manager)
        and not domain.deleting
        and template_exists
    )


def may_release(domain: DomainFacts, *, template_in_use: bool) -> bool:
    """The protection finalizer may go: the domain is being deleted and no live pod references its template."""
    return domain.deleting and domain.protected and not template_in_use
