"""A de-duplicating work queue that only the Lease holder works, with periodic level-triggered resyncs.

Watch handlers enqueue keys; one worker takes them in turn and runs the controller's reconcile function.
A failed pass is counted and retried later; one bad key never stops the others. A loop that must run
forever and ends anyway is reported loudly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, TypeVar

from . import leases, metrics

log = logging.getLogger(__name__)
Key = TypeVar("Key", bound=Hashable)


class WorkQueue(Generic[Key]):
    def __init__(
        self,
        elector: leases.LeaderElector,
        work: Callable[[Key], Awaitable[None]],
        *,
        kind: str,
        retry_seconds: float = 2.0,
    ) -> None:
        self.elector = elector
        self.work = work
        self.kind = kind
        self.retry_seconds = retry_seconds
        self.queue: asyncio.Queue[Key] = asyncio.Queue()
        self.pending: set[Key] = set()

    def enqueue(self, *keys: Key) -> None:
        for key in keys:
            if key not in self.pending:
                self.pending.add(key)
                self.queue.put_nowait(key)

    async def run(self) -> None:
        while True:
            await self.elector.leading_event.wait()
            key = await self.queue.get()
            self.pending.discard(key)
            if not self.elector.is_leader:
                continue  # lost the Lease while waiting; the next holder resyncs everything
            try:
                await self.work(key)
            except Exception:  # retried later; one bad key must not stop the others
                metrics.RECONCILE_ERRORS.labels(kind=self.kind).inc()
                log.exception("reconcile failed", extra={"kind": self.kind, "key": str(key)})
                asyncio.get_running_loop().call_later(self.retry_seconds, self.enqueue, key)

    async def resync(self, keys: Callable[[], Iterable[Key]], *, every: float, then: Callable[[], None]) -> None:
        """Queue every known key on gaining the Lease and every `every` seconds, so missed events heal."""
        while True:
            await self.elector.leading_event.wait()
            self.enqueue(*keys())
            then()
            await asyncio.sleep(every)

    def start(
        self, keys: Callable[[], Iterable[Key]], *, every: float, then: Callable[[], None]
    ) -> list[asyncio.Task[None]]:
        tasks = [
            asyncio.create_task(self.run(), name=f"reconcile-{self.kind}"),
            asyncio.create_task(self.resync(keys, every=every, then=then), name=f"resync-{self.kind}"),
        ]
        for task in tasks:
            task.add_done_callback(_report_death)
        return tasks


def _report_death(task: asyncio.Task[None]) -> None:
    """A loop that must run forever ended: say so loudly (a silent controller is the worst failure)."""
    if not task.cancelled() and task.exception() is not None:
        log.critical("controller loop died", extra={"task": task.get_name()}, exc_info=task.exception())
