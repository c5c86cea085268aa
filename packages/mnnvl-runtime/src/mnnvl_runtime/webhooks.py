"""Webhook configuration entries, shaped the same for every controller, and the CEL that narrows them."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from mnnvl_api import keys
from mnnvl_api.decisions import templates

from . import identity

#: Given a webhook path (kopf's handler id), the `clientConfig` that reaches it (URL or Service).
ClientConfig = Callable[[str], dict[str, Any]]
#: A `matchConditions` item: `{"name": ..., "expression": ...}`, the expression in CEL.
MatchCondition = dict[str, str]
#: The handler id (and path) of every scope controller's pod webhook.
POD_WEBHOOK = "mutate-pod"


def webhook_name(controller: str, handler_id: str) -> str:
    """The name of a controller's webhook, as its configuration registers it."""
    return f"{handler_id}.{controller}.{identity.BOOKKEEPING_DOMAIN}"


def entry(
    controller: str,
    handler_id: str,
    rule: dict[str, Any],
    client_config: ClientConfig,
    *,
    match_conditions: Sequence[MatchCondition] = (),
    **extra: Any,
) -> dict[str, Any]:
    """One webhook: fails closed, has no side effects (unless `extra` says otherwise), answers within 10 s.

    With `match_conditions`, the API server calls it only for requests that meet every condition, so only
    those fail while the controller is down.
    """
    webhook: dict[str, Any] = {
        "name": webhook_name(controller, handler_id),
        "clientConfig": client_config(f"/{handler_id}"),
        "rules": [rule],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
        **extra,
    }
    if match_conditions:
        webhook["matchConditions"] = [dict(condition) for condition in match_conditions]
    return webhook


def rule(api_version: str, plural: str, operations: Sequence[str] = ("CREATE", "UPDATE")) -> dict[str, Any]:
    """A webhook rule: these operations on the resource `plural` of `api_version` (`group/version`, or `v1`)."""
    group, _, version = api_version.rpartition("/")
    return {"apiGroups": [group], "apiVersions": [version], "operations": list(operations), "resources": [plural]}


#: Writes of ComputeDomains (not their status).
DOMAIN_WRITE_RULE = rule(keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL)
DOMAIN_IDENTITY_WEBHOOK = "validate-computedomain"


def cel_manager_entries(variable: str, manager: str) -> str:
    """CEL: the (operation, subresource, time) of `manager`'s managedFields entries in `variable` (not null), as
    strings; the API server renews an entry's time whenever a request writes fields as that manager."""
    name = cel_string(manager)
    fields = f"{variable}.metadata.managedFields"
    described = (
        "e.operation + '/' + (has(e.subresource) ? e.subresource : '') + '@' + (has(e.time) ? string(e.time) : '')"
    )
    return (
        f"({cel_has(variable, 'metadata', 'managedFields')} ? "
        f"{fields}.filter(e, has(e.manager) && e.manager == {name}).map(e, {described}) : [])"
    )


def domain_identity_entry(controller: str, client_config: ClientConfig) -> dict[str, Any]:
    """The webhook refusing writes of ComputeDomains as `controller`'s field manager by anyone else
    (`admission.refuse_impersonation`). Only domains labelled as `controller`'s, before or after the write, reach it
    (without that label no domain passes for one of `controller`'s), and of those only writes that changed
    `controller`'s managedFields entries: the driver's and the guardian's writes (finalizers, the driver's own
    fields) never wait on this controller, so its outage holds up no one else's work on its domains."""
    selector = {"matchLabels": {keys.MANAGED_BY_LABEL: controller}}
    before = f"(oldObject == null ? [] : {cel_manager_entries('oldObject', controller)})"
    writes_as = match_condition("writes-as-" + controller, f"{cel_manager_entries('object', controller)} != {before}")
    return entry(
        controller,
        DOMAIN_IDENTITY_WEBHOOK,
        DOMAIN_WRITE_RULE,
        client_config,
        match_conditions=(writes_as,),
        objectSelector=selector,
    )


def match_condition(name: str, expression: str) -> MatchCondition:
    return {"name": name, "expression": expression}


def cel_string(value: str) -> str:
    """`value` as a CEL string literal (JSON's escapes are CEL's)."""
    return json.dumps(value)


def cel_has(root: str, *fields: str) -> str:
    """CEL that is true when `root.f1.f2…` is present, testing each step with has() so it never errors.

    `root` itself must not be null.
    """
    return " && ".join(f"has({'.'.join((root, *fields[: depth + 1]))})" for depth in range(len(fields)))


def cel_marked_templates(leader_worker_template: str) -> str:
    """CEL: a pod template of the `leaderWorkerTemplate` at `leader_worker_template` (present, not null) has a key of
    ours (`keys.TEMPLATE_KEY_PREFIX`) in its labels or annotations, or a claim named like the channel claim."""
    prefix = cel_string(keys.TEMPLATE_KEY_PREFIX)
    channel = cel_string(keys.CHANNEL_CLAIM_NAME)
    marked = []
    for field in templates.TEMPLATE_FIELDS:
        template = f"{leader_worker_template}.{field}"
        keyed = [
            f"({cel_has(template, 'metadata', kind)} && "
            f"{template}.metadata.{kind}.exists(key, key.startsWith({prefix})))"
            for kind in ("annotations", "labels")
        ]
        claimed = (
            f"({cel_has(template, 'spec', 'resourceClaims')} && "
            f"{template}.spec.resourceClaims.exists(claim, has(claim.name) && claim.name == {channel}))"
        )
        marked.append(f"(has({template}) && ({' || '.join((*keyed, claimed))}))")
    return f"({' || '.join(marked)})"


def configuration(kind: str, controller: str, suffix: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": f"{controller}-{suffix}", "labels": {"app.kubernetes.io/managed-by": controller}},
        "webhooks": entries,
    }


def scope_configurations(
    controller: str,
    client_config: ClientConfig,
    *,
    scope: str,
    mutating: Sequence[dict[str, Any]],
    validating: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """A scope controller's two configurations: its workload webhooks (`mutating`, `validating`), the pod webhook
    (`scopes.register`'s `mutate-pod`, only for pods stamped with the scope) and the domain identity webhook."""
    pod_rule = rule("v1", "pods", ("CREATE",))
    pods = entry(
        controller,
        POD_WEBHOOK,
        pod_rule,
        client_config,
        objectSelector={"matchLabels": {keys.SCOPE_LABEL: scope}},
        reinvocationPolicy="IfNeeded",
        # A scope may create the domain an admission names (`scopes.Scope.start_domain`), never for a dry run.
        sideEffects="NoneOnDryRun",
    )
    return [
        configuration("MutatingWebhookConfiguration", controller, "mutating", [*mutating, pods]),
        configuration(
            "ValidatingWebhookConfiguration",
            controller,
            "validating",
            [*validating, domain_identity_entry(controller, client_config)],
        ),
    ]
