"""The webhook configurations of mnnvl-lws, for installers (chart, testbed) to register.

Paths are kopf's handler ids. Each webhook sees only the objects that concern AutoComputeDomain, so other
workloads never depend on this controller being available: the pod webhook only pods stamped for the
replica scope (an object selector), the LeaderWorkerSet webhooks only LeaderWorkerSets that carry the opt-in
annotation or mnnvl's marks in a template, now or before the update (a CEL match condition). Those still
fail closed.
"""

from __future__ import annotations

from typing import Any

from mnnvl_api import keys
from mnnvl_runtime import webhooks

LWS_RULE = {
    "apiGroups": [keys.LWS_GROUP],
    "apiVersions": ["v1"],
    "operations": ["CREATE", "UPDATE"],
    "resources": ["leaderworkersets"],
}


def concerns_auto_compute_domain(variable: str) -> str:
    """CEL: the LWS in `variable` (`object` or `oldObject`, null when the request has none) names the
    opt-in annotation, or a template of it has a key of ours or the channel claim.

    Every step is tested with has(), so the expression never errors: with failurePolicy Fail an error
    would reject the request, whatever the object.
    """
    opt_in = webhooks.cel_string(keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION)
    annotated = (
        f"{webhooks.cel_has(variable, 'metadata', 'annotations')} && {opt_in} in {variable}.metadata.annotations"
    )
    templates = webhooks.cel_marked_templates(f"{variable}.spec.leaderWorkerTemplate")
    marked = f"{webhooks.cel_has(variable, 'spec', 'leaderWorkerTemplate')} && {templates}"
    return f"{variable} != null && (({annotated}) || ({marked}))"


#: Only LeaderWorkerSets that concern AutoComputeDomain, before or after the change, reach the LWS webhooks.
LWS_MATCH_CONDITIONS = (
    webhooks.match_condition(
        "concerns-auto-compute-domain",
        f"({concerns_auto_compute_domain('object')}) || ({concerns_auto_compute_domain('oldObject')})",
    ),
)


def configurations(client_config: webhooks.ClientConfig) -> list[dict[str, Any]]:
    me = keys.LWS_CONTROLLER
    mutate = webhooks.entry(
        me,
        "mutate-leaderworkerset",
        LWS_RULE,
        client_config,
        match_conditions=LWS_MATCH_CONDITIONS,
        reinvocationPolicy="Never",
    )
    validate = webhooks.entry(
        me, "validate-leaderworkerset", LWS_RULE, client_config, match_conditions=LWS_MATCH_CONDITIONS
    )
    return webhooks.scope_configurations(
        me, client_config, scope=keys.SCOPE_REPLICA, mutating=[mutate], validating=[validate]
    )
