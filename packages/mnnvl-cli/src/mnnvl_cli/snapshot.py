"""What every command decides on: the objects of one read of the cluster, as plain dicts, and facts derived from
them that more than one command needs (whose a domain is, whether it is ready, why a container has no claim)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains, enrollment, injection, opt_in, ownership, references
from mnnvl_api.models import disaggregatedset

from . import render

Object = dict[str, Any]
LWS_KIND = "LeaderWorkerSet"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    """One list per resource kind. `disaggregatedsets` and `domains` are None when their API is not served."""

    leaderworkersets: Sequence[Object]
    disaggregatedsets: Sequence[Object] | None
    pods: Sequence[Object]
    domains: Sequence[Object] | None
    #: (namespace, name) of each ResourceClaimTemplate → its creationTimestamp; None when they may not be read.
    claim_templates: Mapping[tuple[str, str], str] | None
    #: node name → its clique label (nodes without one are absent); None when nodes may not be read.
    node_cliques: Mapping[str, str] | None

    # Indexes, built once on first use: thousands of pods and domains are looked up by name, not scanned.

    @functools.cached_property
    def domain_index(self) -> dict[tuple[str, str], Object]:
        """(namespace, name) → the ComputeDomain."""
        return {(namespace_of(d), name_of(d)): d for d in self.domains or ()}

    @functools.cached_property
    def domains_by_owner(self) -> dict[str, list[Object]]:
        """The owner-uid label's value → the ComputeDomains carrying it."""
        found: dict[str, list[Object]] = {}
        for domain in self.domains or ():
            owner = labels_of(domain).get(keys.OWNER_UID_LABEL)
            if owner:
                found.setdefault(owner, []).append(domain)
        return found

    @functools.cached_property
    def pods_by_workload(self) -> dict[tuple[str, str, str], list[Object]]:
        """(kind, namespace, name) of the top-level workload → its pods by name: a DisaggregatedSet's pods under it,
        never under its child LeaderWorkerSets."""
        found: dict[tuple[str, str, str], list[Object]] = {}
        for pod in sorted(self.pods, key=name_of):
            labels = labels_of(pod)
            ds = labels.get(keys.DS_NAME_LABEL)
            kind, name = (keys.DS_KIND, ds) if ds else (LWS_KIND, labels.get(keys.LWS_NAME_LABEL))
            if name:
                found.setdefault((kind, namespace_of(pod), name), []).append(pod)
        return found


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("namespace") or "")


def name_of(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj["metadata"].get("labels") or {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj["metadata"].get("annotations") or {}


# --- workloads -------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    """A LeaderWorkerSet (not one a DisaggregatedSet made) or a DisaggregatedSet, and how it opted in."""

    kind: str  # LWS_KIND or keys.DS_KIND
    namespace: str
    name: str
    uid: str
    #: `enabled`, `disabled` or `not set` (LWS); for a DisaggregatedSet, each role's scope.
    opt_in: str
    role_scopes: Mapping[str, str]
    body: Object

    @property
    def manager(self) -> str:
        return keys.LWS_CONTROLLER if self.kind == LWS_KIND else keys.DS_CONTROLLER

    @property
    def managed(self) -> bool:
        """Opted in (LWS) or with a role enrolled in a scope (DisaggregatedSet)."""
        if self.kind == LWS_KIND:
            return self.opt_in == keys.OPT_IN_ENABLED
        return any(scope != enrollment.RoleScope.NONE.value for scope in self.role_scopes.values())

    @property
    def reference(self) -> str:
        return f"{'lws' if self.kind == LWS_KIND else 'disaggregatedset'}/{self.name}"


def workloads_of(snapshot: Snapshot) -> list[Workload]:
    """Every top-level workload: the LeaderWorkerSets no DisaggregatedSet controls, and the DisaggregatedSets."""
    found = [
        _lws_workload(lws)
        for lws in snapshot.leaderworkersets
        if not ownership.controlled_by_disaggregated_set(lws["metadata"])
    ]
    found += [_ds_workload(ds) for ds in snapshot.disaggregatedsets or ()]
    return sorted(found, key=lambda w: (w.namespace, w.kind, w.name))


def _lws_workload(lws: Object) -> Workload:
    value = annotations_of(lws).get(keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION)
    return Workload(
        kind=LWS_KIND,
        namespace=namespace_of(lws),
        name=name_of(lws),
        uid=str(lws["metadata"].get("uid", "")),
        opt_in=value if value in keys.OPT_IN_VALUES else "not set" if value is None else f"invalid ({value!r})",
        role_scopes={},
        body=lws,
    )


def _ds_workload(ds: Object) -> Workload:
    try:
        parsed = disaggregatedset.DisaggregatedSet.model_validate(ds)
        scopes = {role: scope.value for role, scope in enrollment.enroll_roles(parsed).scopes.items()}
    except ValueError:  # a DisaggregatedSet our model cannot read: no role is enrolled as far as we can tell
        scopes = {}
    value = annotations_of(ds).get(keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION)
    return Workload(
        kind=keys.DS_KIND,
        namespace=namespace_of(ds),
        name=name_of(ds),
        uid=str(ds["metadata"].get("uid", "")),
        opt_in=value if value in keys.OPT_IN_VALUES else "not set" if value is None else f"invalid ({value!r})",
        role_scopes=scopes,
        body=ds,
    )


def workload_of_pod(pod: Mapping[str, Any], workloads: Sequence[Workload]) -> Workload | None:
    """The top-level workload a pod belongs to, by its labels: its DisaggregatedSet, else its LeaderWorkerSet."""
    labels = labels_of(pod)
    namespace = namespace_of(pod)
    ds = labels.get(keys.DS_NAME_LABEL)
    kind, name = (keys.DS_KIND, ds) if ds else (LWS_KIND, labels.get(keys.LWS_NAME_LABEL))
    for workload in workloads:
        if workload.kind == kind and workload.name == name and workload.namespace == namespace:
            return workload
    return None


def domain_owner(pod: Mapping[str, Any], workload: Workload | None, snapshot: Snapshot) -> Workload | None:
    """The workload the pod's domain is made for: for a replica-scope pod of a DisaggregatedSet, the child
    LeaderWorkerSet its role made (mnnvl-lws made the domain for that child); otherwise the pod's own workload."""
    labels = labels_of(pod)
    if workload is None or workload.kind != keys.DS_KIND or labels.get(keys.SCOPE_LABEL) != keys.SCOPE_REPLICA:
        return workload
    child = next(
        (
            lws
            for lws in snapshot.leaderworkersets
            if namespace_of(lws) == namespace_of(pod) and name_of(lws) == labels.get(keys.LWS_NAME_LABEL)
        ),
        None,
    )
    return None if child is None else _lws_workload(child)


def live_workload_uids(workloads: Iterable[Mapping[str, Any]]) -> set[str]:
    """The uids of the workloads listed (LeaderWorkerSets and DisaggregatedSets) and of the DisaggregatedSets their
    child LeaderWorkerSets name as controller: alive too, even where their own API is not served."""
    uids: set[str] = set()
    for workload in workloads:
        uids.add(str(workload["metadata"].get("uid")))
        reference = ownership.controller_reference(workload["metadata"], keys.DS_KIND)
        if reference is not None and reference.get("uid"):
            uids.add(str(reference["uid"]))
    return uids


# --- domains ---------------------------------------------------------------------------------------------


class DomainState(render.Report):
    """A domain as a pod of `workload` sees it: whether the controllers release pods onto it, and why not."""

    name: str
    exists: bool
    ready: bool
    #: When it became what it is: ready (its claim template's creation), else the domain's creation or deletion.
    since: str | None
    #: Why pods wait (empty when ready), in plain words, of the domain ("it").
    reason: str
    #: The driver's own `status.status` (informational: pods are never gated on it).
    driver_status: str | None
    foreign: bool = False


def domain_state(snapshot: Snapshot, namespace: str, name: str, *, workload: Workload | None) -> DomainState:
    """Whether the domain `name` in `namespace` is ready for pods of `workload` (`domains.is_ready`), and why not."""
    found = snapshot.domain_index.get((namespace, name))
    template = names.claim_template_name(name)
    templates = snapshot.claim_templates
    template_created = None if templates is None else templates.get((namespace, template))
    if found is None:
        return DomainState(
            name=name,
            exists=False,
            ready=False,
            since=None,
            reason="it does not exist (yet): its controller creates it",
            driver_status=None,
        )
    facts = domains.facts_of(found)
    meta = found["metadata"]
    driver_status = (found.get("status") or {}).get("status")
    owned = workload is not None and domains.is_owned_by(facts, owner_uid=workload.uid, manager=workload.manager)
    since = str(meta.get("creationTimestamp") or "") or None
    if not owned:
        whose = "the workload" if workload is None else f"{workload.reference} (uid {workload.uid})"
        return DomainState(
            name=name,
            exists=True,
            ready=False,
            since=since,
            reason=f"name collision: it is not {whose}'s but {domains.describe_owner(facts)}",
            driver_status=driver_status,
            foreign=True,
        )
    reason = ""
    if facts.deleting:
        reason, since = "it is being deleted", str(meta.get("deletionTimestamp"))
    elif facts.condemned:
        reason = "it is about to be deleted (condemned: no pod is admitted onto it)"
    elif templates is None:
        reason = f"cannot tell whether its ResourceClaimTemplate {template} exists (you may not list them)"
    elif template_created is None:
        reason = f"waiting for the NVIDIA driver to create ResourceClaimTemplate {template}"
    return DomainState(
        name=name,
        exists=True,
        ready=not reason,
        since=template_created if not reason else since,
        reason=reason,
        driver_status=driver_status,
    )


def users_of(snapshot: Snapshot, domain: Mapping[str, Any]) -> list[str]:
    """The non-terminal pods of the snapshot that hold the domain's claim or record the domain."""
    facts = domains.facts_of(domain)
    return references.users_of(
        (p for p in snapshot.pods if namespace_of(p) == facts.namespace),
        domain=facts.name,
        claim_template=facts.claim_template,
    )


# --- containers ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Containers:
    """Which of a pod's containers hold the channel claim, and why each of the others does not."""

    claimed: list[str]
    #: container name → why it holds no claim.
    unclaimed: dict[str, str]
    #: The pod should hold the claim and does not: it was admitted without mnnvl's pod webhook.
    missing_claim: bool


def containers_of(pod: Mapping[str, Any], *, workload: Workload | None) -> Containers:
    spec = pod.get("spec") or {}
    pod_annotations = annotations_of(pod)
    everything = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    claimed = [c["name"] for c in everything if _holds_channel(c)]
    scope = labels_of(pod).get(keys.SCOPE_LABEL)
    targets, _ = injection.target_containers(spec, pod_annotations)
    target_names = {t.name for t in targets}
    named = injection.named_containers(pod_annotations)
    unclaimed: dict[str, str] = {}
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    for container in [*sidecars, *(spec.get("containers") or ())]:
        name = container["name"]
        if name in claimed:
            continue
        if scope is None:
            unclaimed[name] = _why_out_of_scope(pod, workload)
        elif named is not None and name not in target_names:
            unclaimed[name] = f"not targeted ({keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION} names {', '.join(named)})"
        elif not injection.requests_gpu(container):
            unclaimed[name] = "CPU-only"
        else:
            unclaimed[name] = MISSING_CLAIM
    missing = scope is not None and not claimed and injection.lacks_channel_claim(spec, pod_annotations)
    return Containers(claimed=claimed, unclaimed=unclaimed, missing_claim=missing)


#: Why a GPU container of a stamped pod lacks the claim: its pod was admitted while mnnvl's gate was off, or
#: without its pod webhook (not registered or unreachable with an Ignore policy).
MISSING_CLAIM = "missing: admitted while the gate was off or without mnnvl's pod webhook"


def _holds_channel(container: Mapping[str, Any]) -> bool:
    claims = (container.get("resources") or {}).get("claims") or ()
    return any(claim.get("name") == keys.CHANNEL_CLAIM_NAME for claim in claims)


def _why_out_of_scope(pod: Mapping[str, Any], workload: Workload | None) -> str:
    if workload is None:
        return "its workload is gone"
    if workload.kind == keys.DS_KIND:
        role = labels_of(pod).get(keys.DS_ROLE_LABEL, "")
        scope = workload.role_scopes.get(role)
        if scope == enrollment.RoleScope.NONE.value:
            return f"role {role} opted out"
    elif not opt_in.is_opted_in(annotations_of(workload.body), keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION):
        return "workload not opted in"
    return "pod template not stamped (created before the opt-in took effect, or without mnnvl's webhooks)"


def clique_of(snapshot: Snapshot, pod: Mapping[str, Any]) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or snapshot.node_cliques is None:
        return None
    return snapshot.node_cliques.get(str(node))
