"""The chart's webhook configurations are the ones each controller registers: the same webhooks,
rules, paths, match conditions, object selectors, side effects and review versions. Only the names, the
clientConfig (Service or URL, CA bundle), the labels and the namespaceSelector are the chart's own."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_runtime import webhook_manifests

from .conftest import Render, by_kind

CHART_OWNED_WEBHOOK_FIELDS = ("clientConfig", "namespaceSelector")


def comparable(configuration: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    webhooks = [
        {key: value for key, value in webhook.items() if key not in CHART_OWNED_WEBHOOK_FIELDS}
        for webhook in configuration["webhooks"]
    ]
    return configuration["kind"], webhooks


@pytest.mark.parametrize("block", ["lws", "ds", "guardian"])
def test_rendered_webhook_configurations_match_registration(render: Render, block: str) -> None:
    overrides: dict[str, Any] = {name: {"enabled": name == block} for name in ("lws", "ds", "guardian")}
    overrides["guardian"]["deletionProtection"] = "Deny"  # the guardian registers its webhook in Deny mode only
    objects = render(overrides=overrides)
    rendered = [
        *by_kind(objects, "MutatingWebhookConfiguration").values(),
        *by_kind(objects, "ValidatingWebhookConfiguration").values(),
    ]
    registered = webhook_manifests.registered()[block](webhook_manifests.path_only)
    assert sorted(map(comparable, rendered), key=repr) == sorted(map(comparable, registered), key=repr)
    paths = sorted(webhook["clientConfig"]["service"]["path"] for item in rendered for webhook in item["webhooks"])
    assert paths == sorted(webhook["clientConfig"]["path"] for item in registered for webhook in item["webhooks"])
