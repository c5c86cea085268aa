"""The reconciliation machinery every controller shares: watch stores filled and re-checked from fresh lists,
a work queue only the Lease holder works (`reconciliation.concurrency` keys at once, one pass per key at a
time), no pass before the stores are synced, and the domain writer; and the reconciler of a scope controller
built on them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from mnnvl_api.decisions import plans

from . import controller, domain_writer, metrics, stores, workqueue

Key = TypeVar("Key", bound=Hashable)


class Reconciling(Generic[Key]):
    def __init__(
        self,
        context: controller.Context,
        mirrors: Sequence[stores.Mirror[Key]],
        work: Callable[[Key], Coroutine[Any, Any, None]],
        *,
        kind: str,
        scope: str,
    ) -> None:
        self._work = work
        self.writer = domain_writer.DomainWriter(
            context.client,
            component=context.identity.reporting_component,
            scope=scope,
            fence_seconds=context.configuration.compute_domain.deletion_fence_seconds,
            may_write=context.elector.may_write,
            term=context.elector.term,
        )
        self.queue: workqueue.WorkQueue[Key] = workqueue.WorkQueue(
            context.elector, self._pass, kind=kind, concurrency=context.configuration.reconciliation.concurrency
        )
        self.sync: stores.StoreSync[Key] = stores.StoreSync(
            context.client,
            mirrors,
            every=context.configuration.watching.store_resync_seconds,
            touched=lambda found: self.queue.enqueue(*found),
        )
        self.kind = kind

    async def _pass(self, key: Key) -> None:
        await self.sync.synced.wait()  # no decision before every store holds a complete list
        await self._work(key)

    def start(
        self, keys: Callable[[], Iterable[Key]], *, every: float, then: Callable[[], None]
    ) -> list[asyncio.Task[None]]:
        """Run the store sync and the queue (with its resync of every key each `every` seconds, then `then`);
        every loop is watched by the liveness probe, and the readiness probe waits for the stores."""
        sync = asyncio.create_task(self.sync.run(), name=f"store-sync-{self.kind}")
        controller.watch_tasks(sync)
        controller.watch_store_sync(self.kind, self.sync.synced)
        return [*self.queue.start(keys, every=every, then=then), sync]


Snapshot = TypeVar("Snapshot")
Snapshot_co = TypeVar("Snapshot_co", covariant=True)
Snapshot_contra = TypeVar("Snapshot_contra", contravariant=True)


class ScopeState(Protocol[Snapshot_co]):
    """What a scope controller (replica, slice) knows, as its reconciler reads it: watch stores keyed by workload
    (namespace, name), a snapshot of one workload, and the pods its gate holds."""

    shared: stores.DomainStores

    @property
    def mirrors(self) -> Sequence[stores.Mirror[stores.NamespacedName]]: ...

    def snapshot(self, namespace: str, name: str, *, gate_enabled: bool) -> Snapshot_co: ...

    def workload_keys(self) -> list[stores.NamespacedName]: ...

    def gated_pods(self) -> int: ...


class PlanApplier(Protocol[Snapshot_contra]):
    """What applies a scope's plan (`scopes.ScopeExecutor`); returns in how many seconds to come back, if ever."""

    async def apply(self, snapshot: Snapshot_contra, plan: plans.Plan) -> float | None: ...


class ScopeReconciler(Generic[Snapshot]):
    """Reconciles one workload of a scope controller at a time: stores → snapshot → plan → executor, and comes
    back when the executor asks (a deletion fence)."""

    def __init__(
        self,
        context: controller.Context,
        state: ScopeState[Snapshot],
        plan: Callable[[Snapshot], plans.Plan],
        executor: Callable[[domain_writer.DomainWriter], PlanApplier[Snapshot]],
        *,
        kind: str,
        scope: str,
        resync_seconds: float,
    ) -> None:
        self.context = context
        self.state = state
        self.plan = plan
        self.scope = scope
        self.resync_seconds = resync_seconds
        self.loop: Reconciling[stores.NamespacedName] = Reconciling(
            context, state.mirrors, self.reconcile, kind=kind, scope=scope
        )
        self.executor = executor(self.loop.writer)

    def enqueue(self, *workloads: stores.NamespacedName) -> None:
        self.loop.queue.enqueue(*workloads)

    async def reconcile(self, workload: stores.NamespacedName) -> None:
        snapshot = self.state.snapshot(*workload, gate_enabled=self.context.gate_enabled)
        come_back = await self.executor.apply(snapshot, self.plan(snapshot))
        if come_back is not None:
            self.loop.queue.enqueue_after(come_back, workload)

    def publish_gauges(self) -> None:
        for state_name, count in self.state.shared.domain_states().items():
            metrics.COMPUTE_DOMAINS.labels(scope=self.scope, state=state_name).set(count)
        metrics.GATED_PODS.labels(scope=self.scope).set(self.state.gated_pods())

    def start(self) -> list[asyncio.Task[None]]:
        """Run the store sync, the queue and its resync of every workload (which refreshes the gauges)."""
        return self.loop.start(self.state.workload_keys, every=self.resync_seconds, then=self.publish_gauges)
