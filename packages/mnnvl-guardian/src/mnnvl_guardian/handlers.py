"""kopf wiring: domain and pod events feed the stores and queue domains; the Lease holder protects and
releases them one at a time."""

from __future__ import annotations

from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_runtime import operator, workqueue

from . import executor, planner, state, telemetry

RESYNC_SECONDS = 30.0
#: Only pods our webhooks gave a scope, and only managed ComputeDomains, are sent to the guardian.
WATCH_SELECTORS: operator.WatchSelectors = {
    "pods": keys.SCOPE_LABEL,
    (keys.COMPUTE_DOMAIN_GROUP, keys.COMPUTE_DOMAIN_VERSION, keys.COMPUTE_DOMAIN_PLURAL): (
        f"{keys.MANAGED_BY_LABEL} in ({','.join(sorted(keys.DOMAIN_MANAGERS))})"
    ),
}
STORES = state.Stores()
_queue: workqueue.WorkQueue[state.NamespacedName] | None = None


def queue() -> workqueue.WorkQueue[state.NamespacedName]:
    assert _queue is not None, "the guardian has not started"
    return _queue


def _managed(value: str | None, **_: Any) -> bool:
    return value in keys.DOMAIN_MANAGERS


@kopf.on.startup(registry=state.registry, id="start-guardian")
async def start(memo: Any, **_: Any) -> None:
    global _queue  # noqa: PLW0603 - one queue per process, created once kopf runs
    context = operator.context_of(memo)

    async def guard(key: state.NamespacedName) -> None:
        domain = STORES.domain(key)
        if domain is None:
            return
        action = planner.decide(
            domain, template_in_use=STORES.template_in_use(domain), gate_enabled=context.gate_enabled
        )
        await executor.apply(context.client, domain, action)
        publish_gauges()

    _queue = workqueue.WorkQueue(context.elector, guard, kind="ComputeDomain")
    memo["tasks"] = _queue.start(STORES.domain_keys, every=RESYNC_SECONDS, then=publish_gauges)


def publish_gauges() -> None:
    terminating = sum(
        1 for key in STORES.domain_keys() if (facts := STORES.domain(key)) and facts.deleting and facts.protected
    )
    telemetry.TERMINATING.set(terminating)


@kopf.on.event(
    keys.COMPUTE_DOMAIN_GROUP,
    keys.COMPUTE_DOMAIN_VERSION,
    keys.COMPUTE_DOMAIN_PLURAL,
    labels={keys.MANAGED_BY_LABEL: _managed},
    id="computedomains",
    registry=state.registry,
)
async def on_domain(body: kopf.Body, type: str, **_: Any) -> None:
    key = STORES.observe_domain(body, deleted=type == "DELETED")
    if key is not None:
        queue().enqueue(key)


@kopf.on.event("pods", labels={keys.SCOPE_LABEL: kopf.PRESENT}, id="pods", registry=state.registry)
async def on_pod(body: kopf.Body, type: str, **_: Any) -> None:
    queue().enqueue(*STORES.observe_pod(body, deleted=type == "DELETED"))
