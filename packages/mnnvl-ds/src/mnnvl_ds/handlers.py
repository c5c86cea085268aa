"""kopf wiring: watch events and fresh lists feed the stores and queue the affected DisaggregatedSets; the
Lease holder reconciles them: stores → snapshot → plan → executor, never before the stores are synced.

The event handlers are `async` (they do no I/O) so that they run on the event loop thread, like the
reconciler that reads the stores and the work queue they feed; kopf would run sync ones in threads."""

from __future__ import annotations

from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_runtime import operator, reconciling

from . import executor, planner, state

RESYNC_SECONDS = 30.0
#: Only slice-scope pods and the LeaderWorkerSets of DisaggregatedSets are sent to this controller (all
#: ComputeDomains are: a foreign one may collide).
WATCH_SELECTORS: operator.WatchSelectors = {
    "pods": state.POD_SELECTOR,
    (keys.LWS_GROUP, keys.LWS_VERSION, keys.LWS_PLURAL): state.LWS_SELECTOR,
}


STORES = state.STORES
_reconciler: reconciling.ScopeReconciler[planner.Snapshot] | None = None
_retries: executor.UpstreamRetries | None = None


def reconciler() -> reconciling.ScopeReconciler[planner.Snapshot]:
    assert _reconciler is not None, "the controller has not started"
    return _reconciler


def retries() -> executor.UpstreamRetries:
    assert _retries is not None, "the controller has not started"
    return _retries


@kopf.on.startup(registry=state.registry, id="start-reconciler")
async def start_reconciler(memo: kopf.Memo, **_: Any) -> None:
    global _reconciler  # noqa: PLW0603 - one reconciler per process, created once kopf runs
    global _retries  # noqa: PLW0603 - as the reconciler
    context = operator.context_of(memo)
    _retries = asking = executor.UpstreamRetries(context.client, may_write=context.elector.may_write)
    context.elector.on_change.append(asking.on_lease_change)
    _reconciler = reconciling.ScopeReconciler(
        context,
        STORES,
        planner.plan,
        lambda writer: executor.Executor(writer, asking),
        kind=keys.DS_KIND,
        scope=keys.SCOPE_SLICE,
        resync_seconds=RESYNC_SECONDS,
    )
    memo["tasks"] = _reconciler.start()


@kopf.on.event("pods", labels={keys.SCOPE_LABEL: keys.SCOPE_SLICE}, id="pods", registry=state.registry)
async def on_pod(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.pod_mirror.observe(body, deleted=type == "DELETED"))


@kopf.on.event(keys.DS_GROUP, keys.DS_VERSION, keys.DS_PLURAL, id="disaggregatedsets", registry=state.registry)
async def on_workload(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.workload_mirror.observe(body, deleted=type == "DELETED"))


@kopf.on.event(
    keys.LWS_GROUP,
    keys.LWS_VERSION,
    keys.LWS_PLURAL,
    labels={keys.DS_NAME_LABEL: kopf.PRESENT},
    id="leaderworkersets",
    registry=state.registry,
)
async def on_child(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.child_mirror.observe(body, deleted=type == "DELETED"))


@kopf.on.event(
    keys.COMPUTE_DOMAIN_GROUP,
    keys.COMPUTE_DOMAIN_VERSION,
    keys.COMPUTE_DOMAIN_PLURAL,
    id="computedomains",
    registry=state.registry,
)
async def on_domain(body: kopf.Body, type: str, **_: Any) -> None:
    touched = STORES.domain_mirror.observe(body, deleted=type == "DELETED")
    if type == "DELETED":  # a foreign domain that held a slice back may be gone
        touched += retries().held_by(body.metadata.namespace or "", body.metadata.name or "")
    reconciler().enqueue(*touched)


@kopf.on.event("resource.k8s.io", "v1", "resourceclaimtemplates", id="claimtemplates", registry=state.registry)
async def on_template(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.template_mirror.observe(body, deleted=type == "DELETED"))
