"""Reconciliation of one DisaggregatedSet's slice ComputeDomains: a snapshot in, a plan out. No I/O, no clock.

Rules (the user contract):
- each (slice, revision) that has a LeaderWorkerSet of an enrolled role (its templates carry the slice stamp)
  of a live DisaggregatedSet has one domain, created as soon as that LeaderWorkerSet exists, before its pods
  run; every enrolled role of the slice and revision shares it. Upstream never updates a LeaderWorkerSet's
  templates, so one stamped while the set was enrolled keeps its domain after the set opts out, until the
  rollout drains it;
- a domain with the generated name that this DisaggregatedSet does not manage is never adopted: warn, and the
  slice stays unscaled (its LeaderWorkerSets are refused at admission) with its pods gated; the warning also
  names such a domain for a slice whose LeaderWorkerSets were refused, as far as its revision can be told;
- release pods to the scheduler once their slice's domain is ready;
- a domain is obsolete once no LeaderWorkerSet of this DisaggregatedSet remains for its (slice, revision) (a
  rollout drained the revision, `slices` shrank) or the DisaggregatedSet is gone; it goes (by the fenced
  deletion) only when no non-terminal pod holds its claim or records it, and then its protection finalizer is
  let go;
- only domains that are ours by identity are ever deleted, marked or released;
- with the feature gate disabled, do nothing at all.
"""

from __future__ import annotations

import dataclasses

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains, plans

MANAGER = keys.DS_CONTROLLER
#: A (slice, revision) of a DisaggregatedSet.
SliceRevision = tuple[int, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DisaggregatedSetFacts(plans.WorkloadFacts):
    """The DisaggregatedSet, as far as its domains are concerned. `opted_in`: some role is enrolled in slice
    ComputeDomains, by the set's annotation or its own."""

    #: `spec.slices`: slices 0 to slices - 1 exist, or are to be created.
    slices: int = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class Child:
    """A LeaderWorkerSet that the DisaggregatedSet controls: one (slice, revision, role)."""

    name: str
    #: The DisaggregatedSet that controls it (its controller reference), by name and uid.
    ds_name: str
    owner_uid: str
    slice: int
    revision: str
    role: str
    #: Its templates carry the slice stamp: its pods join the slice's domain.
    slice_scope: bool
    deleting: bool = False


#: A slice pod's planner facts are exactly what every scope knows of a pod.
SlicePodFacts = plans.PodFacts


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot(plans.ScopeSnapshot[DisaggregatedSetFacts, SlicePodFacts]):
    """`domains`: every domain of this DisaggregatedSet's name (ours or not), the domains named for its slices
    and revisions, and those its pods record."""

    children: tuple[Child, ...]


def domain_name(ds_name: str, position: SliceRevision) -> str:
    return names.slice_domain_name(ds_name, *position)


def domain_labels(workload: DisaggregatedSetFacts, position: SliceRevision) -> dict[str, str]:
    slice_index, revision = position
    return plans.domain_labels(
        workload,
        manager=MANAGER,
        scope=keys.SCOPE_SLICE,
        position={keys.SLICE_LABEL: str(slice_index), keys.REVISION_LABEL: revision},
    )


def domain_position(domain: domains.DomainFacts) -> SliceRevision | None:
    """The (slice, revision) a domain's labels say it serves; None when they say none."""
    if domain.slice is None or not domain.slice.isdigit() or not domain.revision:
        return None
    return int(domain.slice), domain.revision


def is_ours(domain: domains.DomainFacts, ds_name: str) -> bool:
    """Created by mnnvl-ds for a (slice, revision) of the DisaggregatedSet of this name (`plans.made_by`), and the
    name is exactly what the slice scope derives from the domain's position labels."""
    position = domain_position(domain)
    return (
        plans.made_by(domain, manager=MANAGER, workload_name=ds_name)
        and position is not None
        and domain.name == domain_name(ds_name, position)
    )


def active_positions(snapshot: Snapshot) -> set[SliceRevision]:
    """The (slice, revision)s whose pods join a domain: those with a live slice-scope LeaderWorkerSet of the
    current DisaggregatedSet."""
    workload = snapshot.workload
    if workload is None:
        return set()
    return {
        (child.slice, child.revision)
        for child in snapshot.children
        if child.slice_scope and not child.deleting and child.owner_uid == workload.uid
    }


def known_revisions(snapshot: Snapshot) -> set[str]:
    """The revisions the set's LeaderWorkerSets and domains carry: the only ones whose domain names can be told."""
    return {child.revision for child in snapshot.children} | {
        domain.revision
        for domain in snapshot.domains.values()
        if domain.revision and domain.workload == snapshot.workload_name
    }


def blocked_positions(snapshot: Snapshot) -> set[SliceRevision]:
    """The (slice, revision)s the set is to have but has no LeaderWorkerSet of, which may be because their
    creation is refused (a foreign domain holds their domain's name): at a revision a current LeaderWorkerSet
    carries, or in a slice that has none at all. Upstream's revision hash cannot be computed here, so a
    revision no LeaderWorkerSet or domain of the set carries yet is not among them."""
    workload = snapshot.workload
    if workload is None or workload.deleting:
        return set()
    current = [child for child in snapshot.children if child.owner_uid == workload.uid]
    present = {(child.slice, child.revision) for child in current}
    current_revisions = {child.revision for child in current}
    populated = {child.slice for child in current}
    return {
        (slice_index, revision)
        for slice_index in range(workload.slices)
        for revision in known_revisions(snapshot)
        if (slice_index, revision) not in present and (revision in current_revisions or slice_index not in populated)
    }


def held_back(snapshot: Snapshot) -> list[tuple[SliceRevision, domains.DomainFacts]]:
    """The (slice, revision)s whose domain name a domain this DisaggregatedSet does not manage holds, with that
    domain: their LeaderWorkerSets are refused at admission, so upstream cannot scale them."""
    workload = snapshot.workload
    if workload is None:
        return []
    held = []
    for position in [*sorted(active_positions(snapshot)), *sorted(blocked_positions(snapshot))]:
        found = snapshot.domains.get(domain_name(snapshot.workload_name, position))
        if found is not None and not domains.is_owned_by(found, owner_uid=workload.uid, manager=MANAGER):
            held.append((position, found))
    return held


def holders(snapshot: Snapshot) -> frozenset[str]:
    """The names of the domains that hold some slice of this DisaggregatedSet back."""
    return frozenset(found.name for _, found in held_back(snapshot))


def upstream_retry_due(snapshot: Snapshot, *, asked_this_term: bool, held_before: frozenset[str]) -> bool:
    """Whether to ask upstream to reconcile this DisaggregatedSet again, now.

    Upstream retries a refused child LeaderWorkerSet with exponential back-off (up to minutes), and nothing it
    watches changes when the cause of the refusal goes away. Two causes can go away unseen by upstream: our
    webhook was unreachable (it fails closed: this controller was down), and a foreign domain that held a
    slice's name is gone. So ask once per Lease term (this replica may just have come back) and each time a
    holder seen in the previous pass (`held_before`) no longer holds; never with the gate off (we refuse
    anyway) or for a set we do not manage.
    """
    workload = snapshot.workload
    if not snapshot.gate_enabled or workload is None or workload.deleting or not workload.opted_in:
        return False
    return not asked_this_term or bool(held_before - holders(snapshot))


def plan(snapshot: Snapshot) -> plans.Plan:
    if not snapshot.gate_enabled:
        return plans.Plan()
    workload = snapshot.workload
    active = active_positions(snapshot)
    create: list[plans.DomainToCreate] = []
    warnings: list[plans.Warning] = []
    ready: set[str] = set()
    if workload is not None:
        for position in sorted(active):
            name = domain_name(snapshot.workload_name, position)
            found = snapshot.domains.get(name)
            if found is None:
                # Active positions are stamped children of this set: one of a revision enrolled before the set
                # opted out keeps its domain until the rollout drains it.
                if not workload.deleting:
                    create.append(_to_create(workload, position))
            elif domains.is_owned_by(found, owner_uid=workload.uid, manager=MANAGER) and domains.is_ready(
                found,
                owner_uid=workload.uid,
                manager=MANAGER,
                template_exists=names.claim_template_name(name) in snapshot.existing_templates,
            ):
                ready.add(name)
        warnings += [_foreign(position, found) for position, found in held_back(snapshot)]
        if workload.opted_in and not workload.deleting:
            warnings += plans.pods_without_claim(
                snapshot.pods, kind=keys.DS_KIND, workload=workload.name, controller=MANAGER
            )
    remaining = {(child.owner_uid, child.slice, child.revision) for child in snapshot.children}

    def wanted(found: domains.DomainFacts) -> bool:
        served = domain_position(found)
        current = workload is not None and workload.uid == found.owner_uid
        return current and served is not None and (found.owner_uid, *served) in remaining

    return plans.scope_plan(
        snapshot,
        create=create,
        ungate=plans.releasable(snapshot.pods, ready),
        warnings=warnings,
        ours=lambda found: is_ours(found, snapshot.workload_name),
        wanted=wanted,
    )


def _to_create(workload: DisaggregatedSetFacts, position: SliceRevision) -> plans.DomainToCreate:
    return plans.to_create(workload, domain_name(workload.name, position), domain_labels(workload, position))


def _foreign(position: SliceRevision, found: domains.DomainFacts) -> plans.Warning:
    return plans.foreign_domain(
        found,
        f"slice {position[0]} (revision {position[1]}) stays unscaled, its pods gated: delete or rename that "
        "ComputeDomain",
    )
