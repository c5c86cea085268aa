"""`kubectl mnnvl uninstall-check`: what uninstalling mnnvl's controllers now would leave behind, and what to do
first. The chart's `pre-delete` hook runs it and refuses the uninstall while anything is listed.

Three things outlive the controllers badly (docs/install.md, "Uninstalling"):
- a managed ComputeDomain: nothing deletes it once its workload goes, and its protection finalizer, which only
  mnnvl-guardian releases, keeps it (and its namespace) Terminating forever once someone deletes it;
- a pod held by mnnvl's scheduling gate: only the scope controller that admitted it lifts the gate;
- a pod template stamped by a scope controller: without that controller's webhooks its new pods are admitted with
  neither the channel claim nor the gate.

Each is a leftover only when the controller it needs is among those being uninstalled, so uninstalling one release
of a split install (docs/install.md, "Partial installs") is not refused for what another release's controllers
look after."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from mnnvl_api import keys
from mnnvl_api.decisions import domains, injection, ownership, references, templates
from mnnvl_runtime import kube

from . import reading, render
from .snapshot import labels_of, live_workload_uids, name_of, namespace_of

#: The controllers whose going leaves something behind: the scope controllers and the guardian.
CONTROLLERS: Final = (keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER)
#: The scope controller that stamps templates of each scope and admits and releases their pods.
SCOPE_CONTROLLERS: Final = {keys.SCOPE_REPLICA: keys.LWS_CONTROLLER, keys.SCOPE_SLICE: keys.DS_CONTROLLER}
#: How a workload is named in `kubectl` terms, by the controller that manages its domains.
WORKLOAD_RESOURCES: Final = {keys.LWS_CONTROLLER: "lws", keys.DS_CONTROLLER: "disaggregatedset"}
LWS_KIND: Final = "LeaderWorkerSet"
POD_KIND: Final = "Pod"
UNINSTALLING: Final = "docs/install.md, section Uninstalling"


class Leftover(render.Report):
    """One object uninstalling would leave behind: what it is, why it matters, and what to do before."""

    kind: str
    namespace: str
    name: str
    why: str
    fix: str


def leftovers(
    *,
    compute_domains: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    leaderworkersets: Sequence[Mapping[str, Any]],
    disaggregatedsets: Sequence[Mapping[str, Any]],
    uninstalling: Collection[str],
) -> list[Leftover]:
    """What uninstalling the controllers `uninstalling` would leave behind, in the order to deal with them:
    workloads with stamped templates first (deleting them ends their pods and, through their controllers, their
    domains), then gated pods, then domains."""
    workload_uids = live_workload_uids([*leaderworkersets, *disaggregatedsets])
    found = [
        *_stamped_workloads(leaderworkersets, disaggregatedsets, uninstalling),
        *(_gated_pod(pod, uninstalling) for pod in pods),
        *(_domain(domain, pods, workload_uids, uninstalling) for domain in compute_domains),
    ]
    order = {LWS_KIND: 0, keys.DS_KIND: 0, POD_KIND: 1, keys.COMPUTE_DOMAIN_KIND: 2}
    return sorted(
        (leftover for leftover in found if leftover is not None),
        key=lambda o: (order[o.kind], o.namespace, o.kind, o.name),
    )


def _stamped_workloads(
    leaderworkersets: Sequence[Mapping[str, Any]],
    disaggregatedsets: Sequence[Mapping[str, Any]],
    uninstalling: Collection[str],
) -> list[Leftover]:
    """LeaderWorkerSets and DisaggregatedSets whose pod templates carry a stamp of a controller being uninstalled.
    A child LeaderWorkerSet of a reported DisaggregatedSet is left out: its set is what the user deletes. A child of
    a set that is not reported (opted out while its old revision drains, say) is reported on its own."""
    found: list[Leftover] = []
    reported_sets: set[str] = set()
    for ds in disaggregatedsets:
        stamped: dict[str, str] = {}
        for role in (ds.get("spec") or {}).get("roles") or ():
            role_templates = templates.templates_of((role.get("spec") or {}).get("leaderWorkerTemplate"))
            stamped |= {f"{role.get('name')}.{field}": scope for field, scope in _stamps(role_templates).items()}
        reported = _stamped_workload(ds, keys.DS_KIND, stamped, uninstalling, None)
        if reported is not None:
            found.append(reported)
            reported_sets.add(str(ds["metadata"].get("uid")))
    for lws in leaderworkersets:
        parent = ownership.disaggregated_set_reference(lws["metadata"])
        if parent is not None and str(parent.get("uid")) in reported_sets:
            continue
        stamped = _stamps(templates.templates_of((lws.get("spec") or {}).get("leaderWorkerTemplate")))
        reported = _stamped_workload(lws, LWS_KIND, stamped, uninstalling, parent)
        if reported is not None:
            found.append(reported)
    return found


def _stamps(pod_templates: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """Template field → the scope it is stamped for, of the templates carrying a stamp of ours: the scope label, or
    a reserved annotation (its scope read as replica when the label was taken off by hand)."""
    found = {}
    for field, template in pod_templates:
        meta = template.get("metadata") or {}
        scope = (meta.get("labels") or {}).get(keys.SCOPE_LABEL)
        reserved = any(key in (meta.get("annotations") or {}) for key in keys.RESERVED_TEMPLATE_ANNOTATIONS)
        if scope is not None or reserved:
            found[field] = str(scope or keys.SCOPE_REPLICA)
    return found


def _stamped_workload(
    workload: Mapping[str, Any],
    kind: str,
    stamped: Mapping[str, str],
    uninstalling: Collection[str],
    parent: Mapping[str, Any] | None,
) -> Leftover | None:
    needed = sorted({SCOPE_CONTROLLERS.get(scope, keys.LWS_CONTROLLER) for scope in stamped.values()})
    gone = [controller for controller in needed if controller in uninstalling]
    if not gone:
        return None
    fields = ", ".join(f"{field} ({scope})" for field, scope in sorted(stamped.items()))
    why = (
        f"pod templates stamped for mnnvl: {fields}; without {' and '.join(gone)} its new pods are admitted with "
        "neither the channel claim nor the gate"
    )
    if parent is not None:
        fix = (
            f"delete its DisaggregatedSet {parent.get('name')} (its controller); or, when that set was opted out, "
            "wait until its rollout has replaced this revision"
        )
    else:
        where = (
            keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION
            if kind == LWS_KIND
            else f"{keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION} on it and its roles"
        )
        fix = (
            f"delete it, or opt it out ({where}: {keys.OPT_IN_DISABLED}) while mnnvl still runs: the controller "
            "takes the stamps off and its groups restart without the channel claim"
        )
    return Leftover(kind=kind, namespace=namespace_of(workload), name=name_of(workload), why=why, fix=fix)


def _gated_pod(pod: Mapping[str, Any], uninstalling: Collection[str]) -> Leftover | None:
    spec = pod.get("spec") or {}
    if not injection.is_gated(spec) or not references.is_non_terminal(pod):
        return None
    scope = labels_of(pod).get(keys.SCOPE_LABEL)
    controller = SCOPE_CONTROLLERS.get(str(scope))
    if controller is not None and controller not in uninstalling:
        return None
    waits_for = references.recorded_domain(pod)
    why = (
        f"held by the scheduling gate {keys.SCHEDULING_GATE}, which only {controller or 'its scope controller'} "
        f"lifts{f' (it waits for ComputeDomain {waits_for})' if waits_for else ''}: without it the pod stays Pending "
        "forever"
    )
    return Leftover(
        kind=POD_KIND,
        namespace=namespace_of(pod),
        name=name_of(pod),
        why=why,
        fix="delete its workload (a pod alone is recreated); or wait until its domain is ready and the gate lifted",
    )


def _domain(
    domain: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    workload_uids: Collection[str],
    uninstalling: Collection[str],
) -> Leftover | None:
    facts = domains.facts_of(domain)
    reasons = []
    if facts.managed and facts.managed_by in uninstalling:
        reasons.append(f"made by {facts.managed_by}: without it nothing deletes this domain once its workload goes")
    if facts.protected and keys.GUARDIAN_CONTROLLER in uninstalling:
        reasons.append(
            f"carries the protection finalizer, which only {keys.GUARDIAN_CONTROLLER} releases: without it a deleted "
            "domain stays Terminating, and so does its namespace"
        )
    if not reasons:
        return None
    users = references.users_of(
        (p for p in pods if namespace_of(p) == facts.namespace), domain=facts.name, claim_template=facts.claim_template
    )
    workload = f"{WORKLOAD_RESOURCES.get(str(facts.managed_by), 'workload')}/{facts.workload or '?'}"
    if facts.managed and facts.owner_uid in workload_uids:
        fix = f"delete {workload} and wait until mnnvl has deleted this domain"
    elif facts.deleting and users:
        fix = f"being deleted: delete the pods that use it ({', '.join(users)}); the guardian then releases it"
    elif facts.deleting:
        fix = "being deleted and unused: wait until mnnvl-guardian has released it"
    elif facts.managed:
        fix = f"its workload ({workload}) is gone: `kubectl mnnvl gc --apply` deletes it once no pod uses it"
    else:
        fix = (
            "not made by mnnvl: take the protection finalizer off by hand (see the docs) or delete it while mnnvl runs"
        )
    return Leftover(
        kind=keys.COMPUTE_DOMAIN_KIND, namespace=facts.namespace, name=facts.name, why="; ".join(reasons), fix=fix
    )


def read(client: kube.Kube, uninstalling: Collection[str]) -> list[Leftover]:
    """One list of each kind, cluster-wide (a kind the API server does not serve has nothing left behind). Pods are
    narrowed to mnnvl's scopes: only those carry the gate or the channel claim. The domains are listed first, so a
    domain made during the run has its workload listed."""
    compute_domains = reading.list_all(client, keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL)
    return leftovers(
        compute_domains=compute_domains or [],
        leaderworkersets=reading.list_all(client, keys.LWS_API_VERSION, keys.LWS_PLURAL) or [],
        disaggregatedsets=reading.list_all(client, keys.DS_API_VERSION, keys.DS_PLURAL) or [],
        pods=reading.list_all(client, "v1", "pods", label_selector=keys.SCOPE_LABEL) or [],
        uninstalling=uninstalling,
    )


def exit_code(found: Sequence[Leftover]) -> int:
    """0: nothing is left behind; 1: something is (the hook then refuses the uninstall)."""
    return 1 if found else 0


def as_text(found: Sequence[Leftover], uninstalling: Collection[str]) -> str:
    who = ", ".join(sorted(uninstalling))
    if not found:
        return (
            f"Uninstalling {who} leaves nothing behind: no ComputeDomain of theirs, no pod they gate, no pod "
            "template they stamped."
        )
    lines = [
        f"Uninstalling {who} now would leave {len(found)} object(s) behind. Deal with them first ({UNINSTALLING}):"
    ]
    for leftover in found:
        lines += [
            f"- {leftover.kind} {leftover.namespace}/{leftover.name}",
            f"    why: {leftover.why}",
            f"    do:  {leftover.fix}",
        ]
    return "\n".join(lines)


def as_data(found: Sequence[Leftover], uninstalling: Collection[str]) -> dict[str, Any]:
    return {
        "uninstalling": sorted(uninstalling),
        "leftovers": [o.model_dump(by_alias=True, mode="json") for o in found],
    }
