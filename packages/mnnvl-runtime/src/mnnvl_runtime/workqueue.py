"""A de-duplicating work queue that only the Lease holder works, with periodic level-triggered resyncs.

Watch handlers enqueue keys; `concurrency` workers take them and run the controller's reconcile function,
each pass as its own task. As in client-go's workqueue, a key is in at most one pass at a time: a key queued
while its pass runs is marked dirty and queued again once that pass ends, so it is neither run twice at once
nor lost. A pass starts only while the elector's `may_write()` holds, and the elector cancels every running
pass when it steps down (before it releases the Lease); their keys are queued again for when this replica
leads next. A failed pass is counted and retried after a per-key back-off that doubles from `retry_seconds`
up to `max_retry_seconds` and starts over once the key succeeds (as client-go's
ItemExponentialFailureRateLimiter): a key that keeps failing costs ever less, and one bad key never stops the
others. The loops are registered with the liveness probe: a loop that ends makes the process unhealthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Callable, Coroutine, Hashable, Iterable
from typing import Any, Generic, TypeVar

from mnnvl_api.models import configuration

from . import controller, kube, leases, metrics

log = logging.getLogger(__name__)
Key = TypeVar("Key", bound=Hashable)


def retry_delay(failures: int, *, base: float, cap: float) -> float:
    """Seconds to wait before retrying a key that has failed `failures` times in a row (at least once)."""
    # The exponent is bounded so a key failing for days cannot overflow a float.
    return min(cap, base * 2.0 ** min(failures - 1, 64))


class WorkQueue(Generic[Key]):
    def __init__(
        self,
        elector: leases.LeaderElector,
        work: Callable[[Key], Coroutine[Any, Any, None]],
        *,
        kind: str,
        retry_seconds: float = 0.5,
        max_retry_seconds: float = 300.0,
        concurrency: int = configuration.ReconciliationSettings().concurrency,
    ) -> None:
        """`retry_seconds` is the wait after a key's first failure; each further failure doubles it, up to
        `max_retry_seconds`. `concurrency` is how many passes (each on a different key) may run at once."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.elector = elector
        self.work = work
        self.kind = kind
        self.retry_seconds = retry_seconds
        self.max_retry_seconds = max_retry_seconds
        self.concurrency = concurrency
        #: Keys ready for a worker, each at most once; a key in a pass is never here.
        self.queue: asyncio.Queue[Key] = asyncio.Queue()
        #: Keys that need a pass (client-go's "dirty" set): queued, or in a pass and to be queued once it ends.
        self.pending: set[Key] = set()
        #: Keys in a pass right now.
        self.processing: set[Key] = set()
        #: Keys queued for later (`enqueue_after`), with the timer that will queue them.
        self.waiting: dict[Key, asyncio.TimerHandle] = {}
        #: Failures in a row, by key; a success removes the key.
        self.failures: dict[Key, int] = {}
        self._gained = asyncio.Event()
        elector.on_change.append(self._on_lease_change)

    def enqueue(self, *keys: Key) -> None:
        for key in keys:
            if key not in self.pending:
                self.pending.add(key)
                if key not in self.processing:  # else queued once its running pass ends
                    self.queue.put_nowait(key)

    def enqueue_after(self, delay: float, *keys: Key) -> None:
        """Queue `keys` once `delay` seconds have passed (at once when `delay` <= 0). A key already waiting
        keeps the sooner of its two times, so repeated calls never pile up timers."""
        if delay <= 0:
            self.enqueue(*keys)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        for key in keys:
            timer = self.waiting.get(key)
            if timer is not None:
                if timer.when() <= due:
                    continue
                timer.cancel()
            self.waiting[key] = loop.call_at(due, self._due, key)

    def _due(self, key: Key) -> None:
        del self.waiting[key]
        self.enqueue(key)

    async def run(self) -> None:
        """Run `concurrency` workers until cancelled; cancelling this cancels every worker and its pass."""
        workers = [
            asyncio.create_task(self._worker(), name=f"reconcile-{self.kind}-worker-{number}")
            for number in range(self.concurrency)
        ]
        try:
            await asyncio.gather(*workers)  # workers end only by failing: that ends this loop too
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.wait(workers)
            for timer in self.waiting.values():
                timer.cancel()
            self.waiting.clear()

    async def _worker(self) -> None:
        while True:
            await self.elector.wait_writable()
            key = await self.queue.get()
            self.pending.discard(key)
            if not self.elector.may_write():
                self.enqueue(key)  # stepped down (or overdue to renew) while waiting: keep it for later
                continue
            self.processing.add(key)
            try:
                await self._work_on(key)
            finally:
                self.processing.discard(key)
                if key in self.pending:  # queued again during the pass: its turn comes now
                    self.queue.put_nowait(key)

    async def _work_on(self, key: Key) -> None:
        context = contextvars.copy_context()
        context.run(kube.WRITE_PERMIT.set, self.elector.permit)
        task = asyncio.create_task(self.work(key), name=f"reconcile-{self.kind}-pass", context=context)
        self.elector.track_writer(task)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()  # the queue itself is stopping: no pass outlives it
            raise
        if task.cancelled():
            log.info("reconcile cancelled on stepping down", extra={"kind": self.kind, "key": str(key)})
            self.enqueue(key)
            return
        error = task.exception()
        if error is None:
            self.failures.pop(key, None)
            return
        failures = self.failures[key] = self.failures.get(key, 0) + 1
        delay = retry_delay(failures, base=self.retry_seconds, cap=self.max_retry_seconds)
        metrics.RECONCILE_ERRORS.labels(kind=self.kind).inc()
        log.error(
            "reconcile failed",
            extra={"kind": self.kind, "key": str(key), "failures": failures, "retry_seconds": delay},
            exc_info=error,
        )
        self.enqueue_after(delay, key)

    async def resync(self, keys: Callable[[], Iterable[Key]], *, every: float, then: Callable[[], None]) -> None:
        """Queue every known key on gaining the Lease and every `every` seconds, so missed events heal."""
        while True:
            await self.elector.leading_event.wait()
            self._gained.clear()
            self.enqueue(*keys())
            then()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._gained.wait(), every)

    def _on_lease_change(self, leading: bool) -> None:
        if leading:
            self._gained.set()

    def start(
        self, keys: Callable[[], Iterable[Key]], *, every: float, then: Callable[[], None]
    ) -> list[asyncio.Task[None]]:
        """Run the workers and the resync loop; both are reported by the liveness probe once they end."""
        tasks = [
            asyncio.create_task(self.run(), name=f"reconcile-{self.kind}"),
            asyncio.create_task(self.resync(keys, every=every, then=then), name=f"resync-{self.kind}"),
        ]
        for task in tasks:
            task.add_done_callback(_report_death)
        controller.watch_tasks(*tasks)
        return tasks


def _report_death(task: asyncio.Task[None]) -> None:
    """A loop that must run forever ended: say so loudly (a silent controller is the worst failure)."""
    if not task.cancelled() and task.exception() is not None:
        log.critical("controller loop died", extra={"task": task.get_name()}, exc_info=task.exception())
