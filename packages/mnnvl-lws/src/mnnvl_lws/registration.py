"""The webhook configurations of mnnvl-lws, for installers (chart, testbed) to register.

Paths are kopf's handler ids. The pod webhook only sees pods stamped for the replica scope, so pods of
other workloads never depend on this controller being available.
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
POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}


def configurations(client_config: webhooks.ClientConfig) -> list[dict[str, Any]]:
    me = keys.LWS_CONTROLLER
    pod_selector = {"matchLabels": {keys.SCOPE_LABEL: keys.SCOPE_REPLICA}}
    return [
        webhooks.configuration(
            "MutatingWebhookConfiguration",
            me,
            "mutating",
            [
                webhooks.entry(me, "mutate-leaderworkerset", LWS_RULE, client_config, reinvocationPolicy="Never"),
                webhooks.entry(
                    me,
                    "mutate-pod",
                    POD_RULE,
                    client_config,
                    objectSelector=pod_selector,
                    reinvocationPolicy="IfNeeded",
                ),
            ],
        ),
        webhooks.configuration(
            "ValidatingWebhookConfiguration",
            me,
            "validating",
            [webhooks.entry(me, "validate-leaderworkerset", LWS_RULE, client_config)],
        ),
    ]
