"""The guardian's webhook configuration: only in Deny mode, only for DELETE of managed ComputeDomains."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnnvl_api import keys
from mnnvl_api.models import configuration

ClientConfig = Callable[[str], dict[str, Any]]


def configurations(client_config: ClientConfig, protection: configuration.DeletionProtection) -> list[dict[str, Any]]:
    if protection is not configuration.DeletionProtection.DENY:
        return []
    webhook = {
        "name": f"validate-computedomain-delete.{keys.GUARDIAN_CONTROLLER}.mnnvl.dev",
        "clientConfig": client_config("/validate-computedomain-delete"),
        "rules": [
            {
                "apiGroups": [keys.COMPUTE_DOMAIN_GROUP],
                "apiVersions": [keys.COMPUTE_DOMAIN_VERSION],
                "operations": ["DELETE"],
                "resources": [keys.COMPUTE_DOMAIN_PLURAL],
            }
        ],
        "objectSelector": {
            "matchExpressions": [{"key": keys.MANAGED_BY_LABEL, "operator": "In", "values": list(keys.DOMAIN_MANAGERS)}]
        },
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    }
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {
                "name": f"{keys.GUARDIAN_CONTROLLER}-validating",
                "labels": {keys.MANAGED_BY_LABEL: keys.GUARDIAN_CONTROLLER},
            },
            "webhooks": [webhook],
        }
    ]
