"""Reconciliation of one LeaderWorkerSet's ComputeDomains: a snapshot in, a plan out. No I/O, no clock.

Rules (the user contract):
- each live leader incarnation has the domain recorded on its leader pod; create it if missing;
- a domain with that name that this LWS does not manage is never adopted: warn, and keep the group gated;
- release pods to the scheduler once their domain is ready;
- a domain is obsolete once no live leader records it (group restarted or replaced, rolling update,
  scale-down, LWS deleted); delete it only when no non-terminal pod references its claim template, and
  then let its protection finalizer go;
- with the feature gate disabled, do nothing at all.
"""

from __future__ import annotations

import dataclasses

from mnnvl_api import events, keys, names
from mnnvl_api.decisions import domains

MANAGER = keys.LWS_CONTROLLER


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    namespace: str
    name: str
    uid: str
    deleting: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodFacts:
    name: str
    group: int
    is_leader: bool
    domain: str | None
    gated: bool
    terminal: bool
    deleting: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    namespace: str
    lws_name: str
    workload: Workload | None  # None once the LeaderWorkerSet is gone
    pods: tuple[PodFacts, ...]
    #: Every domain of this LWS's name (ours or not) plus the domains its leaders record, by name.
    domains: dict[str, domains.DomainFacts]
    existing_templates: frozenset[str]
    templates_in_use: frozenset[str]  # referenced by non-terminal pods in the namespace
    gate_enabled: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class DomainToCreate:
    name: str
    namespace: str
    claim_template: str
    labels: dict[str, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Warning:
    reason: str
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    create: tuple[DomainToCreate, ...] = ()
    ungate: tuple[str, ...] = ()  # pod names
    delete: tuple[str, ...] = ()  # domain names
    release: tuple[str, ...] = ()  # domain names whose protection finalizer may go
    warnings: tuple[Warning, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.create or self.ungate or self.delete or self.release or self.warnings)


def domain_labels(workload: Workload, group: int) -> dict[str, str]:
    return {
        keys.OWNER_UID_LABEL: workload.uid,
        keys.MANAGED_BY_LABEL: MANAGER,
        keys.SCOPE_LABEL: keys.SCOPE_REPLICA,
        keys.WORKLOAD_NAME_LABEL: workload.name,
        keys.GROUP_INDEX_LABEL: str(group),
    }


def plan(snapshot: Snapshot) -> Plan:
    if not snapshot.gate_enabled:
        return Plan()
    workload = snapshot.workload
    live_leaders = [p for p in snapshot.pods if p.is_leader and not p.terminal and p.domain]
    current = {p.domain for p in live_leaders if p.domain}
    create: list[DomainToCreate] = []
    warnings: list[Warning] = []
    ready: set[str] = set()
    if workload is not None and not workload.deleting:
        for leader in live_leaders:
            assert leader.domain is not None
            found = snapshot.domains.get(leader.domain)
            if found is None:
                create.append(_to_create(workload, leader))
            elif not domains.is_owned_by(found, owner_uid=workload.uid, manager=MANAGER):
                warnings.append(_foreign(workload, leader, found))
    if workload is not None:
        ready = {
            name
            for name in current
            if domains.is_ready(
                snapshot.domains.get(name),
                owner_uid=workload.uid,
                manager=MANAGER,
                template_exists=names.claim_template_name(name) in snapshot.existing_templates,
            )
        }
    ungate = tuple(p.name for p in snapshot.pods if p.gated and not p.terminal and p.domain in ready)
    delete: list[str] = []
    release: list[str] = []
    for name, found in sorted(snapshot.domains.items()):
        if found.managed_by != MANAGER or found.workload != snapshot.lws_name or name in current:
            continue
        in_use = found.claim_template in snapshot.templates_in_use
        if not found.deleting and not in_use:
            delete.append(name)
        elif domains.may_release(found, template_in_use=in_use):
            release.append(name)
    return Plan(
        create=tuple(create), ungate=ungate, delete=tuple(delete), release=tuple(release), warnings=tuple(warnings)
    )


def _to_create(workload: Workload, leader: PodFacts) -> DomainToCreate:
    assert leader.domain is not None
    return DomainToCreate(
        name=leader.domain,
        namespace=workload.namespace,
        claim_template=names.claim_template_name(leader.domain),
        labels=domain_labels(workload, leader.group),
    )


def _foreign(workload: Workload, leader: PodFacts, found: domains.DomainFacts) -> Warning:
    owner = (
        f'managed by "{found.managed_by}" for owner {found.owner_uid}' if found.managed_by else "not managed by mnnvl"
    )
    return Warning(
        reason=events.UNEXPECTED_OWNER_REASON,
        message=(
            f"ComputeDomain {found.name} already exists and is {owner}; it is not adopted and leader "
            f"{leader.name} stays gated: delete or rename that ComputeDomain, or delete pod {leader.name} "
            "to get a new domain name"
        ),
    )
