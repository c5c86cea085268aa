"""`kubectl mnnvl status`: per opted-in workload, each group (LeaderWorkerSet) or (slice, revision)
(DisaggregatedSet) with its ComputeDomain and pods, and its obsolete domains with the pods they wait for.

A pure function of one `Snapshot`; the same facts are rendered as a table, JSON or YAML."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains, injection, references

from . import render
from .snapshot import (
    LWS_KIND,
    DomainState,
    Object,
    Snapshot,
    Workload,
    annotations_of,
    clique_of,
    containers_of,
    domain_owner,
    domain_state,
    labels_of,
    name_of,
    namespace_of,
    users_of,
    workloads_of,
)


class Pod(render.Report):
    name: str
    role: str
    phase: str
    gated: bool
    node: str | None
    clique: str | None
    domain: str | None
    claim_in: list[str]
    #: container → why it holds no claim.
    no_claim: dict[str, str]


class Unit(render.Report):
    """A group of a LeaderWorkerSet (`group` set) or a (slice, revision) of a DisaggregatedSet."""

    group: str | None = None
    slice: str | None = None
    revision: str | None = None
    domain: DomainState | None
    pods: list[Pod]
    #: DisaggregatedSet only: the per-replica domains of its replica-scope roles' groups, by `role/group`.
    replica_domains: dict[str, DomainState] = pydantic.Field(default_factory=dict)


class ObsoleteDomain(render.Report):
    name: str
    state: str
    #: The non-terminal pods still using it; it goes once they are gone.
    waiting_for: list[str]


class WorkloadStatus(render.Report):
    kind: str
    namespace: str
    name: str
    opt_in: str
    #: DisaggregatedSet only: each role's scope (slice, replica or none).
    role_scopes: dict[str, str]
    units: list[Unit]
    obsolete_domains: list[ObsoleteDomain]


def statuses(snapshot: Snapshot, *, named: str | None = None) -> list[WorkloadStatus]:
    """Every opted-in or enrolled workload of the snapshot (and the one `named`, opted in or not; `named` may be
    `NAME`, `lws/NAME` or `disaggregatedset/NAME`)."""
    found = []
    for workload in workloads_of(snapshot):
        if named is not None and not matches(workload, named):
            continue
        if named is None and not workload.managed:
            continue
        found.append(status_of(snapshot, workload))
    return found


def matches(workload: Workload, named: str) -> bool:
    kind, _, name = named.rpartition("/")
    kinds = {
        "": (LWS_KIND, keys.DS_KIND),
        "lws": (LWS_KIND,),
        "leaderworkerset": (LWS_KIND,),
        "leaderworkersets": (LWS_KIND,),
        "ds": (keys.DS_KIND,),
        "disaggregatedset": (keys.DS_KIND,),
        "disaggregatedsets": (keys.DS_KIND,),
    }
    return workload.name == name and workload.kind in kinds.get(kind.lower(), ())


def pods_of(snapshot: Snapshot, workload: Workload) -> list[Object]:
    return snapshot.pods_by_workload.get((workload.kind, workload.namespace, workload.name), [])


def status_of(snapshot: Snapshot, workload: Workload) -> WorkloadStatus:
    pods = pods_of(snapshot, workload)
    units = _lws_units(snapshot, workload, pods) if workload.kind == LWS_KIND else _ds_units(snapshot, workload, pods)
    current = {u.domain.name for u in units if u.domain is not None}
    current |= {d.name for u in units for d in u.replica_domains.values()}
    owners = {workload.uid, *(str(c["metadata"].get("uid")) for c in children_of(snapshot, workload))}
    obsolete = [
        _obsolete(snapshot, d)
        for owner in owners
        for d in snapshot.domains_by_owner.get(owner, ())
        if namespace_of(d) == workload.namespace and domains.facts_of(d).managed and name_of(d) not in current
    ]
    return WorkloadStatus(
        kind=workload.kind,
        namespace=workload.namespace,
        name=workload.name,
        opt_in=workload.opt_in,
        role_scopes=dict(workload.role_scopes),
        units=units,
        obsolete_domains=sorted(obsolete, key=lambda d: d.name),
    )


def _lws_units(snapshot: Snapshot, workload: Workload, pods: Sequence[Object]) -> list[Unit]:
    groups: dict[str, list[Object]] = {}
    for pod in pods:
        groups.setdefault(labels_of(pod).get(keys.LWS_GROUP_INDEX_LABEL, "?"), []).append(pod)
    units = []
    for group in sorted(groups, key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0, g)):
        members = groups[group]
        leader = next((p for p in members if _is_leader(p)), None)
        # A group's domain is its leader's (the leader's incarnation names it); workers recording another one
        # are draining from a retired incarnation, and a group whose leader is gone has no current domain.
        recorded = references.recorded_domain(leader) if leader else None
        units.append(
            Unit(
                group=group,
                domain=domain_state(snapshot, workload.namespace, recorded, workload=workload) if recorded else None,
                pods=[_pod(snapshot, workload, p) for p in members],
            )
        )
    return units


def children_of(snapshot: Snapshot, workload: Workload) -> list[Object]:
    """The child LeaderWorkerSets of a DisaggregatedSet (none for a LeaderWorkerSet)."""
    if workload.kind != keys.DS_KIND:
        return []
    return [
        child
        for child in snapshot.leaderworkersets
        if namespace_of(child) == workload.namespace and labels_of(child).get(keys.DS_NAME_LABEL) == workload.name
    ]


def _ds_units(snapshot: Snapshot, workload: Workload, pods: Sequence[Object]) -> list[Unit]:
    units: dict[tuple[str, str], list[Object]] = {}
    for pod in pods:
        labels = labels_of(pod)
        units.setdefault((labels.get(keys.DS_SLICE_LABEL, "0"), labels.get(keys.DS_REVISION_LABEL, "")), []).append(pod)
    for child in children_of(snapshot, workload):  # a (slice, revision) whose child LeaderWorkerSets have no pod yet
        labels = labels_of(child)
        units.setdefault((labels.get(keys.DS_SLICE_LABEL, "0"), labels.get(keys.DS_REVISION_LABEL, "")), [])
    sliced = any(scope == keys.SCOPE_SLICE for scope in workload.role_scopes.values())
    return [
        Unit(
            slice=slice_index,
            revision=revision,
            domain=domain_state(
                snapshot,
                workload.namespace,
                names.slice_domain_name(workload.name, int(slice_index), revision),
                workload=workload,
            )
            if sliced and slice_index.isdigit() and revision
            else None,
            pods=[_pod(snapshot, workload, p) for p in units[(slice_index, revision)]],
            replica_domains=_replica_domains(snapshot, workload, units[(slice_index, revision)]),
        )
        for slice_index, revision in sorted(units, key=lambda k: (int(k[0]) if k[0].isdigit() else -1, k[1]))
    ]


def _replica_domains(snapshot: Snapshot, workload: Workload, pods: Sequence[Object]) -> dict[str, DomainState]:
    """The domain each leader of a replica-scope role records, ready or not for its child LeaderWorkerSet."""
    found = {}
    for pod in pods:
        labels = labels_of(pod)
        recorded = references.recorded_domain(pod)
        if labels.get(keys.SCOPE_LABEL) == keys.SCOPE_REPLICA and _is_leader(pod) and recorded:
            where = f"{labels.get(keys.DS_ROLE_LABEL, '?')}/{labels.get(keys.LWS_GROUP_INDEX_LABEL, '?')}"
            found[where] = domain_state(
                snapshot, workload.namespace, recorded, workload=domain_owner(pod, workload, snapshot)
            )
    return dict(sorted(found.items()))


def _is_leader(pod: Mapping[str, Any]) -> bool:
    return labels_of(pod).get(keys.LWS_WORKER_INDEX_LABEL) == "0"


def _pod(snapshot: Snapshot, workload: Workload, pod: Object) -> Pod:
    containers = containers_of(pod, workload=workload)
    labels = labels_of(pod)
    position = "leader" if _is_leader(pod) else "worker"
    role = labels.get(keys.DS_ROLE_LABEL)
    return Pod(
        name=name_of(pod),
        role=f"{role}/{position}" if role else position,
        phase=str((pod.get("status") or {}).get("phase") or "Unknown")
        + (" (terminating)" if pod["metadata"].get("deletionTimestamp") else ""),
        gated=injection.is_gated(pod.get("spec") or {}),
        node=(pod.get("spec") or {}).get("nodeName"),
        clique=clique_of(snapshot, pod),
        domain=references.recorded_domain(pod) or annotations_of(pod).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION),
        claim_in=containers.claimed,
        no_claim=containers.unclaimed,
    )


def _obsolete(snapshot: Snapshot, domain: Object) -> ObsoleteDomain:
    facts = domains.facts_of(domain)
    users = users_of(snapshot, domain)
    if facts.deleting:
        state = "being deleted, held by the protection finalizer" if facts.protected else "being deleted"
    elif facts.condemned:
        state = "condemned: about to be deleted"
    elif users:
        state = "deleted once its pods are gone"
    else:
        state = "no pod uses it; its controller deletes it (while the gate is on)"
    return ObsoleteDomain(name=facts.name, state=state, waiting_for=users)


# --- output ----------------------------------------------------------------------------------------------


def as_data(found: Sequence[WorkloadStatus]) -> dict[str, Any]:
    return {"workloads": [s.model_dump(by_alias=True, mode="json") for s in found]}


def as_table(found: Sequence[WorkloadStatus], *, now: datetime.datetime, style: render.Style) -> str:
    if not found:
        return "No workload opts in to automatic ComputeDomains here (name one to see it anyway)."
    lines: list[str] = []
    for status in found:
        lines += _workload_lines(status, now=now, style=style)
        lines.append("")
    return "\n".join(render.fit(line) for line in lines).rstrip()


def _workload_lines(status: WorkloadStatus, *, now: datetime.datetime, style: render.Style) -> list[str]:
    count = len(status.units)
    if status.kind == LWS_KIND:
        opt_in = f"auto-compute-domain: {status.opt_in}"
        what = f"{count} group{'' if count == 1 else 's'}"
    else:
        opt_in = f"auto-compute-domain: {status.opt_in}; roles: " + ", ".join(
            f"{role}={scope}" for role, scope in status.role_scopes.items()
        )
        what = f"{count} (slice, revision){'' if count == 1 else ' pairs'}"
    lines = [style.paint(f"{status.kind} {status.namespace}/{status.name}", "bold") + f"  {opt_in}  ({what})"]
    for unit in status.units:
        where = f"group {unit.group}" if unit.group is not None else f"slice {unit.slice} revision {unit.revision}"
        shown = (
            "no slice ComputeDomain (no role shares one)"
            if unit.group is None and unit.domain is None
            else _domain_line(unit.domain, now=now, style=style)
        )
        lines.append(f"  {where}: {shown}")
        rows = [["POD", "ROLE", "PHASE", "GATE", "NODE", "CLIQUE", "CLAIM IN", "NO CLAIM"]]
        reasons: dict[str, str] = {}
        for pod in unit.pods:
            reasons.update(pod.no_claim)
            rows.append(
                [
                    pod.name,
                    pod.role,
                    pod.phase,
                    style.paint("gated", "yellow") if pod.gated else "-",
                    pod.node or "-",
                    render.short_clique(pod.clique),
                    ",".join(pod.claim_in) or "-",
                    ",".join(pod.no_claim) or "-",
                ]
            )
        lines += render.table(rows, indent=4) if unit.pods else ["    (no pods yet)"]
        lines += [f"    no claim in {container}: {why}" for container, why in sorted(reasons.items())]
        lines += [
            f"    per-replica {_domain_line(domain, now=now, style=style)} ({where})"
            for where, domain in unit.replica_domains.items()
        ]
    for obsolete in status.obsolete_domains:
        waiting = f"; waiting for pods: {', '.join(obsolete.waiting_for)}" if obsolete.waiting_for else ""
        lines.append(f"  obsolete ComputeDomain {obsolete.name}: {obsolete.state}{waiting}")
    return lines


def _domain_line(domain: DomainState | None, *, now: datetime.datetime, style: render.Style) -> str:
    if domain is None:
        return "no ComputeDomain (no leader pod records one)"
    driver = f", driver status {domain.driver_status}" if domain.driver_status else ""
    if domain.ready:
        return (
            f"ComputeDomain {domain.name} {style.paint('ready', 'green')} for {render.age(domain.since, now)}{driver}"
        )
    since = f" for {render.age(domain.since, now)}" if domain.since else ""
    return f"ComputeDomain {domain.name} {style.paint('not ready', 'red')}{since}: {domain.reason}{driver}"
