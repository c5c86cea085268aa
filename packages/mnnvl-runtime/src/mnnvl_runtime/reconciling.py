"""The reconciliation machinery every controller shares: watch stores filled and re-checked from fresh lists,
a work queue only the Lease holder works (`reconciliation.concurrency` keys at once, one pass per key at a
time), no pass before the stores are synced, and the domain writer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from . import domains, operator, stores, workqueue

Key = TypeVar("Key", bound=Hashable)


class Reconciling(Generic[Key]):
    def __init__(
        self,
        context: operator.Context,
        mirrors: Sequence[stores.Mirror[Key]],
        work: Callable[[Key], Coroutine[Any, Any, None]],
        *,
        kind: str,
        scope: str,
    ) -> None:
        self._work = work
        self.writer = domains.DomainWriter(
            context.client,
            component=context.identity.reporting_component,
            scope=scope,
            fence_seconds=context.configuration.compute_domain.deletion_fence_seconds,
            may_write=context.elector.may_write,
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
        every loop is watched by the liveness probe."""
        sync = asyncio.create_task(self.sync.run(), name=f"store-sync-{self.kind}")
        operator.watch_tasks(sync)
        return [*self.queue.start(keys, every=every, then=then), sync]
