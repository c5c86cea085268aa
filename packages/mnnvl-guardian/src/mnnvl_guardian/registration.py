"""The guardian's webhook configuration: only in Deny mode, only for DELETE of managed ComputeDomains."""

from __future__ import annotations

from typing import Any

from mnnvl_api import keys
from mnnvl_api.models import configuration
from mnnvl_runtime import webhooks

DELETE_RULE = webhooks.rule(keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, ("DELETE",))


def configurations(
    client_config: webhooks.ClientConfig, protection: configuration.DeletionProtection
) -> list[dict[str, Any]]:
    if protection is not configuration.DeletionProtection.DENY:
        return []
    managed = {
        "matchExpressions": [{"key": keys.MANAGED_BY_LABEL, "operator": "In", "values": list(keys.DOMAIN_MANAGERS)}]
    }
    me = keys.GUARDIAN_CONTROLLER
    entry = webhooks.entry(me, "validate-computedomain-delete", DELETE_RULE, client_config, objectSelector=managed)
    return [webhooks.configuration("ValidatingWebhookConfiguration", me, "validating", [entry])]


def deny_mode_configurations(client_config: webhooks.ClientConfig) -> list[dict[str, Any]]:
    """What installers register: the configurations of Deny mode (the chart renders them only in that mode)."""
    return configurations(client_config, configuration.DeletionProtection.DENY)
