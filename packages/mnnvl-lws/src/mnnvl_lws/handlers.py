"""kopf wiring: watch events and fresh lists feed the stores and queue the affected LeaderWorkerSets; the
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
#: Only replica-scope pods and the ControllerRevisions of LWS template revisions are sent to this controller (all
#: ComputeDomains are: a foreign one may collide).
WATCH_SELECTORS: operator.WatchSelectors = {
    "pods": state.POD_SELECTOR,
    ("apps", "v1", "controllerrevisions"): state.REVISION_SELECTOR,
}


STORES = state.STORES
_reconciler: reconciling.ScopeReconciler[planner.Snapshot] | None = None


def reconciler() -> reconciling.ScopeReconciler[planner.Snapshot]:
    assert _reconciler is not None, "the controller has not started"
    return _reconciler


@kopf.on.startup(registry=state.registry, id="start-reconciler")
async def start_reconciler(memo: kopf.Memo, **_: Any) -> None:
    global _reconciler  # noqa: PLW0603 - one reconciler per process, created once kopf runs
    context = operator.context_of(memo)
    _reconciler = reconciling.ScopeReconciler(
        context,
        STORES,
        planner.plan,
        executor.Executor,
        kind="LeaderWorkerSet",
        scope=keys.SCOPE_REPLICA,
        resync_seconds=RESYNC_SECONDS,
    )
    memo["tasks"] = _reconciler.start()


@kopf.on.event("pods", labels={keys.SCOPE_LABEL: kopf.PRESENT}, id="pods", registry=state.registry)
async def on_pod(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.pod_mirror.observe(body, deleted=type == "DELETED"))


@kopf.on.event(keys.LWS_GROUP, keys.LWS_VERSION, keys.LWS_PLURAL, id="leaderworkersets", registry=state.registry)
async def on_workload(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.workload_mirror.observe(body, deleted=type == "DELETED"))


@kopf.on.event(
    "apps",
    "v1",
    "controllerrevisions",
    labels={keys.LWS_TEMPLATE_REVISION_HASH_LABEL: kopf.PRESENT},
    id="controllerrevisions",
    registry=state.registry,
)
async def on_revision(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.revision_mirror.observe(body, deleted=type == "DELETED"))


@kopf.on.event(
    keys.COMPUTE_DOMAIN_GROUP,
    keys.COMPUTE_DOMAIN_VERSION,
    keys.COMPUTE_DOMAIN_PLURAL,
    id="computedomains",
    registry=state.registry,
)
async def on_domain(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.domain_mirror.observe(body, deleted=type == "DELETED"))


@kopf.on.event("resource.k8s.io", "v1", "resourceclaimtemplates", id="claimtemplates", registry=state.registry)
async def on_template(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.template_mirror.observe(body, deleted=type == "DELETED"))
