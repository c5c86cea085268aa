"""What a scope controller's planner decides for one workload, as values: the writes its executor makes.

Every scope (replica, slice) plans in these terms, so one executor (`mnnvl_runtime.executing`) applies the
plans of both. Converged input yields an empty `Plan`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from .. import events, keys, names
from . import domains, injection, references


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodFacts:
    """What every scope's planner knows of one watched pod of its workloads."""

    name: str
    uid: str
    #: The domain recorded on the pod at admission (None: it joins none).
    domain: str | None
    #: Where the ComputeDomain scheduling gate sits in `spec.schedulingGates` (None: not gated by us).
    gate_at: int | None
    terminal: bool
    deleting: bool
    #: The pod has containers that should hold the channel claim but holds none (admitted without our webhook).
    missing_claim: bool = False

    @property
    def gated(self) -> bool:
        return self.gate_at is not None


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    return PodFacts(
        name=meta["name"],
        uid=meta.get("uid", ""),
        domain=references.recorded_domain(pod),
        gate_at=injection.gate_index(spec),
        terminal=not references.is_non_terminal(pod),
        deleting=bool(meta.get("deletionTimestamp")),
        missing_claim=injection.lacks_channel_claim(spec, meta.get("annotations") or {}),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadFacts:
    """What every scope's planner knows of the workload whose domains it plans (a LeaderWorkerSet, a
    DisaggregatedSet)."""

    namespace: str
    name: str
    uid: str
    deleting: bool = False
    #: It asks for ComputeDomains (by its opt-in annotation, on itself or, for a set, on a role).
    opted_in: bool = True


WorkloadT = TypeVar("WorkloadT", bound=WorkloadFacts)
PodT = TypeVar("PodT", bound=PodFacts)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScopeSnapshot(Generic[WorkloadT, PodT]):
    """What a scope's planner decides one workload's domains from; each scope adds what its position rule needs."""

    namespace: str
    workload_name: str
    workload: WorkloadT | None  # None once the workload is gone
    pods: tuple[PodT, ...]
    #: The domains the scope looks at for this workload (ours or not), by name.
    domains: dict[str, domains.DomainFacts]
    existing_templates: frozenset[str]
    templates_in_use: frozenset[str]  # held by non-terminal pods in the namespace
    domains_recorded: frozenset[str] = frozenset()  # recorded by non-terminal pods in the namespace
    gate_enabled: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class DomainToCreate:
    name: str
    namespace: str
    claim_template: str
    labels: dict[str, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRef:
    name: str
    uid: str
    #: Where its gate was seen (lets the gate go in one patch; None: read the pod first).
    gate_at: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Warning:
    reason: str
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    create: tuple[DomainToCreate, ...] = ()
    ungate: tuple[PodRef, ...] = ()
    delete: tuple[str, ...] = ()  # domain names, for the fenced deletion
    uncondemn: tuple[str, ...] = ()  # condemned domains that are wanted again
    release: tuple[str, ...] = ()  # domain names whose protection finalizer may go
    warnings: tuple[Warning, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.create or self.ungate or self.delete or self.uncondemn or self.release or self.warnings)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Retirement:
    """What becomes of a workload's own domains: the `delete`, `uncondemn` and `release` of its plan."""

    delete: tuple[str, ...] = ()
    uncondemn: tuple[str, ...] = ()
    release: tuple[str, ...] = ()


def retire(
    ours: Iterable[domains.DomainFacts],
    *,
    wanted: Callable[[domains.DomainFacts], bool],
    in_use: Callable[[domains.DomainFacts], bool],
) -> Retirement:
    """The one retirement rule of every scope, for domains that are ours by identity: a domain wanted or in use
    stays (and loses a condemned mark); any other goes by the fenced deletion, and once it is being deleted its
    protection finalizer is let go when nothing uses it."""
    delete: list[str] = []
    uncondemn: list[str] = []
    release: list[str] = []
    for found in sorted(ours, key=lambda domain: domain.name):
        used = in_use(found)
        if wanted(found) or used:
            if found.condemned and not found.deleting:
                uncondemn.append(found.name)
        elif not found.deleting:
            delete.append(found.name)
        elif domains.may_release(found, template_in_use=used):
            release.append(found.name)
    return Retirement(delete=tuple(delete), uncondemn=tuple(uncondemn), release=tuple(release))


def foreign_domain(found: domains.DomainFacts, held_back: str) -> Warning:
    """A domain of the name a scope derives exists and is not the workload's: it is never adopted, and what would
    use it (`held_back`, with the way out) waits."""
    return Warning(
        reason=events.UNEXPECTED_OWNER_REASON,
        message=(
            f"ComputeDomain {found.name} already exists and is {domains.describe_owner(found)}; it is not adopted "
            f"and {held_back}"
        ),
    )


def pods_without_claim(pods: Iterable[PodFacts], *, kind: str, workload: str, controller: str) -> list[Warning]:
    """One warning per live pod that should hold the channel claim but holds none: it was admitted while
    `controller`'s pod webhook was not there, and only its creation again gives it the claim."""
    return [
        Warning(
            reason=events.POD_WITHOUT_CHANNEL_CLAIM_REASON,
            message=(
                f"Pod {pod.name} of {kind} {workload} has GPU containers but no ComputeDomain channel claim (it was "
                f"created while the {controller} pod webhook was not registered or not reachable): delete the pod "
                "so it is created again with its claim"
            ),
        )
        for pod in pods
        if pod.missing_claim and not pod.terminal
    ]


def domain_labels(workload: WorkloadFacts, *, manager: str, scope: str, position: Mapping[str, str]) -> dict[str, str]:
    """The labels of a domain `manager` creates for `workload` at `position` (its scope's position labels)."""
    return {
        keys.OWNER_UID_LABEL: workload.uid,
        keys.MANAGED_BY_LABEL: manager,
        keys.SCOPE_LABEL: scope,
        keys.WORKLOAD_NAME_LABEL: workload.name,
        **position,
    }


def to_create(workload: WorkloadFacts, name: str, labels: dict[str, str]) -> DomainToCreate:
    return DomainToCreate(
        name=name, namespace=workload.namespace, claim_template=names.claim_template_name(name), labels=labels
    )


def made_by(domain: domains.DomainFacts, *, manager: str, workload_name: str) -> bool:
    """Created by `manager` for a workload of this name (any incarnation of it): the API server records `manager`
    as the creator, the labels name it and the workload, and the claim template is the one derived from the name.
    A scope adds that the name is exactly what it derives from the domain's position labels."""
    return (
        domain.managed_by == manager
        and domain.created_by == manager
        and domain.owner_uid is not None
        and domain.workload == workload_name
        and domain.claim_template == names.claim_template_name(domain.name)
    )


def releasable(pods: Iterable[PodT], ready: Iterable[str]) -> list[PodT]:
    """The gated, live pods whose recorded domain is among the `ready` ones."""
    ready = set(ready)
    return [p for p in pods if p.gated and not p.terminal and not p.deleting and p.domain in ready]


def scope_plan(
    snapshot: ScopeSnapshot[Any, Any],
    *,
    create: Iterable[DomainToCreate],
    ungate: Iterable[PodFacts],
    warnings: Iterable[Warning],
    ours: Callable[[domains.DomainFacts], bool],
    wanted: Callable[[domains.DomainFacts], bool],
) -> Plan:
    """A scope's plan from what its position rule decided (domains to create, pods to let go, warnings), with
    the one retirement rule applied to the snapshot's domains that are `ours`. Whatever a live pod records
    stays: a domain is never deleted under a pod, valid name or not."""
    recorded = snapshot.domains_recorded | {p.domain for p in snapshot.pods if p.domain and not p.terminal}
    retired = retire(
        (found for found in snapshot.domains.values() if ours(found)),
        wanted=wanted,
        in_use=lambda found: found.claim_template in snapshot.templates_in_use or found.name in recorded,
    )
    return Plan(
        create=tuple(create),
        ungate=tuple(PodRef(name=p.name, uid=p.uid, gate_at=p.gate_at) for p in ungate),
        delete=retired.delete,
        uncondemn=retired.uncondemn,
        release=retired.release,
        warnings=tuple(warnings),
    )
