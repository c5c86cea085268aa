"""mnnvl-lws as a scope controller (`mnnvl_runtime.scopes`): LeaderWorkerSet replicas, one ComputeDomain per
group incarnation."""

from __future__ import annotations

from mnnvl_api import keys
from mnnvl_runtime import admission, preflight, scopes, webhooks

from . import planner, pod_admission, rules, state


def deleted(snapshot: planner.Snapshot, name: str) -> str:
    return f"Deleted ComputeDomain {name}: its group incarnation is gone and no pod uses it"


def concerns_auto_compute_domain(variable: str) -> str:
    """CEL: the LWS in `variable` names the opt-in annotation, or a template of it has a key of ours or the channel
    claim. Every step is tested with has(), so the expression never errors."""
    opt_in = webhooks.cel_string(keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION)
    annotated = (
        f"{webhooks.cel_has(variable, 'metadata', 'annotations')} && {opt_in} in {variable}.metadata.annotations"
    )
    templates = webhooks.cel_marked_templates(f"{variable}.spec.leaderWorkerTemplate")
    marked = f"{webhooks.cel_has(variable, 'spec', 'leaderWorkerTemplate')} && {templates}"
    return f"{variable} != null && (({annotated}) || ({marked}))"


SCOPE: scopes.Scope[planner.Snapshot, state.Stores] = scopes.Scope(
    name=planner.MANAGER,
    scope=keys.SCOPE_REPLICA,
    workload_api_version=keys.LWS_API_VERSION,
    workload_kind="LeaderWorkerSet",
    registry=state.registry,
    stores=state.STORES,
    plan=planner.plan,
    is_ours=planner.is_ours,
    created=planner.created,
    deleted=deleted,
    admit_pod=pod_admission.admit,
    start_domain=pod_admission.start_domain,
    workload_rules=admission.WorkloadRules(
        plural=keys.LWS_PLURAL,
        stamp=rules.template_patch,
        errors=rules.lws_errors,
        warnings=rules.lws_warnings,
        concerns=concerns_auto_compute_domain,
    ),
    # The pod webhook binds a worker to its leader through the worker's StatefulSet, read afresh; it tells whether
    # a leader's template revision was opted in from upstream's ControllerRevisions (watched, and listed afresh).
    # The LeaderWorkerSet itself is read afresh before any domain is created for it (webhook and reconciler).
    reads=(
        preflight.Access(group=keys.LWS_GROUP, resource=keys.LWS_PLURAL, verbs=("get",)),
        preflight.Access(group="apps", resource="statefulsets", verbs=("get",)),
        preflight.Access(group="apps", resource="controllerrevisions", verbs=("list", "watch")),
    ),
)
CONTROLLER = scopes.register(SCOPE)
