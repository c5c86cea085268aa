"""Facts about managed ComputeDomains that every scope controller decides on: identity, readiness, release.

Identity rests on what the API server records, not only on labels anyone can set: a domain is ours when its
owner-uid and managed-by labels are owned (`metadata.managedFields`) by exactly the controller they name, the
one that created the domain with them. A foreign domain relabelled to look like ours is owned by whoever
relabelled it, and is never touched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .. import keys

#: The labels that make a domain ours; the API server must record our field manager as their only owner.
IDENTITY_LABELS = (keys.OWNER_UID_LABEL, keys.MANAGED_BY_LABEL)


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
    uid: str = ""
    resource_version: str = ""
    group: str | None = None  # the group (replica scope) the domain serves, from its label
    slice: str | None = None  # the slice and revision (slice scope) the domain serves, from their labels
    revision: str | None = None
    condemned: bool = False  # marked for deletion: no pod may be admitted onto it
    condemned_mark: str = ""  # the mark's own value, new for every mark set (empty: not condemned)
    #: The field manager that alone owns the identity labels (None: nobody alone, or no managedFields).
    created_by: str | None = None

    @property
    def managed(self) -> bool:
        """Created by one of mnnvl's scope controllers, as the labels say and the API server confirms."""
        return (
            self.managed_by in keys.DOMAIN_MANAGERS
            and self.owner_uid is not None
            and self.created_by == self.managed_by
        )


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
        uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        group=labels.get(keys.GROUP_INDEX_LABEL),
        slice=labels.get(keys.SLICE_LABEL),
        revision=labels.get(keys.REVISION_LABEL),
        condemned=keys.CONDEMNED_ANNOTATION in (meta.get("annotations") or {}),
        condemned_mark=str((meta.get("annotations") or {}).get(keys.CONDEMNED_ANNOTATION) or ""),
        created_by=identity_owner(meta),
    )


def field_owners(meta: Mapping[str, Any], section: str, key: str) -> set[str]:
    """The field managers `managedFields` records as owning `metadata.<section>.<key>` (section: labels or
    annotations)."""
    return {
        str(entry.get("manager"))
        for entry in meta.get("managedFields") or ()
        if f"f:{key}" in (((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get(f"f:{section}") or {})
    }


def identity_owner(
    meta: Mapping[str, Any], *, labels: Sequence[str] = IDENTITY_LABELS, annotations: Sequence[str] = ()
) -> str | None:
    """The one field manager owning every identity label (and annotation), per `managedFields`; None if there is
    not exactly one. mnnvl-topology asks the same of its cluster-scoped objects, with their own keys."""
    owners: set[str] = set()
    for section, key in [*(("labels", label) for label in labels), *(("annotations", a) for a in annotations)]:
        owning = field_owners(meta, section, key)
        if not owning:
            return None
        owners |= owning
    return owners.pop() if len(owners) == 1 else None


def is_owned_by(domain: DomainFacts, *, owner_uid: str, manager: str) -> bool:
    """True when `manager` created `domain` for the workload with `owner_uid` (never adopt others)."""
    return domain.owner_uid == owner_uid and domain.managed_by == manager and domain.created_by == manager


def is_ready(domain: DomainFacts | None, *, owner_uid: str, manager: str, template_exists: bool) -> bool:
    """Pods may be released to the scheduler: the domain is ours, alive, not condemned, and its claim template
    exists. Creating pods before the template exists risks the claim controller backing off for many minutes.
    """
    return (
        domain is not None
        and is_owned_by(domain, owner_uid=owner_uid, manager=manager)
        and not domain.deleting
        and not domain.condemned
        and template_exists
    )


def may_release(domain: DomainFacts, *, template_in_use: bool) -> bool:
    """The protection finalizer may go: the domain is being deleted and no live pod references its template."""
    return domain.deleting and domain.protected and not template_in_use


def describe_owner(domain: DomainFacts) -> str:
    """Whom a domain belongs to, as its labels say, for messages about a domain that is not ours."""
    if domain.managed_by:
        return f'managed by "{domain.managed_by}" for owner {domain.owner_uid}'
    return "not managed by mnnvl"


def admission_refusal(domain: DomainFacts | None) -> str | None:
    """Why no pod may be admitted onto `domain` now (None: it may). A condemned domain is about to be deleted and a
    deleting one is being torn down: a pod bound to either would run without IMEX; its creation is retried."""
    if domain is None:
        return None
    if domain.deleting:
        return f"ComputeDomain {domain.name} is being deleted"
    if domain.condemned:
        return f"ComputeDomain {domain.name} is about to be deleted"
    return None
