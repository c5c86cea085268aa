"""Reconciliation of one LeaderWorkerSet's ComputeDomains: a snapshot in, a plan out. No I/O, no clock.

Rules (the user contract):
- each live leader incarnation of an opted-in LWS has the domain recorded on its leader pod, when that name
  is exactly what the replica scope derives for its group; create it if missing. After the LWS opted out, so
  does a leader of a revision that was opted in (upstream's record of it is stamped), until the rollout
  replaces it;
- a domain with that name that this LWS does not manage is never adopted: warn, and keep the group gated;
- release pods to the scheduler once their domain is ready (a worker only onto its live leader's domain);
- a domain is obsolete once no live leader records it (group restarted or replaced, rolling update,
  scale-down, LWS deleted, or a leader the API server refused after the pod webhook created its domain); it goes
  (by the fenced deletion) only when no non-terminal pod holds its claim or records it, and then its protection
  finalizer is let go;
- only domains that are ours by identity are ever deleted, marked or released;
- with the feature gate disabled, do nothing at all.
"""

from __future__ import annotations

import dataclasses

from mnnvl_api import events, keys, names
from mnnvl_api.decisions import domains, plans

MANAGER = keys.LWS_CONTROLLER


#: A LeaderWorkerSet's facts are exactly what every scope knows of its workload.
LeaderWorkerSetFacts = plans.WorkloadFacts


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplicaPodFacts(plans.PodFacts):
    """A replica pod: what every scope knows of a pod, and its place in its group."""

    group: int
    is_leader: bool
    #: Upstream's `template-revision-hash` of the pod (None: it carries none).
    revision: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot(plans.ScopeSnapshot[LeaderWorkerSetFacts, ReplicaPodFacts]):
    """`domains`: every domain of this LWS's name (ours or not) plus the domains its leaders record."""

    #: The revision hashes of this LWS (by uid) whose templates upstream recorded with our stamp.
    stamped_revisions: frozenset[str] = frozenset()


def domain_labels(workload: LeaderWorkerSetFacts, group: int) -> dict[str, str]:
    return plans.domain_labels(
        workload, manager=MANAGER, scope=keys.SCOPE_REPLICA, position={keys.GROUP_INDEX_LABEL: str(group)}
    )


def is_ours(domain: domains.DomainFacts, lws_name: str) -> bool:
    """Created by mnnvl-lws for a group of the LWS of this name (`plans.made_by`), and the name is exactly what
    the replica scope derives from the domain's group label."""
    group = domain.group
    return (
        plans.made_by(domain, manager=MANAGER, workload_name=lws_name)
        and group is not None
        and group.isdigit()
        and names.replica_domain_token(domain.name, lws_name, int(group)) is not None
    )


def has_valid_domain(pod: ReplicaPodFacts, lws_name: str) -> bool:
    """A leader's recorded domain is trusted only when it is one the replica scope derives for its group."""
    return pod.domain is not None and names.replica_domain_token(pod.domain, lws_name, pod.group) is not None


def keeps_opt_in(workload: LeaderWorkerSetFacts, leader: ReplicaPodFacts, stamped_revisions: frozenset[str]) -> bool:
    """Whether the leader's group is managed: its LWS is opted in, or the leader is of a revision that was."""
    return workload.opted_in or leader.revision in stamped_revisions


def plan(snapshot: Snapshot) -> plans.Plan:
    if not snapshot.gate_enabled:
        return plans.Plan()
    workload = snapshot.workload
    live_leaders = [p for p in snapshot.pods if p.is_leader and not p.terminal and p.domain]
    valid_leaders = [p for p in live_leaders if has_valid_domain(p, snapshot.workload_name)]
    current = {p.domain for p in valid_leaders if p.domain}
    warnings = [_invalid_name(p) for p in live_leaders if not has_valid_domain(p, snapshot.workload_name)]
    create: list[plans.DomainToCreate] = []
    ready: set[str] = set()
    if workload is not None and not workload.deleting:
        for leader in valid_leaders:
            assert leader.domain is not None
            if not keeps_opt_in(workload, leader, snapshot.stamped_revisions):
                continue
            found = snapshot.domains.get(leader.domain)
            if found is None:
                if not leader.deleting:
                    create.append(_to_create(workload, leader))
            elif not domains.is_owned_by(found, owner_uid=workload.uid, manager=MANAGER):
                warnings.append(_foreign(leader, found))
        if workload.opted_in:
            warnings += plans.pods_without_claim(
                snapshot.pods, kind="LeaderWorkerSet", workload=workload.name, controller=MANAGER
            )
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
    leader_domains = {p.group: p.domain for p in valid_leaders if not p.deleting}
    ungate = [
        p for p in plans.releasable(snapshot.pods, ready) if p.is_leader or leader_domains.get(p.group) == p.domain
    ]
    return plans.scope_plan(
        snapshot,
        create=create,
        ungate=ungate,
        warnings=warnings,
        ours=lambda found: is_ours(found, snapshot.workload_name),
        wanted=lambda found: found.name in current,
    )


def created(domain: plans.DomainToCreate) -> str:
    """The Event message announcing a domain created for a group."""
    return f"Created ComputeDomain {domain.name} for group {domain.labels[keys.GROUP_INDEX_LABEL]}"


def _to_create(workload: LeaderWorkerSetFacts, leader: ReplicaPodFacts) -> plans.DomainToCreate:
    assert leader.domain is not None
    return plans.to_create(workload, leader.domain, domain_labels(workload, leader.group))


def _foreign(leader: ReplicaPodFacts, found: domains.DomainFacts) -> plans.Warning:
    return plans.foreign_domain(
        found,
        f"leader {leader.name} stays gated: delete or rename that ComputeDomain, or delete pod {leader.name} to get a "
        "new domain name",
    )


def _invalid_name(leader: ReplicaPodFacts) -> plans.Warning:
    return plans.Warning(
        reason=events.INVALID_DOMAIN_NAME_REASON,
        message=(
            f"Pod {leader.name} records ComputeDomain name {leader.domain!r}, which is not one this LeaderWorkerSet "
            f"derives for group {leader.group}; no domain is created for it: delete pod {leader.name} so it is "
            "created again with a derived name"
        ),
    )
