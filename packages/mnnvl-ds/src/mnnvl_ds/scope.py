"""mnnvl-ds as a scope controller (`mnnvl_runtime.scopes`): DisaggregatedSet slices, one ComputeDomain per
(slice, revision)."""

from __future__ import annotations

from typing import Any

from mnnvl_api import keys
from mnnvl_api.decisions import plans, templates
from mnnvl_runtime import admission, controller, preflight, scopes, webhooks

from . import planner, retries, rules, slice_admission, state


def created(domain: plans.DomainToCreate) -> str:
    labels = domain.labels
    return (
        f"Created ComputeDomain {domain.name} for slice {labels[keys.SLICE_LABEL]} at revision "
        f"{labels[keys.REVISION_LABEL]}"
    )


def deleted(snapshot: planner.Snapshot, name: str) -> str:
    domain = snapshot.domains[name]
    return (
        f"Deleted ComputeDomain {name}: no LeaderWorkerSet of slice {domain.slice} at revision {domain.revision} "
        "remains and no pod uses it"
    )


def upstream_retries(context: controller.Context) -> retries.UpstreamRetries:
    return retries.UpstreamRetries(context.client, may_write=context.elector.may_write)


def concerns_auto_compute_domain(variable: str) -> str:
    """CEL: the DisaggregatedSet in `variable` names an opt-in annotation on itself or on a role, or a role template
    has a key of ours or the channel claim. Every step is tested with has(), so the expression never errors."""
    opt_ins = [
        webhooks.cel_string(key)
        for key in (keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION)
    ]
    annotated = (
        f"{webhooks.cel_has(variable, 'metadata', 'annotations')} && {opt_ins[0]} in {variable}.metadata.annotations"
    )
    role_annotated = (
        f"{webhooks.cel_has('role', 'metadata', 'annotations')} && "
        f"({' || '.join(f'{key} in role.metadata.annotations' for key in opt_ins)})"
    )
    role_marked = (
        f"{webhooks.cel_has('role', 'spec', 'leaderWorkerTemplate')} && "
        f"{webhooks.cel_marked_templates('role.spec.leaderWorkerTemplate')}"
    )
    roles = (
        f"{webhooks.cel_has(variable, 'spec', 'roles')} && "
        f"{variable}.spec.roles.exists(role, ({role_annotated}) || ({role_marked}))"
    )
    return f"{variable} != null && (({annotated}) || ({roles}))"


def slice_scope_child(variable: str) -> str:
    """CEL: the LeaderWorkerSet in `variable` carries a DisaggregatedSet's name label, and a template of it the
    slice stamp. Its templates never change after creation (upstream only scales it), so `object` suffices."""
    ds_label = webhooks.cel_string(keys.DS_NAME_LABEL)
    scope = webhooks.cel_string(keys.SCOPE_LABEL)
    slice_value = webhooks.cel_string(keys.SCOPE_SLICE)
    stamped = []
    for field in templates.TEMPLATE_FIELDS:
        labels = f"{variable}.spec.leaderWorkerTemplate.{field}.metadata.labels"
        stamped.append(
            f"({webhooks.cel_has(f'{variable}.spec.leaderWorkerTemplate', field, 'metadata', 'labels')} && "
            f"{scope} in {labels} && {labels}[{scope}] == {slice_value})"
        )
    labelled = f"{webhooks.cel_has(variable, 'metadata', 'labels')} && {ds_label} in {variable}.metadata.labels"
    return (
        f"{variable} != null && {labelled} && {webhooks.cel_has(variable, 'spec', 'leaderWorkerTemplate')} && "
        f"({' || '.join(stamped)})"
    )


def child_webhooks(client_config: webhooks.ClientConfig) -> list[dict[str, Any]]:
    """`validate-leaderworkerset` (`slice_admission`), for slice-scope LeaderWorkerSets of DisaggregatedSets only."""
    rule = webhooks.rule(keys.LWS_API_VERSION, keys.LWS_PLURAL)
    condition = webhooks.match_condition("slice-scope-leaderworkerset", slice_scope_child("object"))
    return [
        webhooks.entry(
            keys.DS_CONTROLLER, "validate-leaderworkerset", rule, client_config, match_conditions=[condition]
        )
    ]


SCOPE: scopes.Scope[planner.Snapshot, state.Stores] = scopes.Scope(
    name=planner.MANAGER,
    scope=keys.SCOPE_SLICE,
    workload_api_version=keys.DS_API_VERSION,
    workload_kind=keys.DS_KIND,
    registry=state.registry,
    stores=state.STORES,
    plan=planner.plan,
    is_ours=planner.is_ours,
    created=created,
    deleted=deleted,
    admit_pod=slice_admission.admit,
    workload_rules=admission.WorkloadRules(
        plural=keys.DS_PLURAL,
        stamp=rules.ds_patch,
        errors=rules.ds_errors,
        warnings=rules.ds_warnings,
        concerns=concerns_auto_compute_domain,
    ),
    more_validating=child_webhooks,
    # The webhooks read a pod's LeaderWorkerSet and its DisaggregatedSet afresh when the stores do not know them.
    reads=(
        preflight.Access(group=keys.DS_GROUP, resource=keys.DS_PLURAL, verbs=("get",)),
        preflight.Access(group=keys.LWS_GROUP, resource=keys.LWS_PLURAL, verbs=("get",)),
    ),
    follow_up=upstream_retries,
)
CONTROLLER = scopes.register(SCOPE)
