"""`kubectl mnnvl explain POD`: the chain that decides one pod, in plain words, each link with the object to look
at next. A pure function of the pod, a snapshot of its namespace and what is known of the installed release."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mnnvl_api import keys
from mnnvl_api.decisions import injection, references

from . import release, render
from .snapshot import (
    LWS_KIND,
    DomainState,
    Snapshot,
    Workload,
    containers_of,
    domain_owner,
    domain_state,
    labels_of,
    name_of,
    namespace_of,
    workload_of_pod,
    workloads_of,
)


class Link(render.Report):
    """One link of the chain: what it is about, what was found, and the object to look at next (if any)."""

    about: str
    finding: str
    problem: bool = False
    look_at: str | None = None


class Explanation(render.Report):
    pod: str
    namespace: str
    #: The one-line answer: runs / waits for what / left alone.
    verdict: str
    links: list[Link]


def explain(
    pod: Mapping[str, Any],
    snapshot: Snapshot,
    *,
    controllers: Sequence[release.InstalledController] | None,
    webhooks: set[str] | None,
) -> Explanation:
    """`controllers` and `webhooks`: the installed release as read (None: the user may not read it)."""
    namespace, name = namespace_of(pod), name_of(pod)
    links: list[Link] = []
    workload = workload_of_pod(pod, workloads_of(snapshot))
    labels = labels_of(pod)
    scope = labels.get(keys.SCOPE_LABEL)
    get = f"kubectl -n {namespace} get"

    if workload is None:
        lws = labels.get(keys.LWS_NAME_LABEL)
        if not lws:
            finding = "not a pod of a LeaderWorkerSet or DisaggregatedSet: mnnvl never touches it"
            return Explanation(
                pod=name, namespace=namespace, verdict=finding, links=[Link(about="workload", finding=finding)]
            )
        links.append(
            Link(
                about="workload",
                finding=f"its workload ({labels.get(keys.DS_NAME_LABEL) or lws}) no longer exists",
                problem=True,
                look_at=f"{get} leaderworkersets,disaggregatedsets",
            )
        )
    else:
        links.append(_workload_link(workload, get))

    if scope is None:
        why = containers_of(pod, workload=workload).unclaimed
        reason = next(iter(why.values()), "its pod template was not stamped")
        links.append(Link(about="scope", finding=f"none: {reason}; mnnvl adds no claim and no gate"))
        return Explanation(pod=name, namespace=namespace, verdict=f"left alone by mnnvl ({reason})", links=links)

    controller = release.scope_controller(scope)
    links.append(_scope_link(scope, labels, controller))
    installed = next((c for c in controllers or () if c.controller == controller), None)

    recorded = references.recorded_domain(pod)
    owner = domain_owner(pod, workload, snapshot)
    state = domain_state(snapshot, namespace, recorded, workload=owner) if recorded else None
    gate_off = installed is not None and installed.gate_enabled is False
    if state is None and installed is not None and installed.gate_enabled is False:
        links.append(
            Link(
                about="domain",
                finding=f"none recorded: the pod was admitted while the {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE} gate "
                f"is off on {controller}, which then injects nothing",
                problem=True,
                look_at=_configuration(installed),
            )
        )
    elif state is None:
        links.append(
            Link(
                about="domain",
                finding=f"none recorded ({keys.COMPUTE_DOMAIN_NAME_ANNOTATION} is unset): the pod was admitted "
                f"without {controller}'s pod webhook",
                problem=True,
                look_at=f"kubectl get mutatingwebhookconfigurations -l {release.PART_OF_SELECTOR}",
            )
        )
    elif state.ready:
        links.append(
            Link(
                about="domain",
                finding=f"ComputeDomain {state.name} is ready",
                look_at=f"{get} computedomain {state.name}",
            )
        )
    else:
        links.append(
            Link(
                about="domain",
                finding=f"ComputeDomain {state.name} is not ready: {state.reason}",
                problem=True,
                look_at=f"{get} computedomain {state.name} -o yaml",
            )
        )

    containers = containers_of(pod, workload=workload)
    claim = f"held by {', '.join(containers.claimed)}" if containers.claimed else "held by no container"
    unclaimed = "; ".join(f"{c}: {why}" for c, why in containers.unclaimed.items())
    links.append(
        Link(
            about="claim",
            finding=f"{keys.CHANNEL_CLAIM_NAME} {claim}" + (f"; not in {unclaimed}" if unclaimed else ""),
            problem=containers.missing_claim,
            look_at=(
                f"enable the {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE} gate, then delete the pod so it is recreated with "
                f"the claim: kubectl -n {namespace} delete pod {name}"
                if gate_off
                else f"delete the pod so its controller recreates it through the webhook: kubectl -n {namespace} "
                f"delete pod {name}"
            )
            if containers.missing_claim
            else None,
        )
    )

    gate, verdict = _gate_link(pod, state, installed, controller)
    links.append(gate)
    if webhooks is not None and release.pod_webhook(controller) not in webhooks:
        links.append(
            Link(
                about="webhook",
                finding=f"{release.pod_webhook(controller)} is not registered: new pods of this scope get no claim "
                "and no gate; reinstall or upgrade the chart",
                problem=True,
                look_at=f"kubectl get mutatingwebhookconfigurations -l {release.PART_OF_SELECTOR}",
            )
        )
    return Explanation(pod=name, namespace=namespace, verdict=verdict, links=links)


def _configuration(installed: release.InstalledController) -> str:
    return f"kubectl -n {installed.namespace} get configmap {installed.config_map} -o yaml"


def _workload_link(workload: Workload, get: str) -> Link:
    kind = "leaderworkerset" if workload.kind == LWS_KIND else "disaggregatedset"
    if workload.kind == LWS_KIND:
        finding = f"LeaderWorkerSet {workload.name}: auto-compute-domain {workload.opt_in}"
    else:
        roles = ", ".join(f"{role}={scope}" for role, scope in workload.role_scopes.items())
        finding = f"DisaggregatedSet {workload.name}: auto-compute-domain {workload.opt_in}; roles {roles or '-'}"
    return Link(about="workload", finding=finding, look_at=f"{get} {kind} {workload.name} -o yaml")


def _scope_link(scope: str, labels: Mapping[str, str], controller: str) -> Link:
    if scope == keys.SCOPE_SLICE:
        where = (
            f"per (slice, revision): slice {labels.get(keys.DS_SLICE_LABEL, '0')}, revision "
            f"{labels.get(keys.DS_REVISION_LABEL, '?')}, role {labels.get(keys.DS_ROLE_LABEL, '?')}"
        )
    else:
        where = f"per replica: group {labels.get(keys.LWS_GROUP_INDEX_LABEL, '?')}"
    return Link(about="scope", finding=f"{where}; managed by {controller}")


def _gate_link(
    pod: Mapping[str, Any],
    state: DomainState | None,
    installed: release.InstalledController | None,
    controller: str,
) -> tuple[Link, str]:
    """The gate link and the verdict."""
    spec = pod.get("spec") or {}
    if not injection.is_gated(spec):
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        node = spec.get("nodeName")
        where = (
            f" on node {node}"
            if node
            else ""
            if phase in references.TERMINAL_PHASES
            else " (waiting for the scheduler)"
        )
        if pod["metadata"].get("deletionTimestamp"):
            where += ", terminating (it keeps its domain until it has gone)"
        return Link(about="gate", finding=f"not gated; {phase}{where}"), f"not gated: {phase}{where}"
    lease = (
        f"kubectl -n {installed.namespace} get lease {controller}"
        if installed is not None
        else f"kubectl get leases -A --field-selector metadata.name={controller}"
    )
    if installed is not None and installed.gate_enabled is False:
        finding = (
            f"gated, and the {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE} gate is disabled on {controller}: nothing removes "
            f"the gate; enable the feature gate, or remove the scheduling gate {keys.SCHEDULING_GATE} by hand"
        )
        look_at = _configuration(installed)
    elif state is None:
        finding = "gated, with no domain recorded: nothing will remove the gate; delete the pod to recreate it"
        look_at = None
    elif not state.ready:
        finding = f"gated until ComputeDomain {state.name} is ready: {state.reason}"
        look_at = f"kubectl -n {namespace_of(pod)} get computedomain {state.name} -o yaml"
    else:
        finding = (
            f"gated, though ComputeDomain {state.name} is ready: {controller} removes the gate on its next pass; "
            "if it stays, check that the controller leads (kubectl mnnvl doctor)"
        )
        look_at = lease
    if installed is None:
        finding += f" ({controller} was not found installed, or its Configuration could not be read)"
    return Link(about="gate", finding=finding, problem=True, look_at=look_at), finding


def as_text(found: Explanation, style: render.Style) -> str:
    lines = [style.paint(f"pod {found.namespace}/{found.pod}", "bold") + f": {found.verdict}", ""]
    for link in found.links:
        mark = style.paint("✗", "red") if link.problem else style.paint("✓", "green")
        lines.append(f"{mark} {link.about:<9} {link.finding}")
        if link.look_at:
            lines.append(f"  {'':<9} {style.paint('look at:', 'dim')} {link.look_at}")
    return "\n".join(lines)
