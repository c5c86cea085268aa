"""The webhook configurations of mnnvl-ds, for installers (chart, testbed) to register.

Paths are kopf's handler ids. Each webhook sees only the objects that concern AutoComputeDomain, so other
workloads never depend on this controller being available (a plain DisaggregatedSet is created while it is
down): the DisaggregatedSet webhooks only sets that carry an opt-in annotation, on the set or a role, or
mnnvl's marks in a role template, now or before the update; the LeaderWorkerSet webhook only LeaderWorkerSets
of a DisaggregatedSet whose templates carry the slice stamp (CEL match conditions); the pod webhook only
slice-scope pods (an object selector). Those still fail closed.
"""

from __future__ import annotations

from typing import Any

from mnnvl_api import keys
from mnnvl_api.decisions import templates
from mnnvl_runtime import webhooks

DS_RULE = {
    "apiGroups": [keys.DS_GROUP],
    "apiVersions": [keys.DS_VERSION],
    "operations": ["CREATE", "UPDATE"],
    "resources": [keys.DS_PLURAL],
}
LWS_RULE = {
    "apiGroups": [keys.LWS_GROUP],
    "apiVersions": [keys.LWS_VERSION],
    "operations": ["CREATE", "UPDATE"],
    "resources": [keys.LWS_PLURAL],
}


def ds_concerns_auto_compute_domain(variable: str) -> str:
    """CEL: the DisaggregatedSet in `variable` (`object` or `oldObject`, null when the request has none) names an
    opt-in annotation on itself or on a role, or a role template has a key of ours or the channel claim.

    Every step is tested with has(), so the expression never errors: with failurePolicy Fail an error would
    reject the request, whatever the object."""
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


#: Only DisaggregatedSets that concern AutoComputeDomain, before or after the change, reach the DS webhooks.
DS_MATCH_CONDITIONS = (
    webhooks.match_condition(
        "concerns-auto-compute-domain",
        f"({ds_concerns_auto_compute_domain('object')}) || ({ds_concerns_auto_compute_domain('oldObject')})",
    ),
)
#: Only the slice-scope LeaderWorkerSets of DisaggregatedSets reach the LeaderWorkerSet webhook.
LWS_MATCH_CONDITIONS = (webhooks.match_condition("slice-scope-leaderworkerset", slice_scope_child("object")),)


def configurations(client_config: webhooks.ClientConfig) -> list[dict[str, Any]]:
    me = keys.DS_CONTROLLER
    mutate = webhooks.entry(
        me,
        "mutate-disaggregatedset",
        DS_RULE,
        client_config,
        match_conditions=DS_MATCH_CONDITIONS,
        reinvocationPolicy="Never",
    )
    validate = [
        webhooks.entry(me, "validate-disaggregatedset", DS_RULE, client_config, match_conditions=DS_MATCH_CONDITIONS),
        webhooks.entry(me, "validate-leaderworkerset", LWS_RULE, client_config, match_conditions=LWS_MATCH_CONDITIONS),
    ]
    return webhooks.scope_configurations(
        me, client_config, scope=keys.SCOPE_SLICE, mutating=[mutate], validating=validate
    )
