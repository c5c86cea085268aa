"""The webhook configurations of mnnvl-lws, for installers (chart, testbed) to register.

Paths are kopf's handler ids. The pod webhook only sees pods stamped for the replica scope, so pods of
other workloads never depend on this controller being available.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnnvl_api import keys

ClientConfig = Callable[[str], dict[str, Any]]  # webhook path → clientConfig
LWS_RULE = {
    "apiGroups": ["leaderworkerset.x-k8s.io"],
    "apiVersions": ["v1"],
    "operations": ["CREATE", "UPDATE"],
    "resources": ["leaderworkersets"],
}
POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}


def _webhook(handler_id: str, rule: dict[str, Any], client_config: ClientConfig, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"{handler_id}.{keys.LWS_CONTROLLER}.mnnvl.dev",
        "clientConfig": client_config(f"/{handler_id}"),
        "rules": [rule],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
        **extra,
    }


def configurations(client_config: ClientConfig) -> list[dict[str, Any]]:
    pod_selector = {"matchLabels": {keys.SCOPE_LABEL: keys.SCOPE_REPLICA}}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {
                "name": f"{keys.LWS_CONTROLLER}-mutating",
                "labels": {keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER},
            },
            "webhooks": [
                _webhook("mutate-leaderworkerset", LWS_RULE, client_config, reinvocationPolicy="Never"),
                _webhook(
                    "mutate-pod", POD_RULE, client_config, objectSelector=pod_selector, reinvocationPolicy="IfNeeded"
                ),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {
                "name": f"{keys.LWS_CONTROLLER}-validating",
                "labels": {keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER},
            },
            "webhooks": [_webhook("validate-leaderworkerset", LWS_RULE, client_config)],
        },
    ]
