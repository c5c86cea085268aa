"""kopf wiring: watch events and fresh lists feed the stores and queue the affected LeaderWorkerSets; the
Lease holder reconciles them: stores → snapshot → plan → executor, never before the stores are synced.

The event handlers are `async` (they do no I/O) so that they run on the event loop thread, like the
reconciler that reads the stores and the work queue they feed; kopf would run sync ones in threads."""

from __future__ import annotations

from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_runtime import metrics, operator, reconciling

from . import executor, planner, state

RESYNC_SECONDS = 30.0
#: Only replica-scope pods are sent to this controller (all ComputeDomains are: a foreign one may collide).
WATCH_SELECTORS: operator.WatchSelectors = {"pods": state.POD_SELECTOR}


class Reconciler:
    """Reconciles one LeaderWorkerSet at a time: stores → snapshot → plan → executor."""

    def __init__(self, context: operator.Context, stores_: state.Stores) -> None:
        self.context = context
        self.stores = stores_
        self.loop: reconciling.Reconciling[state.NamespacedName] = reconciling.Reconciling(
            context, stores_.mirrors, self.reconcile, kind="LeaderWorkerSet", scope=keys.SCOPE_REPLICA
        )
        self.executor = executor.Executor(self.loop.writer)

    def enqueue(self, *workloads: state.NamespacedName) -> None:
        self.loop.queue.enqueue(*workloads)

    async def reconcile(self, workload: state.NamespacedName) -> None:
        snapshot = self.stores.snapshot(*workload, gate_enabled=self.context.gate_enabled)
        come_back = await self.executor.apply(snapshot, planner.plan(snapshot))
        if come_back is not None:
            self.loop.queue.enqueue_after(come_back, workload)

    def publish_gauges(self) -> None:
        for state_name, count in self.stores.shared.domain_states().items():
            metrics.COMPUTE_DOMAINS.labels(scope=keys.SCOPE_REPLICA, state=state_name).set(count)
        gated = sum(1 for key in self.stores.pods.groups() for pod in self.stores.pods.get(key).values() if pod.gated)
        metrics.GATED_PODS.labels(scope=keys.SCOPE_REPLICA).set(gated)


STORES = state.STORES
_reconciler: Reconciler | None = None


def reconciler() -> Reconciler:
    assert _reconciler is not None, "the controller has not started"
    return _reconciler


@kopf.on.startup(registry=state.registry, id="start-reconciler")
async def start_reconciler(memo: kopf.Memo, **_: Any) -> None:
    global _reconciler  # noqa: PLW0603 - one reconciler per process, created once kopf runs
    context = operator.context_of(memo)
    _reconciler = Reconciler(context, STORES)
    memo["tasks"] = _reconciler.loop.start(STORES.workload_keys, every=RESYNC_SECONDS, then=_reconciler.publish_gauges)


@kopf.on.event("pods", labels={keys.SCOPE_LABEL: kopf.PRESENT}, id="pods", registry=state.registry)
async def on_pod(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.pod_mirror.observe(body, deleted=type == "DELETED"))


@kopf.on.event(keys.LWS_GROUP, keys.LWS_VERSION, keys.LWS_PLURAL, id="leaderworkersets", registry=state.registry)
async def on_workload(body: kopf.Body, type: str, **_: Any) -> None:
    reconciler().enqueue(*STORES.workload_mirror.observe(body, deleted=type == "DELETED"))


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
