"""Webhook configuration entries, shaped the same for every controller."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Given a webhook path (kopf's handler id), the `clientConfig` that reaches it (URL or Service).
ClientConfig = Callable[[str], dict[str, Any]]


def entry(
    controller: str, handler_id: str, rule: dict[str, Any], client_config: ClientConfig, **extra: Any
) -> dict[str, Any]:
    """One webhook: fails closed, has no side effects, answers within 10 s."""
    return {
        "name": f"{handler_id}.{controller}.mnnvl.dev",
        "clientConfig": client_config(f"/{handler_id}"),
        "rules": [rule],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
        **extra,
    }


def configuration(kind: str, controller: str, suffix: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": f"{controller}-{suffix}", "labels": {"app.kubernetes.io/managed-by": controller}},
        "webhooks": entries,
    }
